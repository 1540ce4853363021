// The CUDA batch_norm and batch_norm_add_relu kernels (kernels/kernel_list.h)
// through cuDNN's graph API; see Note [BatchNorm backends] in
// include/ddp/nn/functional/batch_norm.h. A build without cuDNN registers
// nothing here, and both ops compose tensor ops on CUDA instead.
//
// Note [cuDNN batch norm graphs]
// Each kernel describes its work as a frontend graph (Note [cuDNN graph
// API] in kernels/cuda/cudnn_graph.h), built once per key and cached:
// - training forward: the batchnorm node (the batch's mean and
//   1/sqrt(var + eps) as outputs, the running statistics' update as
//   outputs from the previous values and the momentum), then for the fused
//   op ADD of the residual and RELU_FWD on the virtual bn result;
// - evaluation forward: batchnorm_inference from the running mean and
//   1/sqrt(running_var + eps) (a [C] expression computed first), then the
//   same ADD and RELU_FWD;
// - backward: batchnorm_backward from the saved statistics; for the fused
//   op RELU_BWD (dy masked by the saved output y > 0) first, its result an
//   output when the residual wants its gradient (dresidual = dz) and
//   virtual otherwise.
// The key is everything the plan depends on: the op, dims, strides and
// dtypes of every data tensor, which optional tensors are present, eps and
// momentum (they are pass-by-value scalars in the graph), and the device.
// The graphs assume 16-byte-aligned pointers: every operand they bind, the
// per-channel tensors included (a parameter may be a view into a flat
// buffer), is staged through an aligned copy when it is not, before the key
// is made (Note [cuDNN pointer alignment] in kernels/cuda/cudnn_policy.h). The
// cache is per thread and leaked (Note [Per-thread graph caches]).
// A momentum that changes every step (BatchNorm2d's momentum = nullopt,
// the cumulative average) would build a graph per step: past
// kMaxMomenta distinct values a training forward uses the legacy call,
// which takes the momentum as an argument.
// Fallbacks: cuDNN's graph engines take f16, bf16 and f32 data with f32
// per-channel tensors; f64 data, and any graph for which build() finds no
// engine (or which fails to build on this cuDNN), run the legacy
// cudnnBatchNormalization* calls (batch_norm_legacy_cuda.cpp), the fused
// op then adding the residual and applying relu with tensor ops. A graph
// found unsupported is cached as such, so the fallback costs one build
// attempt per key. Evaluation-mode gradients have no cuDNN call: tensor
// ops (eval_backward).
// Not used here: the frontend's genstats (per-channel sum and sum of
// squares) and bn_finalize (statistics, scale/bias and running update
// from those sums). They split the training forward where something must
// happen between the two halves, which for one device nothing does (the
// batchnorm node computes the same statistics in one graph); their place is
// SyncBatchNorm's CUDA path, whose all-reduce of the sums goes between them.

#include "ddp/config.h"

#if DDP_HAVE_CUDNN

#include <cstring>
#include <set>

#include "ddp/core/error.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/memory_format.h"
#include "kernel_list.h"
#include "cuda/cudnn_graph.h"
#include "cuda/cudnn_policy.h"
#include "cuda/batch_norm_cuda_detail.h"
#include "tensor/device_guard.h"

namespace ddp::nn::functional::batch_norm_cuda {

namespace {

namespace fe = ::cudnn_frontend;
namespace cg = ::ddp::nn::cudnn_graph;
namespace cp = ::ddp::nn::cudnn_policy;
using TensorAttr = std::shared_ptr<fe::graph::Tensor_attributes>;
constexpr const char* kOp = "batch_norm (cuDNN graph)";
constexpr size_t kMaxMomenta = 8;

// The uids the graphs' tensors are bound by.
enum Uid : int64_t {
  kX = 1, kScale, kBias, kPrevMean, kPrevVar, kNextMean, kNextVar, kMean, kInvStd,
  kResidual, kY, kDy, kDz, kDx, kDScale, kDBias
};

// A built graph, or why there is none (then the caller falls back).
struct BnGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  std::string unsupported;
};

// Leaked on purpose, like conv's and attention's caches: a plain static
// would be destroyed at exit, destroying its cuDNN graphs after cuDNN may
// already have unloaded the engine libraries it loads lazily (a crash at
// exit); PyTorch leaks its cuDNN caches for the same reason. See Note
// [Per-thread graph caches] in kernels/cuda/cudnn_graph_cache.h.
cg::GraphCache<BnGraph>& cache() {
  static auto* c = new cg::GraphCache<BnGraph>;
  return *c;
}

bool graph_dtype(DType dt) { return dt == DType::f32 || dt == DType::f16 || dt == DType::bf16; }

std::shared_ptr<fe::graph::Graph> new_graph(DType io) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(cg::data_type(io, kOp))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// A data tensor as it is (dims, strides, dtype).
TensorAttr data_tensor(fe::graph::Graph& g, const Tensor& t, int64_t uid, const char* name) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(cg::dims_of(t))
                      .set_stride(cg::strides_of(t))
                      .set_data_type(cg::data_type(t.dtype(), kOp)));
}
// An f32 per-channel tensor [1, C, 1, 1].
TensorAttr channel_tensor(fe::graph::Graph& g, int64_t c, int64_t uid, const char* name) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({1, c, 1, 1})
                      .set_stride({c, 1, c, c})
                      .set_data_type(fe::DataType_t::FLOAT));
}
// Marks a node's output as a graph output shaped like t.
void data_output(const TensorAttr& out, const Tensor& t, int64_t uid) {
  out->set_output(true)
      .set_uid(uid)
      .set_dim(cg::dims_of(t))
      .set_stride(cg::strides_of(t))
      .set_data_type(cg::data_type(t.dtype(), kOp));
}
void channel_output(const TensorAttr& out, int64_t uid) {
  out->set_output(true).set_uid(uid).set_data_type(fe::DataType_t::FLOAT);
}

// ADD residual (when given) and RELU_FWD after the bn result.
TensorAttr add_relu(fe::graph::Graph& g, TensorAttr bn, const Tensor& residual) {
  if (residual.defined()) {
    TensorAttr r = data_tensor(g, residual, kResidual, "residual");
    bn = g.pointwise(bn, r, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
  }
  return g.pointwise(bn, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
}

// build() on g; a graph no engine takes, or one this cuDNN refuses to
// build, is an answer (the caller falls back), not an error.
BnGraph finish(std::shared_ptr<fe::graph::Graph> g) {
  try {
    if (std::optional<std::string> why = cg::build(*g, kOp)) return {nullptr, *why};
  } catch (const CudnnError& e) {
    return {nullptr, e.what()};
  }
  return {std::move(g), ""};
}

void key_add_double(std::string& key, double v) {
  int64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  cg::key_add(key, bits);
}

std::string key_of(const char* op, const Tensors& data, const std::vector<int64_t>& flags,
                   const std::vector<double>& scalars) {
  std::string key = op;
  key += '|';
  for (const Tensor& t : data) {
    if (t.defined()) cg::key_add(key, t);
    else key += "-;";
  }
  for (int64_t f : flags) cg::key_add(key, f);
  for (double v : scalars) key_add_double(key, v);
  cg::key_add(key, data[0].device().index);
  return key;
}

// Whether a graph may be built for this momentum (see the Note).
bool momentum_has_graphs(double momentum) {
  static std::mutex mu;
  static std::set<double> seen;
  std::lock_guard<std::mutex> g(mu);
  if (seen.count(momentum)) return true;
  if (seen.size() >= kMaxMomenta) return false;
  seen.insert(momentum);
  return true;
}

// relu(y + residual) in place, for the legacy fallback of the fused op:
// the Backend's add and relu, as the frontend's ops would run them.
void add_relu_in_place(const Tensor& y, const Tensor& residual) {
  if (residual.defined()) Tensor(y).add_(residual);
  backend_for(y.device()).unary(UnaryOp::relu, y, y);
}

// The training forward through a graph; false when there is none.
bool graph_train_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                         const Tensor& running_mean, const Tensor& running_var,
                         const Tensor& residual_in, bool fused, double momentum, double eps,
                         const Tensor& y_in, const Tensor& save_mean_in,
                         const Tensor& save_invstd_in) {
  const bool running = running_mean.defined() && running_var.defined();
  if (!graph_dtype(x_in.dtype()) || (running && !momentum_has_graphs(momentum))) return false;
  // Note [cuDNN pointer alignment]: misaligned operands through aligned
  // copies, before the key is made from them.
  cp::AlignedOperands ops;
  const Tensor x = ops.input(x_in), residual = ops.input(residual_in), y = ops.output(y_in);
  const Tensor save_mean = ops.output(save_mean_in), save_invstd = ops.output(save_invstd_in);
  const int64_t c = x.size(1);
  const std::string key = key_of(fused ? "train_add_relu" : "train", {x, residual, y},
                                 {int64_t(fused), int64_t(running)}, {eps, running ? momentum : 0});
  auto entry = cache().get_or_build(key, [&] {
    auto g = new_graph(x.dtype());
    TensorAttr X = data_tensor(*g, x, kX, "x");
    TensorAttr scale = channel_tensor(*g, c, kScale, "scale");
    TensorAttr shift = channel_tensor(*g, c, kBias, "bias");
    TensorAttr epsilon = g->tensor(float(eps));
    auto attrs = fe::graph::Batchnorm_attributes().set_epsilon(epsilon);
    TensorAttr prev_mean, prev_var, mom;
    if (running) {
      prev_mean = channel_tensor(*g, c, kPrevMean, "running_mean");
      prev_var = channel_tensor(*g, c, kPrevVar, "running_var");
      mom = g->tensor(float(momentum));
      attrs.set_previous_running_stats(prev_mean, prev_var, mom);
    }
    auto [bn, mean, inv_var, next_mean, next_var] = g->batchnorm(X, scale, shift, attrs);
    channel_output(mean, kMean);
    channel_output(inv_var, kInvStd);
    if (running) {
      channel_output(next_mean, kNextMean);
      channel_output(next_var, kNextVar);
    }
    data_output(fused ? add_relu(*g, bn, residual) : bn, y, kY);
    return finish(std::move(g));
  });
  if (!entry->graph) return false;
  // Per-channel tensors in f32 (Note [cuDNN batch norm dtypes]); the
  // running statistics' new values go to buffers of their own, then back.
  const Device dev = x.device();
  Tensor scale = ops.input(param(weight, DType::f32, c, 1.0, dev));
  Tensor shift = ops.input(param(bias, DType::f32, c, 0.0, dev));
  std::unordered_map<int64_t, void*> ptrs = {
      {kX, x.data_ptr()},          {kScale, scale.data_ptr()},
      {kBias, shift.data_ptr()},   {kY, y.data_ptr()},
      {kMean, save_mean.data_ptr()}, {kInvStd, save_invstd.data_ptr()}};
  if (fused && residual.defined()) ptrs[kResidual] = residual.data_ptr();
  Tensor prev_mean, prev_var, next_mean, next_var;
  if (running) {
    prev_mean = ops.input(param(running_mean, DType::f32, c, 0.0, dev));
    prev_var = ops.input(param(running_var, DType::f32, c, 1.0, dev));
    next_mean = Tensor::empty({c}, TensorOptions(DType::f32).device(dev));
    next_var = Tensor::empty({c}, TensorOptions(DType::f32).device(dev));
    ptrs[kPrevMean] = prev_mean.data_ptr();
    ptrs[kPrevVar] = prev_var.data_ptr();
    ptrs[kNextMean] = next_mean.data_ptr();
    ptrs[kNextVar] = next_var.data_ptr();
  }
  cg::execute(*entry->graph, ptrs, x, kOp);
  ops.finish();
  if (running) {
    Tensor(running_mean).copy_(next_mean);
    Tensor(running_var).copy_(next_var);
  }
  return true;
}

bool graph_eval_forward(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& residual_in, bool fused, double eps, const Tensor& y_in) {
  if (!graph_dtype(x_in.dtype())) return false;
  cp::AlignedOperands ops;  // Note [cuDNN pointer alignment]
  const Tensor x = ops.input(x_in), residual = ops.input(residual_in), y = ops.output(y_in);
  const int64_t c = x.size(1);
  const std::string key =
      key_of(fused ? "eval_add_relu" : "eval", {x, residual, y}, {int64_t(fused)}, {});
  auto entry = cache().get_or_build(key, [&] {
    auto g = new_graph(x.dtype());
    TensorAttr X = data_tensor(*g, x, kX, "x");
    TensorAttr mean = channel_tensor(*g, c, kMean, "mean");
    TensorAttr inv_var = channel_tensor(*g, c, kInvStd, "inv_variance");
    TensorAttr scale = channel_tensor(*g, c, kScale, "scale");
    TensorAttr shift = channel_tensor(*g, c, kBias, "bias");
    TensorAttr bn = g->batchnorm_inference(X, mean, inv_var, scale, shift,
                                           fe::graph::Batchnorm_inference_attributes());
    data_output(fused ? add_relu(*g, bn, residual) : bn, y, kY);
    return finish(std::move(g));
  });
  if (!entry->graph) return false;
  const Device dev = x.device();
  Tensor scale = ops.input(param(weight, DType::f32, c, 1.0, dev));
  Tensor shift = ops.input(param(bias, DType::f32, c, 0.0, dev));
  Tensor mean = ops.input(running_mean.to(DType::f32).contiguous());
  // 1/sqrt(running_var + eps) in f32, as the frontend computes the saved
  // statistics of an evaluation-mode forward; fresh, so aligned.
  Tensor inv_var = Tensor::empty({c}, TensorOptions(DType::f32).device(dev));
  inv_var.copy_(running_var);
  inv_var.add_(Tensor::scalar(eps, TensorOptions(DType::f32)));
  backend_for(dev).unary(UnaryOp::rsqrt, inv_var, inv_var);
  std::unordered_map<int64_t, void*> ptrs = {
      {kX, x.data_ptr()},          {kMean, mean.data_ptr()}, {kInvStd, inv_var.data_ptr()},
      {kScale, scale.data_ptr()},  {kBias, shift.data_ptr()}, {kY, y.data_ptr()}};
  if (fused && residual.defined()) ptrs[kResidual] = residual.data_ptr();
  cg::execute(*entry->graph, ptrs, x, kOp);
  ops.finish();
  return true;
}

// The training-mode backward through a graph; y defined = the fused op's
// (RELU_BWD first). dx is always written (cuDNN writes it), dresidual when
// defined.
bool graph_backward(const Tensor& x_in, const Tensor& y_in, const Tensor& dy_in,
                    const Tensor& weight, const Tensor& save_mean_in,
                    const Tensor& save_invstd_in, const Tensor& dx_in, const Tensor& dweight,
                    const Tensor& dbias, const Tensor& dresidual_in) {
  if (!graph_dtype(x_in.dtype())) return false;
  cp::AlignedOperands ops;  // Note [cuDNN pointer alignment]
  const Tensor x = ops.input(x_in), y = ops.input(y_in), dy = ops.input(dy_in);
  const Tensor save_mean = ops.input(save_mean_in), save_invstd = ops.input(save_invstd_in);
  const Tensor dx = ops.output(dx_in), dresidual = ops.output(dresidual_in);
  const int64_t c = x.size(1);
  const bool fused = y.defined(), want_dz = dresidual.defined();
  const std::string key = key_of(fused ? "backward_add_relu" : "backward",
                                 {x, y, dy, dx, dresidual}, {int64_t(fused), int64_t(want_dz)}, {});
  auto entry = cache().get_or_build(key, [&] {
    auto g = new_graph(x.dtype());
    TensorAttr DY = data_tensor(*g, dy, kDy, "dy");
    TensorAttr X = data_tensor(*g, x, kX, "x");
    TensorAttr scale = channel_tensor(*g, c, kScale, "scale");
    TensorAttr mean = channel_tensor(*g, c, kMean, "mean");
    TensorAttr inv_var = channel_tensor(*g, c, kInvStd, "inv_variance");
    TensorAttr grad = DY;
    if (fused) {
      TensorAttr Y = data_tensor(*g, y, kY, "y");
      grad = g->pointwise(
          DY, Y, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_BWD));
      if (want_dz) data_output(grad, dresidual, kDz);
    }
    auto [DX, dscale, dshift] = g->batchnorm_backward(
        grad, X, scale,
        fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(mean, inv_var));
    data_output(DX, dx, kDx);
    channel_output(dscale, kDScale);
    channel_output(dshift, kDBias);
    return finish(std::move(g));
  });
  if (!entry->graph) return false;
  const Device dev = x.device();
  Tensor scale = ops.input(param(weight, DType::f32, c, 1.0, dev));
  TensorOptions f32 = TensorOptions(DType::f32).device(dev);
  Tensor dw = Tensor::empty({c}, f32), db = Tensor::empty({c}, f32);
  std::unordered_map<int64_t, void*> ptrs = {
      {kDy, dy.data_ptr()},        {kX, x.data_ptr()},
      {kScale, scale.data_ptr()},  {kMean, save_mean.data_ptr()},
      {kInvStd, save_invstd.data_ptr()}, {kDx, dx.data_ptr()},
      {kDScale, dw.data_ptr()},    {kDBias, db.data_ptr()}};
  if (fused) ptrs[kY] = y.data_ptr();
  if (want_dz) ptrs[kDz] = dresidual.data_ptr();
  cg::execute(*entry->graph, ptrs, x, kOp);
  ops.finish();
  if (dweight.defined()) Tensor(dweight).copy_(dw);
  if (dbias.defined()) Tensor(dbias).copy_(db);
  return true;
}

// ---- the registered kernels -------------------------------------------------

void train_forward_impl(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                        const Tensor& running_mean, const Tensor& running_var,
                        const Tensor& residual_in, bool fused, double momentum, double eps,
                        const Tensor& y_in, const Tensor& save_mean, const Tensor& save_invstd) {
  CudaDeviceGuard guard(x_in.device().index);
  const Tensor x = as_4d(x_in), y = as_4d(y_in), residual = as_4d(residual_in);
  if (graph_train_forward(x, weight, bias, running_mean, running_var, residual, fused, momentum,
                          eps, y, save_mean, save_invstd))
    return;
  legacy_train_forward(x, weight, bias, running_mean, running_var, momentum, eps, y, save_mean,
                       save_invstd);
  if (fused) add_relu_in_place(y, residual);
}

void eval_forward_impl(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                       const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& residual_in, bool fused, double eps, const Tensor& y_in) {
  CudaDeviceGuard guard(x_in.device().index);
  const Tensor x = as_4d(x_in), y = as_4d(y_in), residual = as_4d(residual_in);
  if (graph_eval_forward(x, weight, bias, running_mean, running_var, residual, fused, eps, y))
    return;
  legacy_eval_forward(x, weight, bias, running_mean, running_var, eps, y);
  if (fused) add_relu_in_place(y, residual);
}

void backward_impl(const Tensor& x_in, const Tensor& y_in, const Tensor& dy_in,
                   const Tensor& weight, const Tensor& save_mean, const Tensor& save_invstd,
                   bool batch_stats, double eps, const Tensor& dx_in, const Tensor& dweight,
                   const Tensor& dbias, const Tensor& dresidual_in) {
  CudaDeviceGuard guard(x_in.device().index);
  const Tensor x = as_4d(x_in), y = as_4d(y_in), dy = as_4d(dy_in);
  const Tensor dresidual = as_4d(dresidual_in);
  // cuDNN writes dx always; an unwanted one goes to scratch.
  const Tensor dx = dx_in.defined()
                        ? as_4d(dx_in)
                        : empty_nchw(x.shape(), x.dtype(), x.device(), is_channels_last(x));
  if (batch_stats && graph_backward(x, y, dy, weight, save_mean, save_invstd, dx, dweight, dbias,
                                    dresidual))
    return;
  // The relu's backward on the Backend (dz = y > 0 ? dy : 0, relu's mask
  // from its output, as the frontend's composed path masks), then
  // batch_norm's; dz in x's layout, as the legacy call describes x, dy and
  // dx with one descriptor.
  Tensor dz_in = dy_in;
  if (y_in.defined()) {
    dz_in = y_in.dim() == 4 ? empty_nchw(y_in.shape(), dy_in.dtype(), dy_in.device(),
                                         is_channels_last(x_in))
                            : Tensor::empty(y_in.shape(),
                                            TensorOptions(dy_in.dtype()).device(dy_in.device()));
    backend_for(dz_in.device()).unary_backward(UnaryOp::relu, y_in, Tensor(), dy_in, dz_in);
  }
  if (is_channels_last(x_in) ? !is_channels_last(dz_in) : !dz_in.is_contiguous())
    dz_in = is_channels_last(x_in) ? to_channels_last(dz_in) : dz_in.contiguous();
  if (dresidual_in.defined()) Tensor(dresidual_in).copy_(dz_in);
  if (!batch_stats)
    return eval_backward(x_in, dz_in, weight, save_mean, save_invstd, dx_in, dweight, dbias);
  legacy_backward(x_in, dz_in, weight, save_mean, save_invstd, true, eps, dx_in, dweight, dbias);
}

void train_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const Tensor& running_mean, const Tensor& running_var, double momentum,
                   double eps, const Tensor& y, const Tensor& save_mean,
                   const Tensor& save_invstd) {
  train_forward_impl(x, weight, bias, running_mean, running_var, Tensor(), false, momentum, eps, y,
                     save_mean, save_invstd);
}
void eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                  const Tensor& running_mean, const Tensor& running_var, double eps,
                  const Tensor& y) {
  eval_forward_impl(x, weight, bias, running_mean, running_var, Tensor(), false, eps, y);
}
void backward(const Tensor& x, const Tensor& dy, const Tensor& weight, const Tensor& save_mean,
              const Tensor& save_invstd, bool batch_stats, double eps, const Tensor& dx,
              const Tensor& dweight, const Tensor& dbias) {
  backward_impl(x, Tensor(), dy, weight, save_mean, save_invstd, batch_stats, eps, dx, dweight,
                dbias, Tensor());
}
void add_relu_train_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& residual, double momentum, double eps, const Tensor& y,
                            const Tensor& save_mean, const Tensor& save_invstd) {
  train_forward_impl(x, weight, bias, running_mean, running_var, residual, true, momentum, eps, y,
                     save_mean, save_invstd);
}
void add_relu_eval_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           const Tensor& running_mean, const Tensor& running_var,
                           const Tensor& residual, double eps, const Tensor& y) {
  eval_forward_impl(x, weight, bias, running_mean, running_var, residual, true, eps, y);
}
void add_relu_backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& weight,
                       const Tensor& save_mean, const Tensor& save_invstd, bool batch_stats,
                       double eps, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                       const Tensor& dresidual) {
  backward_impl(x, y, dy, weight, save_mean, save_invstd, batch_stats, eps, dx, dweight, dbias,
                dresidual);
}

}  // namespace

DDP_REGISTER_KERNEL(batch_norm_train_forward, CUDA, train_forward)
DDP_REGISTER_KERNEL(batch_norm_eval_forward, CUDA, eval_forward)
DDP_REGISTER_KERNEL(batch_norm_backward, CUDA, backward)
DDP_REGISTER_KERNEL(batch_norm_add_relu_train_forward, CUDA, add_relu_train_forward)
DDP_REGISTER_KERNEL(batch_norm_add_relu_eval_forward, CUDA, add_relu_eval_forward)
DDP_REGISTER_KERNEL(batch_norm_add_relu_backward, CUDA, add_relu_backward)

}  // namespace ddp::nn::functional::batch_norm_cuda

#endif  // DDP_HAVE_CUDNN
