// SyncBatchNorm and sync_batch_norm; see Note [Synchronised batch
// statistics] in include/ddp/parallel/sync_batch_norm.h.

#include "ddp/parallel/sync_batch_norm.h"


#include <fmt/format.h>

#include <concepts>
#include <utility>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/autograd/node.h"
#include "ddp/core/error.h"
#include "ddp/nn/functional/batch_norm.h"
#include "ddp/nn/functional/batch_norm_detail.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/parallel/join.h"
#include "ddp/tensor/ops.h"
#include "ddp/tensor/running_stats.h"

namespace ddp::parallel {

namespace {

// Every dim but the channel dim (1).
std::vector<int64_t> reduce_dims(int64_t rank) {
  std::vector<int64_t> dims{0};
  for (int64_t i = 2; i < rank; ++i) dims.push_back(i);
  return dims;
}

DType compute_dtype(DType input) { return input == DType::f64 ? DType::f64 : DType::f32; }

Tensor cast_or_undefined(const Tensor& t, DType dt) {
  return t.defined() ? t.detach().to(dt) : Tensor();
}

using nn::functional::batch_norm_detail::per_channel;

// batch_norm's checks, plus a group and at least one channel (the channel
// count is the length of the allreduced statistics).
void check_args(const std::string& who, const Tensor& x, const Tensors& per_channel_tensors,
                const std::shared_ptr<dist::ProcessGroup>& group) {
  DDP_CHECK(group != nullptr, "{}: the process group is null", who);
  nn::functional::batch_norm_detail::check_args(who, x, per_channel_tensors);
  DDP_CHECK_T(ShapeError, x.size(1) > 0, "{}: expected at least one channel, got {}", who,
              x.describe());
}

// The global batch's per-channel mean and 1/sqrt(var + eps) in the compute
// dtype, and its count; updates the running statistics. One allreduce.
struct GlobalStats {
  Tensor mean, invstd;
  double count = 0.0;
};

GlobalStats reduce_statistics(const Tensor& xc, const Tensor& running_mean,
                              const Tensor& running_var, double momentum, double eps,
                              dist::ProcessGroup& group, const std::string& who) {
  const int64_t c = xc.size(1);
  const double local_count = double(xc.numel() / c);
  const TensorOptions f64 = TensorOptions(DType::f64).device(xc.device());
  // [S1 (C), S2 (C), n (1)] in f64; see Note [Synchronised batch statistics].
  Tensor sums;
  if (local_count > 0) {
    const auto dims = reduce_dims(xc.dim());
    Tensor mk = mean(xc, dims, /*keepdim=*/true);
    Tensor d = xc - mk;  // two passes, like var(), without var()'s second mean
    Tensor v = (sum(d * d, dims) / local_count).to(DType::f64);
    Tensor m = mk.flatten().to(DType::f64);
    sums = cat({m * local_count, (v + m * m) * local_count, Tensor::full({1}, local_count, f64)});
  } else {
    sums = Tensor::zeros({2 * c + 1}, f64);  // a rank without samples still takes part
  }
  note_collective_for_join(group, sums);  // Note [Join]
  group.allreduce({sums})->wait(group.timeout());

  GlobalStats s;
  s.count = sums.narrow(0, 2 * c, 1).item<double>();
  DDP_CHECK(s.count > 1,
            "{}: expected more than 1 value per channel when training, got {} over all {} "
            "rank(s) (this rank's input {})",
            who, s.count, group.size(), xc.describe());
  Tensor mean64 = sums.narrow(0, 0, c) / s.count;
  // Rounding can take a constant channel's variance a hair below zero.
  Tensor var64 = maximum(sums.narrow(0, c, c) / s.count - mean64 * mean64, 0.0);
  update_running_stat(running_mean, mean64, momentum);
  update_running_stat(running_var, var64 * (s.count / (s.count - 1)), momentum);
  s.mean = mean64.to(xc.dtype());
  s.invstd = rsqrt(var64 + eps).to(xc.dtype());
  return s;
}

// What backward needs, saved detached (Note [Recording backward]).
struct Saved {
  Tensor xhat, invstd, weight;  // compute dtype; weight undefined without affine
  double count = 0.0;
  std::shared_ptr<dist::ProcessGroup> group;
  DType x_dtype = DType::f32, weight_dtype = DType::f32, bias_dtype = DType::f32;
  bool channels_last = false, need_dx = false, need_dw = false, need_db = false;
};

Tensors sync_batch_norm_backward(const Saved& s, const Tensor& grad_y) {
  const int64_t rank = s.xhat.dim(), c = s.xhat.size(1);
  const bool empty = s.xhat.numel() == 0;
  Tensor dy = grad_y.detach().to(s.xhat.dtype());
  const TensorOptions opts = TensorOptions(s.xhat.dtype()).device(s.xhat.device());
  const auto dims = reduce_dims(rank);
  Tensor sum_dy = empty ? Tensor::zeros({c}, opts) : sum(dy, dims);
  Tensor sum_dy_xhat = empty ? Tensor::zeros({c}, opts) : sum(dy * s.xhat, dims);
  Tensor dx, dw, db;
  // The parameters' gradients are this rank's part; DDP sums the parts.
  if (s.need_dw) dw = sum_dy_xhat.to(s.weight_dtype);
  if (s.need_db) db = sum_dy.to(s.bias_dtype);
  if (s.need_dx) {
    Tensor both = cat({sum_dy, sum_dy_xhat});  // a copy: dw and db keep the local sums
    note_collective_for_join(*s.group, both);  // Note [Join]
    s.group->allreduce({both})->wait(s.group->timeout());
    Tensor mean_dy = per_channel(both.narrow(0, 0, c) / s.count, rank);
    Tensor mean_dy_xhat = per_channel(both.narrow(0, c, c) / s.count, rank);
    Tensor scale = s.weight.defined() ? s.invstd * s.weight : s.invstd;
    dx = ((dy - mean_dy - s.xhat * mean_dy_xhat) * per_channel(scale, rank)).to(s.x_dtype);
    if (s.channels_last) dx = nn::functional::to_channels_last(dx);
  }
  return {dx, dw, db};
}

// The training-mode forward of a BatchNorm2d-like layer: over the group
// when it has more than one rank, else exactly nn::functional::batch_norm.
Tensor batch_stats_forward(const Tensor& x, const nn::BatchNorm2d& bn, double factor, double eps,
                           const std::shared_ptr<dist::ProcessGroup>& group) {
  if (group->size() == 1)
    return nn::functional::batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, true,
                                      factor, eps, bn.describe());
  return sync_batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, factor, eps, group,
                         bn.describe());
}

}  // namespace

Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, double momentum, double eps,
                       const std::shared_ptr<dist::ProcessGroup>& group,
                       const std::string& who_in) {
  // batch_norm's policy (keep the input's precision, f32 parameters), so that
  // the result's dtype does not depend on the world size (at 1 SyncBatchNorm
  // runs nn::functional::batch_norm).
  namespace bn = nn::functional::batch_norm_detail;
  if (bn::autocast_active())  // See Note [Autocast policy]
    return bn::autocast_call({x, weight, bias}, [&](const Tensors& t) {
      return sync_batch_norm(t[0], running_mean, running_var, t[1], t[2], momentum, eps, group,
                             who_in);
    });
  const std::string who = who_in.empty() ? "sync_batch_norm" : who_in;
  check_args(who, x, {running_mean, running_var, weight, bias}, group);
  const DType cdt = compute_dtype(x.dtype());
  const int64_t rank = x.dim();
  Saved s;
  Tensor y;
  {
    autograd::NoGradGuard no_grad;
    Tensor xc = x.detach().to(cdt);
    GlobalStats g = reduce_statistics(xc, running_mean, running_var, momentum, eps, *group, who);
    Tensor xhat = (xc - per_channel(g.mean, rank)) * per_channel(g.invstd, rank);
    // A handle of its own: y may be xhat itself (no affine, f32 input), and
    // the backward must not hold y (Note [Recording backward]).
    s.xhat = xhat.detach();
    s.weight = cast_or_undefined(weight, cdt);
    Tensor b = cast_or_undefined(bias, cdt);
    y = xhat;
    if (s.weight.defined()) y = y * per_channel(s.weight, rank);
    if (b.defined()) y = y + per_channel(b, rank);
    y = y.to(x.dtype());
    s.channels_last = rank == 4 && nn::functional::is_channels_last(x);
    if (s.channels_last) y = nn::functional::to_channels_last(y);  // keep the input's layout
    s.invstd = g.invstd;
    s.count = g.count;
  }
  if (autograd::needs_grad({x, weight, bias})) {
    s.group = group;
    s.x_dtype = x.dtype();
    if (weight.defined()) s.weight_dtype = weight.dtype();
    if (bias.defined()) s.bias_dtype = bias.dtype();
    s.need_dx = autograd::needs_grad({x});
    s.need_dw = autograd::needs_grad({weight});
    s.need_db = autograd::needs_grad({bias});
    autograd::record("sync_batch_norm", {x, weight, bias}, {y},
                     [s = std::move(s)](const Tensors& g) -> Tensors {
                       return sync_batch_norm_backward(s, g[0]);
                     });
  }
  return y;
}

namespace {

// See Note [Converting BatchNorm2d in place].
void install_sync_forward(nn::BatchNorm2d& bn, const std::shared_ptr<dist::ProcessGroup>& group) {
  // The hook lives in bn, so the raw pointer never outlives it.
  bn.set_training_forward([layer = &bn, group](const Tensor& x, double factor) {
    return batch_stats_forward(x, *layer, factor, layer->eps(), group);
  });
}

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t num_features, std::shared_ptr<dist::ProcessGroup> group,
                             double eps, std::optional<double> momentum, bool affine,
                             bool track_running_stats)
    : nn::BatchNorm2d(num_features, eps, momentum, affine, track_running_stats),
      group_(std::move(group)) {
  DDP_CHECK(group_ != nullptr, "SyncBatchNorm({}): the process group is null", num_features);
  // Nobody to synchronise with: BatchNorm2d itself (as torch does).
  if (group_->size() > 1) install_sync_forward(*this, group_);
}

std::string SyncBatchNorm::extra_repr() const {
  return fmt::format("{}, synchronised over {} rank(s) ({})", nn::BatchNorm2d::extra_repr(),
                     group_->size(), group_->backend_name());
}

// Note [Converting BatchNorm2d in place]
// torch's convert_sync_batchnorm builds a new module tree in which
// SyncBatchNorm objects replace the BatchNorm ones. That cannot work here:
// models hold their layers as typed members (ResNet's bn1, Sequential's
// list) and call them directly, so swapping the registered child would not
// change what forward runs. Instead the conversion changes the existing
// BatchNorm2d objects: nn::BatchNorm2d offers a training-forward hook
// (set_training_forward), and the hook installed here runs the layer's
// training forward through the group. The layer keeps its identity, its
// tensors and its place in every handle that points at it.

int64_t convert_sync_batchnorm(nn::Module& module, std::shared_ptr<dist::ProcessGroup> group) {
  DDP_CHECK(group != nullptr, "convert_sync_batchnorm: the process group is null");
  int64_t converted = 0;
  for (nn::Module* m : module.modules()) {
    auto* bn = dynamic_cast<nn::BatchNorm2d*>(m);
    if (bn == nullptr || dynamic_cast<SyncBatchNorm*>(m) != nullptr) continue;
    install_sync_forward(*bn, group);
    ++converted;
  }
  return converted;
}

}  // namespace ddp::parallel
