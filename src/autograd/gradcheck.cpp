// gradcheck: analytical vector-Jacobian products against central differences.

#include "ddp/autograd/gradcheck.h"

#include <cmath>
#include <random>

#include "ddp/autograd/engine.h"
#include "ddp/autograd/grad_mode.h"

namespace ddp::autograd {

namespace {

// Note [Gradcheck with random weights]
// Instead of the full Jacobian, gradcheck checks d s / d x for the scalar
// s = sum_k sum(w_k * out_k) with random weights w_k. One backward seeded
// with w_k as the gradient of out_k gives the analytical gradient of s (the
// vector-Jacobian product with w; seeding directly rather than building s
// with mul and sum keeps those ops out of the check), and central
// differences of s give the numerical one. Random weights make a wrong
// Jacobian entry show up unless it happens to be cancelled exactly; two
// independent weight draws make that vanishingly unlikely, and the same
// numerical perturbations serve both (we keep the change of every output
// element and take both dot products). Weights come from a fixed seed so a
// failure reproduces.
constexpr int kNumWeightDraws = 2;

std::vector<double> random_weights(std::mt19937_64& rng, int64_t n) {
  // Away from zero so no output element is effectively left out.
  std::uniform_real_distribution<double> mag(0.5, 1.5);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> w(static_cast<size_t>(n));
  for (double& v : w) v = sign(rng) ? mag(rng) : -mag(rng);
  return w;
}

// Host copies of the floating outputs, in f64; other outputs count as absent.
std::vector<std::vector<double>> output_values(const Tensors& outs) {
  std::vector<std::vector<double>> vals;
  vals.reserve(outs.size());
  for (const Tensor& o : outs) {
    if (o.defined() && is_floating(o.dtype()))
      vals.push_back(o.to_vector<double>());
    else
      vals.emplace_back();
  }
  return vals;
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensors(const Tensors&)>& fn, const Tensors& inputs,
                          const GradcheckOptions& opts) {
  std::vector<size_t> diff;  // indices of the inputs that are differentiated
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined()) continue;
    DDP_CHECK_T(DTypeError, x.dtype() == DType::f64,
                "gradcheck: input {} is {}; gradcheck needs f64 inputs", i, x.describe());
    DDP_CHECK_T(DeviceError, x.device().is_cpu(),
                "gradcheck: input {} is {}; gradcheck needs CPU inputs", i, x.describe());
    if (x.requires_grad()) diff.push_back(i);
  }
  DDP_CHECK(!diff.empty(), "gradcheck: no input requires grad");

  // ---- numerical: d s_w / d x[j] for every weight draw w ---------------------
  // Output shapes (and the weights) come from one unperturbed evaluation.
  Tensors work;
  std::vector<std::vector<double>> base;
  Tensors base_outs;
  {
    NoGradGuard no_grad;
    for (const Tensor& x : inputs)
      work.push_back(x.defined() ? x.detach().clone().contiguous() : Tensor());
    base_outs = fn(work);
    base = output_values(base_outs);
  }
  std::mt19937_64 rng(0x9e3779b97f4a7c15ULL);
  // weights[d][k]: weight vector of draw d for output k.
  std::vector<std::vector<std::vector<double>>> weights(kNumWeightDraws);
  for (auto& draw : weights)
    for (const auto& v : base) draw.push_back(random_weights(rng, int64_t(v.size())));

  // numerical[d][n][j]: draw d, n-th differentiated input, element j.
  std::vector<std::vector<std::vector<double>>> numerical(
      kNumWeightDraws, std::vector<std::vector<double>>(diff.size()));
  for (size_t n = 0; n < diff.size(); ++n) {
    Tensor& x = work[diff[n]];
    double* data = x.data<double>();  // a contiguous private clone: safe to poke
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double orig = data[j];
      std::vector<std::vector<double>> plus, minus;
      {
        NoGradGuard no_grad;
        data[j] = orig + opts.eps;
        plus = output_values(fn(work));
        data[j] = orig - opts.eps;
        minus = output_values(fn(work));
        data[j] = orig;
      }
      for (int d = 0; d < kNumWeightDraws; ++d) {
        double ds = 0.0;
        for (size_t k = 0; k < base.size(); ++k) {
          DDP_CHECK(plus[k].size() == base[k].size() && minus[k].size() == base[k].size(),
                    "gradcheck: output {} changed its size under a perturbation", k);
          for (size_t e = 0; e < base[k].size(); ++e)
            ds += weights[d][k][e] * (plus[k][e] - minus[k][e]);
        }
        numerical[d][n].push_back(ds / (2.0 * opts.eps));
      }
    }
  }

  // ---- analytical: one vector-Jacobian product per draw ------------------------
  Tensors diff_inputs;
  for (size_t i : diff) diff_inputs.push_back(inputs[i]);
  for (int d = 0; d < kNumWeightDraws; ++d) {
    Tensors outs = fn(inputs);  // a fresh graph per draw: no retain_graph needed
    Tensors roots, seeds;
    for (size_t k = 0; k < outs.size() && k < base_outs.size(); ++k) {
      const Tensor& o = outs[k];
      if (!o.defined() || !is_floating(o.dtype()) || !o.requires_grad()) continue;
      roots.push_back(o);
      seeds.push_back(Tensor::from_vector<double>(weights[d][k], o.shape()).to(o.dtype()));
    }
    Tensors grads(diff_inputs.size());
    if (!roots.empty()) grads = grad(roots, diff_inputs, seeds);

    for (size_t n = 0; n < diff.size(); ++n) {
      const Tensor& x = inputs[diff[n]];
      std::vector<double> analytical = grads[n].defined()
                                           ? grads[n].to_vector<double>()
                                           : std::vector<double>(size_t(x.numel()), 0.0);
      for (size_t j = 0; j < analytical.size(); ++j) {
        const double a = analytical[j], num = numerical[d][n][j];
        if (std::abs(a - num) <= opts.atol + opts.rtol * std::abs(num)) continue;
        GradcheckResult r;
        r.ok = false;
        r.message = fmt::format(
            "gradcheck: input {} ({}) element {} (row-major), weight draw {}: analytical "
            "{:.10g} vs numerical {:.10g} (|diff| {:.3g} > atol {} + rtol {} * |numerical|)",
            diff[n], x.describe(), j, d, a, num, std::abs(a - num), opts.atol, opts.rtol);
        return r;
      }
    }
  }
  return {};
}

}  // namespace ddp::autograd
