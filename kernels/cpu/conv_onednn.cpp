// conv2d on the CPU in f32 through oneDNN primitives; see Note [Conv2d
// backends] in src/nn/functional/conv.cpp.
//
// Note [oneDNN primitive cache]
// Creating a oneDNN primitive (choosing and JIT-compiling an implementation)
// costs far more than running a small convolution, and a network runs the
// same few geometries every step. So each (geometry, pass) gets its
// primitives once; the cache is a bounded map guarded by a mutex (cleared
// when it grows past kMaxEntries, which only a stream of ever-new shapes
// reaches). Primitives are created in user scratchpad mode: each execution
// gets its scratch memory from a fresh ddp tensor, so two threads may run
// the same primitive at once.
//
// Note [oneDNN layouts]
// oneDNN only picks its direct JIT convolutions (jit:avx2, jit:avx512...)
// when the weights are in its own blocked layout (e.g. OIhw8i8o); with plain
// oihw weights it falls back to im2col + gemm, which measured 2-3x slower on
// resnet20's shapes on an AVX2 EPYC (10.1 vs 3.7 ms forward, 15.6 vs 3.7 ms
// backward-data for 64x16x28x28). So each primitive is created with
// activations in NHWC (the layout that the direct kernels and cuDNN's tensor
// cores share, and that --channels-last models already have) and the
// weights in format `any`, and reorders sit at the edges:
// - weights (oihw or ohwi <-> blocked): small (at most a few MiB),
//   reordered when used (or reused while unwritten: Note [oneDNN weight cache])
//   so that the optimizer keeps updating plain tensors; a channels-last
//   weight is read and written as ohwi, so a channels-last model's weights
//   and their gradients stay channels-last;
// - activations: none for channels-last tensors. NCHW f32 tensors reach
//   these kernels already NHWC (the frontend, src/nn/functional/conv.cpp,
//   converts x and dy once per convolution with the conv2d_copy_layout
//   kernel, copy_layout below; Note [NCHW convolutions on the CPU]);
//   only the f16/bf16 path's NCHW f32 copies are reordered here, into an
//   NHWC scratch and back, which costs a memory pass and still leaves the
//   NCHW path well ahead of gemm.
// Every reorder is a cached primitive too. oneDNN may pick a plain layout
// itself (1-channel inputs); then no reorder runs.
//
// Note [oneDNN weight cache]
// A weight's blocked copy can outlive the call that made it: it is kept in a
// slot of the weight's Storage (Storage::attachment), so it is freed with
// the weight, tagged with the storage's version (Note [Tensor version
// counter] in storage.h), the view's address and the blocked layout. A pass
// whose weight has not been written since its copy was made runs on that
// copy and skips the reorder.
// Which copies are kept: one is made into a buffer of its own only on a
// weight's second use at one version (each pass counts for itself), and is
// dropped at the first use after a write. In training, where the optimizer
// writes every weight between its uses, nothing is kept and each pass
// reorders into scratch as it always did; in evaluation, and in the
// micro-steps of gradient accumulation (no_sync), the second use keeps the
// copy and every later one reuses it. (Keeping every copy cost 150-240 MiB
// more peak memory in ResNet-50 training on the CPU and saved nothing.)
// Off unless DDP_CONV_WEIGHT_CACHE=1: on the 2-core AVX2 VM of
// docs/benchmarks.md ("The oneDNN weight cache") ResNet-50 evaluation was
// no faster with it (median 887 against 829 ms a batch, within the runs'
// spread) and held 114 MiB more, most likely because the reorder it saves
// also brings the weight into the cache just before the convolution reads
// it. It stays for machines and models where the reorder costs more.
//
#include "ddp/config.h"

#if DDP_HAVE_DNNL

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "ddp/core/error.h"
#include "cpu/conv.h"

namespace ddp::nn::functional::conv_detail::onednn {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);  // immutable once made
  return engine;
}

// The memory descriptors of the ddp tensors (the user's side of every
// reorder), and the convolution's parameters.
struct UserDescs {
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

memory::desc weights_desc(const ConvGeometry& g, tag t) {
  if (g.groups == 1) return memory::desc({g.o, g.c, g.kh, g.kw}, dt::f32, t);
  // [O, C/G, KH, KW] viewed as [G, O/G, C/G, KH, KW]: the same bytes.
  const tag grouped = t == tag::any ? tag::any : t == tag::ohwi ? tag::gohwi : tag::goihw;
  return memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, dt::f32, grouped);
}

// The ddp weight's layout: ohwi for a channels-last weight, else oihw.
using WeightTag = tag;

UserDescs user_descs(const ConvGeometry& g, WeightTag weight) {
  UserDescs d;
  const tag act = g.channels_last ? tag::nhwc : tag::nchw;
  d.src = memory::desc({g.n, g.c, g.h, g.w}, dt::f32, act);
  d.dst = memory::desc({g.n, g.o, g.oh, g.ow}, dt::f32, act);
  d.weights = weights_desc(g, weight);
  if (g.has_bias) d.bias = memory::desc({g.o}, dt::f32, tag::x);
  d.strides = {g.stride.h, g.stride.w};
  d.dilates = {g.dilation.h - 1, g.dilation.w - 1};  // oneDNN counts from 0
  d.pad_l = {g.padding.h, g.padding.w};
  // Symmetric: oneDNN's output size formula floors like torch's, so extra
  // right padding that the stride never reaches changes nothing.
  d.pad_r = d.pad_l;
  return d;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The primitive's side: NHWC activations, weights as oneDNN likes them
// (each pass chooses its own weight blocking: the backward-data kernels
// want a transposed one, and given the forward's they fall back to the
// reference loops). See Note [oneDNN layouts].
dnnl::convolution_forward::primitive_desc forward_pd(const ConvGeometry& g, const UserDescs& d) {
  memory::desc src({g.n, g.c, g.h, g.w}, dt::f32, tag::nhwc);
  memory::desc dst({g.n, g.o, g.oh, g.ow}, dt::f32, tag::nhwc);
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, src,
                                       weights_desc(g, tag::any), d.bias, dst, d.strides,
                                       d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), cpu_engine());
}

// One argument of a primitive: the ddp tensor's layout, the primitive's, and
// the reorder between them when they differ (into the primitive for inputs,
// out of it for outputs).
struct Operand {
  int arg = 0;
  bool output = false;
  memory::desc user, prim;
  dnnl::reorder reorder;  // empty when user == prim
  memory::desc reorder_scratchpad;
};

Operand operand(int arg, bool output, const memory::desc& user, const memory::desc& prim) {
  Operand op{arg, output, user, prim, {}, {}};
  if (user != prim) {
    dnnl::reorder::primitive_desc pd =
        output ? dnnl::reorder::primitive_desc(cpu_engine(), prim, cpu_engine(), user,
                                               user_scratchpad())
               : dnnl::reorder::primitive_desc(cpu_engine(), user, cpu_engine(), prim,
                                               user_scratchpad());
    op.reorder = dnnl::reorder(pd);
    op.reorder_scratchpad = pd.scratchpad_desc();
  }
  return op;
}

// One pass of one geometry: the convolution primitive and its operands, in
// the order of the tensors the entry points below pass to execute().
struct Entry {
  dnnl::primitive primitive;
  memory::desc scratchpad;
  std::vector<Operand> operands;
};

enum class Pass { forward, backward_data, backward_weights };

Entry make_entry(const ConvGeometry& g, Pass pass, WeightTag weight) {
  UserDescs d = user_descs(g, weight);
  auto fwd = forward_pd(g, d);
  switch (pass) {
    case Pass::forward: {
      Entry e{dnnl::convolution_forward(fwd), fwd.scratchpad_desc(), {}};
      e.operands = {operand(DNNL_ARG_SRC, false, d.src, fwd.src_desc()),
                    operand(DNNL_ARG_WEIGHTS, false, d.weights, fwd.weights_desc()),
                    operand(DNNL_ARG_DST, true, d.dst, fwd.dst_desc())};
      if (g.has_bias) e.operands.push_back(operand(DNNL_ARG_BIAS, false, d.bias, d.bias));
      return e;
    }
    case Pass::backward_data: {
      dnnl::convolution_backward_data::desc desc(
          dnnl::algorithm::convolution_direct, fwd.src_desc(), weights_desc(g, tag::any),
          fwd.dst_desc(), d.strides, d.dilates, d.pad_l, d.pad_r);
      dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), cpu_engine(),
                                                         fwd);
      Entry e{dnnl::convolution_backward_data(pd), pd.scratchpad_desc(), {}};
      e.operands = {operand(DNNL_ARG_DIFF_DST, false, d.dst, pd.diff_dst_desc()),
                    operand(DNNL_ARG_WEIGHTS, false, d.weights, pd.weights_desc()),
                    operand(DNNL_ARG_DIFF_SRC, true, d.src, pd.diff_src_desc())};
      return e;
    }
    case Pass::backward_weights: {
      dnnl::convolution_backward_weights::desc desc(
          dnnl::algorithm::convolution_direct, fwd.src_desc(), weights_desc(g, tag::any), d.bias,
          fwd.dst_desc(), d.strides, d.dilates, d.pad_l, d.pad_r);
      dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(),
                                                            cpu_engine(), fwd);
      Entry e{dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), {}};
      e.operands = {operand(DNNL_ARG_SRC, false, d.src, pd.src_desc()),
                    operand(DNNL_ARG_DIFF_DST, false, d.dst, pd.diff_dst_desc()),
                    operand(DNNL_ARG_DIFF_WEIGHTS, true, d.weights, pd.diff_weights_desc())};
      if (g.has_bias)
        e.operands.push_back(operand(DNNL_ARG_DIFF_BIAS, true, d.bias, pd.diff_bias_desc()));
      return e;
    }
  }
  DDP_THROW(Error, "conv2d: unknown pass");
}

// See Note [oneDNN primitive cache]. Entries are shared_ptr so that a clear()
// by one thread cannot pull a primitive from under another that is running it.
struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> map;
  PlanCacheStats stats;
};
Cache& cache() {
  // Leaked: primitives must not be destroyed after oneDNN's own statics at exit.
  static auto* c = new Cache;
  return *c;
}

std::shared_ptr<const Entry> cached(const ConvGeometry& g, Pass pass, WeightTag weight) {
  constexpr size_t kMaxEntries = 512;
  Cache& c = cache();
  const std::string key = g.key() + "|" + std::to_string(int(pass)) +
                          (weight == tag::ohwi ? "|ohwi" : "|oihw");
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(key);
  if (it != c.map.end()) {
    ++c.stats.hits;
    return it->second;
  }
  ++c.stats.misses;
  if (c.map.size() >= kMaxEntries) c.map.clear();
  auto entry = std::make_shared<const Entry>(make_entry(g, pass, weight));
  c.map.emplace(key, entry);
  return entry;
}

// Scratch bytes for oneDNN, from the ddp allocator (so that they show in the
// memory statistics and are reused across steps).
memory scratch_memory(const memory::desc& md, std::vector<Tensor>& keep) {
  keep.push_back(Tensor::empty({int64_t(md.get_size())}, DType::u8));
  return memory(md, cpu_engine(), keep.back().data_ptr());
}

void run(dnnl::stream& stream, const dnnl::primitive& p, const memory::desc& scratchpad,
         std::unordered_map<int, memory> args, std::vector<Tensor>& keep) {
  if (scratchpad.get_size() > 0) args.emplace(DNNL_ARG_SCRATCHPAD, scratch_memory(scratchpad, keep));
  p.execute(stream, args);
}

// See Note [oneDNN weight cache]. One entry per (view address, layout) of
// a weight's storage, a handful at most (forward and backward-data of each
// weight viewing it): the version that pass last saw, and the blocked copy
// at that version once the weight was used twice at it.
struct BlockedCopy {
  const void* user_data;
  memory::desc layout;
  uint64_t version;
  Tensor blocked;  // u8, layout.get_size() bytes; undefined until kept
};

std::atomic<int64_t> g_kept_bytes{0};  // the bytes of every kept copy, process-wide

int64_t kept_bytes(const BlockedCopy& c) { return c.blocked.defined() ? c.blocked.numel() : 0; }

struct BlockedWeights {
  std::vector<BlockedCopy> copies;
  BlockedWeights() = default;
  BlockedWeights(const BlockedWeights&) = delete;
  BlockedWeights& operator=(const BlockedWeights&) = delete;
  ~BlockedWeights() {  // the weight's storage is being freed, and its copies with it
    for (const BlockedCopy& c : copies) g_kept_bytes -= kept_bytes(c);
  }
};
constexpr size_t kMaxCopiesPerStorage = 8;

struct WeightCache {
  std::mutex mu;  // guards every storage's slot and the counts
  int64_t hits = 0, misses = 0;
};
WeightCache& weight_cache() {
  static auto* c = new WeightCache;  // leaked, like cache()
  return *c;
}

// Read at every weight reorder (a few per convolution; far cheaper than
// the reorder), so a program or a test may switch it between calls.
bool weight_cache_enabled() {
  const char* v = std::getenv("DDP_CONV_WEIGHT_CACHE");
  return v && std::string(v) == "1";
}

// The pass's entry for this view of the weight, made on first use.
BlockedCopy& entry_for(const Storage& st, const void* data, const memory::desc& layout,
                       uint64_t version) {
  auto* slot = static_cast<BlockedWeights*>(st.attachment().get());
  if (!slot) {
    st.set_attachment(std::make_shared<BlockedWeights>());
    slot = static_cast<BlockedWeights*>(st.attachment().get());
  }
  for (BlockedCopy& c : slot->copies)
    if (c.user_data == data && c.layout == layout) return c;
  if (slot->copies.size() >= kMaxCopiesPerStorage) {
    g_kept_bytes -= kept_bytes(slot->copies.front());
    slot->copies.erase(slot->copies.begin());
  }
  // A version no call can have seen yet, so the first use is never "a second".
  slot->copies.push_back({data, layout, version - 1, Tensor()});
  return slot->copies.back();
}

// The weight operand in the primitive's layout (Note [oneDNN weight cache]):
// the kept copy when the weight is unchanged since it was made; else a
// reorder, kept when this is the weight's second use at its version.
memory blocked_weights(dnnl::stream& stream, const Operand& op, const Tensor& w,
                       std::vector<Tensor>& keep) {
  WeightCache& c = weight_cache();
  const Storage& st = w.storage();
  const void* data = w.data_ptr();
  const uint64_t version = st.version();
  bool keep_copy = false;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    BlockedCopy& e = entry_for(st, data, op.prim, version);
    if (e.version == version && e.blocked.defined()) {
      ++c.hits;
      keep.push_back(e.blocked);
      return memory(op.prim, cpu_engine(), e.blocked.data_ptr());
    }
    ++c.misses;
    keep_copy = e.version == version;  // used before at this version: worth keeping
    g_kept_bytes -= kept_bytes(e);     // a stale copy is dropped: its weight is being trained
    e.blocked = Tensor();
    e.version = version;
  }
  memory prim = scratch_memory(op.prim, keep);
  const Tensor kept = keep.back();  // its buffer, before run() adds the reorder's scratchpad
  memory user(op.user, cpu_engine(), const_cast<void*>(data));
  run(stream, op.reorder, op.reorder_scratchpad, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, prim}},
      keep);
  if (!keep_copy) return prim;
  stream.wait();
  std::lock_guard<std::mutex> lock(c.mu);
  if (st.version() != version) return prim;  // written meanwhile: use it once, keep nothing
  BlockedCopy& e = entry_for(st, data, op.prim, version);
  if (e.version != version || e.blocked.defined()) return prim;  // another call got there
  e.blocked = kept;
  g_kept_bytes += kept_bytes(e);
  return prim;
}

// Runs one pass on the tensors (in the order of Entry::operands): reorders
// the inputs into the primitive's layouts, runs it, reorders the outputs
// back. oneDNN errors become ddp::Error naming the pass and geometry.
void execute(const ConvGeometry& g, Pass pass, const std::vector<const Tensor*>& tensors,
             const Tensor& weight) {
  static const char* names[] = {"forward", "backward_data", "backward_weights"};
  // The frontend (src/nn/functional/conv.cpp) hands over contiguous or
  // channels-last weights only.
  const WeightTag wtag = weight.is_contiguous() ? tag::oihw : tag::ohwi;
  try {
    std::shared_ptr<const Entry> entry = cached(g, pass, wtag);
    const Entry& e = *entry;
    DDP_CHECK(tensors.size() == e.operands.size(), "conv2d {}: {} tensors for {} operands",
              names[int(pass)], tensors.size(), e.operands.size());
    dnnl::stream stream(cpu_engine());
    std::vector<Tensor> keep;  // scratch tensors, alive until the stream is done
    std::unordered_map<int, memory> args;
    for (size_t i = 0; i < e.operands.size(); ++i) {
      const Operand& op = e.operands[i];
      memory user(op.user, cpu_engine(), tensors[i]->data_ptr());
      if (!op.reorder) {
        args.emplace(op.arg, user);
        continue;
      }
      if (op.arg == DNNL_ARG_WEIGHTS && weight_cache_enabled()) {
        args.emplace(op.arg, blocked_weights(stream, op, *tensors[i], keep));
        continue;
      }
      memory prim = scratch_memory(op.prim, keep);
      if (!op.output)
        run(stream, op.reorder, op.reorder_scratchpad, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, prim}},
            keep);
      args.emplace(op.arg, prim);
    }
    run(stream, e.primitive, e.scratchpad, args, keep);
    for (size_t i = 0; i < e.operands.size(); ++i) {
      const Operand& op = e.operands[i];
      if (!op.output || !op.reorder) continue;
      memory user(op.user, cpu_engine(), tensors[i]->data_ptr());
      run(stream, op.reorder, op.reorder_scratchpad,
          {{DNNL_ARG_FROM, args.at(op.arg)}, {DNNL_ARG_TO, user}}, keep);
    }
    stream.wait();
  } catch (const dnnl::error& err) {
    DDP_THROW(Error, "conv2d {} (oneDNN): {} (status {}) for geometry {}", names[int(pass)],
              err.what(), int(err.status), g.key());
  }
}

// Reorders between two strided layouts of one shape, cached by shape and
// strides (a network converts the same few activation shapes every step).
const dnnl::reorder& layout_reorder(const memory::desc& from, const memory::desc& to,
                                    const std::string& key) {
  struct ReorderCache {
    std::mutex mu;
    std::unordered_map<std::string, std::shared_ptr<dnnl::reorder>> map;
  };
  static auto* c = new ReorderCache;  // leaked, like cache()
  std::lock_guard<std::mutex> lock(c->mu);
  auto it = c->map.find(key);
  if (it != c->map.end()) return *it->second;
  if (c->map.size() >= 512) c->map.clear();
  auto r = std::make_shared<dnnl::reorder>(
      dnnl::reorder::primitive_desc(cpu_engine(), from, cpu_engine(), to));
  return *c->map.emplace(key, r).first->second;
}

}  // namespace

void copy_layout(const Tensor& src, const Tensor& dst) {
  DDP_CHECK(src.dtype() == DType::f32 && dst.dtype() == DType::f32 && src.shape() == dst.shape(),
            "conv2d copy_layout: f32 tensors of one shape expected, got {} and {}", src.describe(),
            dst.describe());
  const memory::dims dims(src.shape().begin(), src.shape().end());
  const memory::desc from(dims, dt::f32, memory::dims(src.strides().begin(), src.strides().end()));
  const memory::desc to(dims, dt::f32, memory::dims(dst.strides().begin(), dst.strides().end()));
  const std::string key = fmt::format("{}|{}|{}", fmt::join(dims, "x"),
                                      fmt::join(src.strides(), ","), fmt::join(dst.strides(), ","));
  try {
    // Shared reorders have no scratchpad: a layout reorder of plain strides needs none.
    const dnnl::reorder& r = layout_reorder(from, to, key);
    dnnl::stream stream(cpu_engine());
    memory m_from(from, cpu_engine(), src.data_ptr()), m_to(to, cpu_engine(), dst.data_ptr());
    r.execute(stream, m_from, m_to);
    stream.wait();
  } catch (const dnnl::error& err) {
    DDP_THROW(Error, "conv2d copy_layout (oneDNN): {} (status {}) for {} -> {}", err.what(),
              int(err.status), src.describe(), dst.describe());
  }
}

PlanCacheStats cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  PlanCacheStats s = c.stats;
  s.entries = int64_t(c.map.size());
  WeightCache& w = weight_cache();
  std::lock_guard<std::mutex> wlock(w.mu);
  s.weight_hits = w.hits;
  s.weight_misses = w.misses;
  s.weight_bytes = g_kept_bytes.load();
  return s;
}

void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& y) {
  std::vector<const Tensor*> tensors{&x, &w, &y};
  if (g.has_bias) tensors.push_back(&b);
  execute(g, Pass::forward, tensors, w);
}

void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  execute(g, Pass::backward_data, {&dy, &w, &dx}, w);
}

void backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                      const Tensor& db) {
  std::vector<const Tensor*> tensors{&x, &dy, &dw};
  if (g.has_bias) tensors.push_back(&db);
  execute(g, Pass::backward_weights, tensors, dw);
}

}  // namespace ddp::nn::functional::conv_detail::onednn

#else  // !DDP_HAVE_DNNL
// kernels/cpu/conv.cpp's kernels raise NotImplementedError (require_onednn)
// before calling forward or backward_*; copy_layout (the conv2d_copy_layout
// kernel, which the frontend calls to re-lay out NCHW f32 tensors on the CPU)
// raises here; cache_stats reports an empty cache.

#include "ddp/core/error.h"
#include "cpu/conv.h"

namespace ddp::nn::functional::conv_detail::onednn {
[[noreturn]] static void no_dnnl() {
  DDP_THROW(NotImplementedError, "conv2d: this libddp was built without oneDNN");
}
void forward(const ConvGeometry&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  no_dnnl();
}
void backward_data(const ConvGeometry&, const Tensor&, const Tensor&, const Tensor&) { no_dnnl(); }
void backward_weights(const ConvGeometry&, const Tensor&, const Tensor&, const Tensor&,
                      const Tensor&) {
  no_dnnl();
}
PlanCacheStats cache_stats() { return {}; }
void copy_layout(const Tensor&, const Tensor&) { no_dnnl(); }
}  // namespace ddp::nn::functional::conv_detail::onednn

#endif
