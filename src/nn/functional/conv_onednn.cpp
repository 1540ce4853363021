// conv2d on the CPU in f32 through oneDNN primitives; see Note [Conv2d
// backends] in conv.cpp.
//
// Note [oneDNN primitive cache]
// Creating a oneDNN primitive (choosing and JIT-compiling an implementation)
// costs far more than running a small convolution, and a network runs the
// same few geometries every step. So each (geometry, pass) gets its
// primitive once; the cache is a bounded map guarded by a mutex (cleared
// when it grows past kMaxEntries, which only a stream of ever-new shapes
// reaches). Primitives are created in user scratchpad mode: each execution
// gets its scratch memory from a fresh ddp tensor, so two threads may run
// the same primitive at once. The memory formats are the plain ones the
// tensors have (nchw or nhwc, oihw / goihw weights), so no reorders are
// needed; oneDNN picks the best implementation for those formats.

#include "ddp/config.h"

#if DDP_HAVE_DNNL

#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "ddp/core/error.h"
#include "nn/functional/conv_backend.h"

namespace ddp::nn::functional::conv_detail::onednn {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);  // immutable once made
  return engine;
}

struct Descs {
  memory::desc src, weights, bias, dst;
  memory::dims strides, dilates, pad_l, pad_r;
};

Descs make_descs(const ConvGeometry& g) {
  Descs d;
  const tag act = g.channels_last ? tag::nhwc : tag::nchw;
  d.src = memory::desc({g.n, g.c, g.h, g.w}, dt::f32, act);
  d.dst = memory::desc({g.n, g.o, g.oh, g.ow}, dt::f32, act);
  if (g.groups == 1)
    d.weights = memory::desc({g.o, g.c, g.kh, g.kw}, dt::f32, tag::oihw);
  else  // [O, C/G, KH, KW] viewed as [G, O/G, C/G, KH, KW]: the same bytes
    d.weights =
        memory::desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, dt::f32, tag::goihw);
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

dnnl::convolution_forward::primitive_desc forward_pd(const ConvGeometry& g, const Descs& d) {
  dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::convolution_direct, d.src, d.weights,
                                       d.bias, d.dst, d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), cpu_engine());
}

struct Entry {
  dnnl::primitive primitive;
  memory::desc scratchpad;
};

enum class Pass { forward, backward_data, backward_weights };

Entry make_entry(const ConvGeometry& g, Pass pass) {
  Descs d = make_descs(g);
  auto fwd = forward_pd(g, d);
  switch (pass) {
    case Pass::forward:
      return {dnnl::convolution_forward(fwd), fwd.scratchpad_desc()};
    case Pass::backward_data: {
      dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                                 d.weights, d.dst, d.strides, d.dilates, d.pad_l,
                                                 d.pad_r);
      dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), cpu_engine(),
                                                         fwd);
      return {dnnl::convolution_backward_data(pd), pd.scratchpad_desc()};
    }
    case Pass::backward_weights: {
      dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, d.src,
                                                    d.weights, d.bias, d.dst, d.strides, d.dilates,
                                                    d.pad_l, d.pad_r);
      dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(), cpu_engine(),
                                                            fwd);
      return {dnnl::convolution_backward_weights(pd), pd.scratchpad_desc()};
    }
  }
  DDP_THROW(Error, "conv2d: unknown pass");
}

// See Note [oneDNN primitive cache]. Entries are shared_ptr so that a clear()
// by one thread cannot pull a primitive from under another that is running it.
struct Cache {
  std::mutex mu;
  std::unordered_map<std::string, std::shared_ptr<const Entry>> map;
  ConvCacheStats stats;
};
Cache& cache() {
  // Leaked: primitives must not be destroyed after oneDNN's own statics at exit.
  static auto* c = new Cache;
  return *c;
}

std::shared_ptr<const Entry> cached(const ConvGeometry& g, Pass pass) {
  constexpr size_t kMaxEntries = 512;
  Cache& c = cache();
  const std::string key = g.key() + "|" + std::to_string(int(pass));
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.map.find(key);
  if (it != c.map.end()) {
    ++c.stats.hits;
    return it->second;
  }
  ++c.stats.misses;
  if (c.map.size() >= kMaxEntries) c.map.clear();
  auto entry = std::make_shared<const Entry>(make_entry(g, pass));
  c.map.emplace(key, entry);
  return entry;
}

memory wrap(const memory::desc& md, const Tensor& t) {
  return memory(md, cpu_engine(), t.data_ptr());
}

// Runs a primitive with a scratchpad from a ddp tensor; oneDNN errors become
// ddp::Error naming the op and geometry.
void execute(const ConvGeometry& g, Pass pass, std::unordered_map<int, memory> args) {
  static const char* names[] = {"forward", "backward_data", "backward_weights"};
  try {
    std::shared_ptr<const Entry> entry = cached(g, pass);
    const Entry& e = *entry;
    Tensor scratch = Tensor::empty({int64_t(e.scratchpad.get_size())}, DType::u8);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(e.scratchpad, cpu_engine(), scratch.data_ptr()));
    dnnl::stream stream(cpu_engine());
    e.primitive.execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& err) {
    DDP_THROW(Error, "conv2d {} (oneDNN): {} (status {}) for geometry {}", names[int(pass)],
              err.what(), int(err.status), g.key());
  }
}

}  // namespace

ConvCacheStats cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  ConvCacheStats s = c.stats;
  s.entries = int64_t(c.map.size());
  return s;
}

void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& y) {
  Descs d = make_descs(g);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(d.src, x)},
                                       {DNNL_ARG_WEIGHTS, wrap(d.weights, w)},
                                       {DNNL_ARG_DST, wrap(d.dst, y)}};
  if (g.has_bias) args.emplace(DNNL_ARG_BIAS, wrap(d.bias, b));
  execute(g, Pass::forward, std::move(args));
}

void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  Descs d = make_descs(g);
  execute(g, Pass::backward_data,
          {{DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
           {DNNL_ARG_WEIGHTS, wrap(d.weights, w)},
           {DNNL_ARG_DIFF_SRC, wrap(d.src, dx)}});
}

void backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                      const Tensor& db) {
  Descs d = make_descs(g);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, wrap(d.src, x)},
                                       {DNNL_ARG_DIFF_DST, wrap(d.dst, dy)},
                                       {DNNL_ARG_DIFF_WEIGHTS, wrap(d.weights, dw)}};
  if (g.has_bias) args.emplace(DNNL_ARG_DIFF_BIAS, wrap(d.bias, db));
  execute(g, Pass::backward_weights, std::move(args));
}

}  // namespace ddp::nn::functional::conv_detail::onednn

#else  // !DDP_HAVE_DNNL: conv.cpp raises NotImplementedError before calling these.

#include "ddp/core/error.h"
#include "nn/functional/conv_backend.h"

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
ConvCacheStats cache_stats() { return {}; }
}  // namespace ddp::nn::functional::conv_detail::onednn

#endif
