#pragma once
// Shared by the op-consistency tests (op_consistency*_test.cpp), which walk
// op_registry(): running an entry on a device, its gradients, and comparing
// two runs. See Note [Registering ops from higher layers] in op_registry.h.

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "ddp/autograd/engine.h"
#include "ddp/ddp.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::op_consistency {

constexpr uint64_t kSampleSeed = 42;
constexpr uint64_t kGradWeightSeed = 7;

inline std::string describe_all(const Tensors& ts) {
  std::string s;
  for (const Tensor& t : ts) s += (s.empty() ? "" : ", ") + (t.defined() ? t.describe() : "undefined");
  return s;
}

// Registry names, for INSTANTIATE_TEST_SUITE_P, of the entries that pass.
inline std::vector<std::string> op_names(std::function<bool(const OpInfo&)> keep = {}) {
  std::vector<std::string> names;
  for (const OpInfo& op : op_registry())
    if (!keep || keep(op)) names.push_back(op.name);
  return names;
}

inline std::string param_name(const ::testing::TestParamInfo<std::string>& p) { return p.param; }

inline Tensors sample_on(const op_samples::SampleFn& sample, DType dt, Device dev) {
  Generator gen(kSampleSeed);
  return sample(dt, dev, gen);
}

struct RunResult {
  Tensors outputs;
  Tensors grads;  // one per op.grad_inputs entry; undefined where unreachable
  // With per_output: output_grads[k] holds the gradients of out_k's own
  // term, sum(w_k · out_k), one per op.grad_inputs entry (empty when out_k
  // does not require grad); `grads` is then left empty.
  std::vector<Tensors> output_grads;
};

// Runs op on inputs. With_grads (floating dtypes of differentiable ops), its
// grad_inputs become leaves and the gradients of Σ_k sum(w_k · out_k) are
// taken, the weights w_k drawn in f32 on the CPU from a fixed generator and
// then converted and moved (Note [Sample inputs]), so both devices
// backpropagate the same values. Per_output takes each term's gradients
// apart instead (same weights), so that a small output's gradient (a mean
// loss's, ~1/N) is not hidden in a large one's when they are compared
// relative to their scale. Outputs come back detached.
inline RunResult run_op(const OpInfo& op, Tensors inputs, bool with_grads,
                        bool per_output = false) {
  RunResult r;
  Tensors leaves;
  if (with_grads) {
    for (int k : op.grad_inputs) {
      inputs[size_t(k)] = inputs[size_t(k)].detach().set_requires_grad(true);
      leaves.push_back(inputs[size_t(k)]);
    }
  }
  Tensors out = op.run(inputs);
  Tensors terms(out.size());
  Generator wgen(kGradWeightSeed);
  for (size_t k = 0; k < out.size(); ++k) {
    const Tensor& o = out[k];
    if (!with_grads || !o.requires_grad()) continue;
    Tensor w = op_samples::uniform_values(o.shape(), -1, 1, o.dtype(), o.device(), wgen);
    terms[k] = sum(mul(o, w)).to(DType::f64);
  }
  if (per_output) {
    r.output_grads.resize(out.size());
    size_t last = 0;
    for (size_t k = 0; k < terms.size(); ++k)
      if (terms[k].defined()) last = k;
    for (size_t k = 0; k < terms.size(); ++k)
      if (terms[k].defined())
        r.output_grads[k] =
            autograd::grad({terms[k]}, leaves, {ones_like(terms[k])}, /*retain_graph=*/k != last);
  } else {
    Tensor loss;
    for (const Tensor& t : terms)
      if (t.defined()) loss = loss.defined() ? add(loss, t) : t;
    if (loss.defined()) r.grads = autograd::grad({loss}, leaves, {ones_like(loss)});
  }
  for (const Tensor& o : out) r.outputs.push_back(o.detach());
  return r;
}

// ---- Comparing a run with a reference, relative to the reference's scale ----
//
// The CUDA half of the op-consistency test (and tests/nn/models_gpu_test.cpp)
// accept a floating tensor when
//     max_i |got_i − want_i|  ≤  rtol · S + atol,     S = max_i |want_i|,
// each output and each gradient against its own scale S. Not elementwise
// (|got_i − want_i| ≤ rtol·|want_i|): near a cancelled zero (a reduction, a
// gradient summing terms of both signs) an element's own size says nothing
// about the error its terms carry. Not max(1, S) or a fixed atol either: a
// small output (a mean over 3M values, ~1e-3; a mean loss's gradient, ~1/N)
// would meet a bound larger than itself, and any error in it would pass.
//
// rtol is counted in u, the unit roundoff of the dtype (the largest relative
// error of one rounding to nearest): 2^-11 for f16, 2^-8 for bf16, 2^-24 for
// f32, 2^-53 for f64. atol is only the dtype's absolute resolution at the
// bottom of its range: f16 keeps a fixed step of 2^-24 below 2^-14
// (subnormals), so a flip there is 2^-24 whatever the scale; f32 and bf16
// (and f64) get their smallest normal number, as GPU kernels may flush
// subnormal results to zero. An all-zero reference must be matched by zeros.
//
// Default rtol (entries without cuda_scaled_tolerance: the tensor layer's
// hand kernels; elementwise ops, reductions, matmul, softmax, indexing):
//  - f16, bf16: 8u (f16 3.9e-3, bf16 3.1e-2). Both devices compute each op
//    in f32 from bit-identical inputs and round once to the storage type
//    (Note [Compute type]). Their f32 values differ by the summation order
//    and by the GPU's intrinsics, far below u, but enough to put a value on
//    the other side of a rounding boundary: one ulp, ≤ 2u·S. Composite ops
//    (pow, softmax's backward) and autograd summing two uses of an input in
//    the storage dtype add a rounding or two; 8u leaves 2× on top of that.
//    Accumulation length: reductions accumulate in f32 (Note [Half-precision
//    statistics], Note [CPU float sums], Note [CUDA row reductions]), where
//    the two orders differ by about 2^-24·√(log2 n)·√(Σ x²) (pairwise and
//    tree sums, random rounding errors). For the zero-mean samples the
//    largest of many sums is ~3·√(Σ x²), so this is ~1e-7·S for n up to
//    2^30, three orders or more below u for either half type: n does not
//    enter the bound. A single scalar (a full sum or mean) is its own scale,
//    S ≈ |z|·√(Σ x²) for a fixed normal draw z, which multiplies that by
//    1/|z|: still far below 8u unless |z| < 1e-3. (Were a kernel to
//    accumulate in the storage type, the error would grow like u·√n, and
//    its entry would state its own bound.)
//  - f32: 1e-4. Only summation order and intrinsics differ (a few 2^-24
//    relative per op, ~4e-7/|z| for such a scalar sum), so 1e-4 holds for
//    |z| down to ~0.005.
//  - f64: 1e-10, as f32 with 2^-53.
// Entries with cuda_scaled_tolerance (cuDNN and cuBLASLt long sums,
// attention) state their own rtol per dtype, on the same S: their kernels may
// round intermediates in the storage type (split sums, flash attention's
// probabilities).
struct ScaleTolerance {
  double rtol = 0;  // of S = max |want|
  double atol = 0;
};

inline double unit_roundoff(DType dt) {
  switch (dt) {
    case DType::f16:
      return std::ldexp(1.0, -11);
    case DType::bf16:
      return std::ldexp(1.0, -8);
    case DType::f32:
      return std::ldexp(1.0, -24);
    case DType::f64:
      return std::ldexp(1.0, -53);
    default:
      return 0.0;
  }
}

inline double resolution_floor(DType dt) {
  switch (dt) {
    case DType::f16:
      return std::ldexp(1.0, -24);
    case DType::bf16:
    case DType::f32:
      return double(std::numeric_limits<float>::min());
    case DType::f64:
      return std::numeric_limits<double>::min();
    default:
      return 0.0;
  }
}

// The default above: entries without cuda_scaled_tolerance.
inline ScaleTolerance default_scaled_tolerance(DType dt) {
  switch (dt) {
    case DType::f16:
    case DType::bf16:
      return {8 * unit_roundoff(dt), resolution_floor(dt)};
    case DType::f32:
      return {1e-4, resolution_floor(dt)};
    case DType::f64:
      return {1e-10, resolution_floor(dt)};
    default:
      return {0, 0};
  }
}

// The entry's own rtol for dt if it states one, else the default.
inline ScaleTolerance scaled_tolerance_for(const OpInfo& op, DType dt) {
  if (auto it = op.cuda_scaled_tolerance.find(dt); it != op.cuda_scaled_tolerance.end())
    return {it->second, resolution_floor(dt)};
  return default_scaled_tolerance(dt);
}

struct ScaledComparison {
  double max_error = 0;  // max |got − want|; infinite for a NaN, an unmatched inf, a shape mismatch
  int64_t worst = -1;    // flat index of max_error (-1: none, or a shape mismatch)
  double scale = 0;      // S: max |want| over its finite elements
  double bound = 0;      // rtol · S + atol
  double rtol = 0;
  bool ok() const { return max_error <= bound; }
  // max_error / S ("inf" for S = 0 and an error), for messages and calibration.
  double relative() const {
    return max_error == 0 ? 0.0 : scale > 0 ? max_error / scale : INFINITY;
  }
  std::string describe() const {
    return fmt::format(
        "max |error| {:.3g} at element {} is {:.3g} of the reference's scale {:.3g}; bound "
        "{:.3g} (rtol {:.3g} of the scale + atol)",
        max_error, worst, relative(), scale, bound, rtol);
  }
};

// max |got − want| against rtol · max |want| + atol, in f64 on the host. A
// NaN on either side is an infinite error; equal infinities are no error.
inline ScaledComparison compare_scaled(const Tensor& got, const Tensor& want, ScaleTolerance tol) {
  ScaledComparison c;
  c.rtol = tol.rtol;
  if (got.shape() != want.shape()) {
    c.max_error = INFINITY;
    c.bound = tol.atol;
    return c;
  }
  const std::vector<double> g = got.cpu().to(DType::f64).to_vector<double>();
  const std::vector<double> w = want.cpu().to(DType::f64).to_vector<double>();
  for (double v : w)
    if (std::isfinite(v)) c.scale = std::max(c.scale, std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = g[i] == w[i] ? 0.0 : std::abs(g[i] - w[i]);  // equal infinities: 0
    const double e = std::isnan(d) ? INFINITY : d;                // NaN anywhere, inf - x
    if (e > c.max_error) {
      c.max_error = e;
      c.worst = int64_t(i);
    }
  }
  c.bound = tol.rtol * c.scale + tol.atol;
  return c;
}

}  // namespace ddp::op_consistency
