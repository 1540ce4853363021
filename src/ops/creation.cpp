// Creation ops: *_like, arange, and the seeded random factories. See Note
// [Counter-based RNG] in generator.h: a random op reserves numel counters
// from its generator, so the same generator state gives the same numbers on
// every backend, and consecutive calls never reuse a counter.

#include <cmath>

#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "ops/ops_util.h"

namespace ddp {

using namespace ops_detail;

Tensor zeros_like(const Tensor& x) {
  check_defined("zeros_like", x, "x");
  return empty_like(x).fill_(0.0);
}

Tensor ones_like(const Tensor& x) {
  check_defined("ones_like", x, "x");
  return empty_like(x).fill_(1.0);
}

Tensor full_like(const Tensor& x, double value) {
  check_defined("full_like", x, "x");
  return empty_like(x).fill_(value);
}

Tensor empty_like(const Tensor& x) {
  check_defined("empty_like", x, "x");
  // See Note [Memory-format propagation] in memory_format.h: x's dense layout.
  return empty_in_layout_of({x}, x.shape(), options(x.dtype(), x.device()));
}

Tensor arange(double start, double end, double step, TensorOptions opts) {
  DDP_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
            "arange: start, end and step must be finite, got {}, {}, {}", start, end, step);
  DDP_CHECK(step != 0.0, "arange: step must be nonzero");
  DDP_CHECK((step > 0 && end >= start) || (step < 0 && end <= start),
            "arange: the sign of step ({}) does not lead from start ({}) to end ({})", step, start,
            end);
  DDP_CHECK_T(DTypeError, opts.dtype_ != DType::bool_, "arange: bool is not a numeric dtype");
  auto n = int64_t(std::ceil((end - start) / step));
  Tensor out = Tensor::empty({n}, opts);
  if (n > 0) backend_for(opts.device_).arange(out, start, step);
  return out;
}

Tensor arange(int64_t end, TensorOptions opts) { return arange(0.0, double(end), 1.0, opts); }

namespace {

using Distribution = Backend::Distribution;

void check_random_dtype(const char* op, DType dtype) {
  DDP_CHECK_T(DTypeError, is_floating(dtype),
              "{}: random values need a floating dtype (f32, f64, f16, bf16), got {}", op,
              dtype_name(dtype));
}

// Fills a contiguous tensor from gen (or the default generator).
void fill_random(const Tensor& out, Distribution dist, double a, double b, Generator* gen) {
  Generator& g = gen ? *gen : default_generator();
  uint64_t seed = g.seed();
  uint64_t counter = g.reserve(uint64_t(out.numel()));
  if (out.numel() > 0) backend_for(out.device()).random(out, dist, a, b, seed, counter);
}

Tensor random_tensor(const char* op, const Shape& shape, TensorOptions opts, Distribution dist,
                     double a, double b, Generator* gen) {
  check_random_dtype(op, opts.dtype_);
  Tensor out = empty_out(op, shape, opts.dtype_, opts.device_);
  fill_random(out, dist, a, b, gen);
  if (opts.requires_grad_) out.set_requires_grad(true);
  return out;
}

// In place, through a contiguous scratch tensor when t is a strided view.
void random_inplace(const char* op, Tensor& t, Distribution dist, double a, double b,
                    Generator* gen) {
  check_defined(op, t, "t");
  check_random_dtype(op, t.dtype());
  t.bump_version();  // Note [Tensor version counter]
  if (t.is_contiguous()) {
    fill_random(t, dist, a, b, gen);
    return;
  }
  Tensor tmp = Tensor::empty(t.shape(), options(t.dtype(), t.device()));
  fill_random(tmp, dist, a, b, gen);
  backend_for(t.device()).copy(tmp, t);
}

void check_uniform(const char* op, double low, double high) {
  DDP_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high,
            "{}: expected finite low <= high, got low = {}, high = {}", op, low, high);
}

void check_normal(const char* op, double mean, double stddev) {
  DDP_CHECK(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0,
            "{}: expected a finite mean and stddev >= 0, got mean = {}, stddev = {}", op, mean,
            stddev);
}

}  // namespace

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  return random_tensor("rand", shape, opts, Distribution::uniform, 0.0, 1.0, gen);
}

Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  return random_tensor("randn", shape, opts, Distribution::normal, 0.0, 1.0, gen);
}

Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts, Generator* gen) {
  check_uniform("uniform", low, high);
  return random_tensor("uniform", shape, opts, Distribution::uniform, low, high, gen);
}

Tensor normal(const Shape& shape, double mean, double stddev, TensorOptions opts,
              Generator* gen) {
  check_normal("normal", mean, stddev);
  return random_tensor("normal", shape, opts, Distribution::normal, mean, stddev, gen);
}

void uniform_(Tensor& t, double low, double high, Generator* gen) {
  check_uniform("uniform_", low, high);
  random_inplace("uniform_", t, Distribution::uniform, low, high, gen);
}

void normal_(Tensor& t, double mean, double stddev, Generator* gen) {
  check_normal("normal_", mean, stddev);
  random_inplace("normal_", t, Distribution::normal, mean, stddev, gen);
}

}  // namespace ddp
