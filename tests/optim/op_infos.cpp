// The op registry's entries for the fused multi-tensor ops of optim (Note
// [Fused optimizer steps]): SGD's and AdamW's steps, clip_grad_norm_ and
// clip_grad_value_. Each run builds leaves from the sample, gives them the
// sample's gradients, and returns what the op wrote; none is
// differentiable. Registered from here, as the tensor layer may not see
// optim: see Note [Registering ops from higher layers] in
// tests/tensor/op_registry.h.

#include <cmath>

#include "ddp/autograd/grad_mode.h"
#include "ddp/optim/adamw.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::optim {
namespace {

using namespace op_samples;

// One formula on both devices, but the GPU may contract a*b+c (Note
// [Foreach numerics]): the bounds of tests/optim/fused_step_gpu_test.cpp.
const std::map<DType, double> kStepTolerance = {
    {DType::f64, 1e-12}, {DType::f32, 1e-5}, {DType::f16, 2e-3}, {DType::bf16, 1e-2}};

// Two parameters with their gradients: {p0, g0, p1, g1}.
SampleFn params_and_grads(Shape a, Shape b) {
  return [=](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values(a, dt, dev, gen), signed_values(a, dt, dev, gen),
                   signed_values(b, dt, dev, gen), signed_values(b, dt, dev, gen)};
  };
}
// Large enough for several 16K-element chunks per launch, and an odd size.
SampleFn large_params() { return params_and_grads({1024, 1024}, {3001}); }

// Fresh leaves holding the sample's parameters, with its gradients.
Tensors leaves_with_grads(const Tensors& in, double grad_scale = 1.0) {
  Tensors ps;
  for (size_t k = 0; k + 1 < in.size(); k += 2) {
    Tensor p = in[k].detach().clone().set_requires_grad(true);
    p.set_grad(mul(in[k + 1].detach(), grad_scale));
    ps.push_back(p);
  }
  return ps;
}
Tensors detached(const Tensors& ts) {
  Tensors out;
  for (const Tensor& t : ts) out.push_back(t.detach().clone());
  return out;
}
Tensors grads_of(const Tensors& ps) {
  Tensors out;
  for (const Tensor& p : ps) out.push_back(p.grad().clone());
  return out;
}
void append(Tensors& to, const Tensors& more) { to.insert(to.end(), more.begin(), more.end()); }
// The optimizer's state tensors, parameter by parameter, in its key order.
void append_state(Tensors& to, const Optimizer& opt, size_t params) {
  for (size_t i = 0; i < params; ++i)
    for (const Tensor& t : opt.state(i).values()) to.push_back(t.to(DType::f64).reshape({-1}));
}

Tensor f32(const Shape& s, Device d) { return Tensor::zeros(s, opts(DType::f32, d)); }
Tensor leaf(Device d) { return f32({2}, d).set_requires_grad(true); }

void add_steps(std::vector<OpInfo>& ops) {
  // Two groups, three steps (the first creates the momentum buffers).
  OpInfo sgd = make("sgd_step", kFloats, params_and_grads({3, 4}, {5}), [](const Tensors& in) {
    Tensors ps = leaves_with_grads(in), plain = leaves_with_grads(in);
    SGD opt({{{ps[0]}, std::nullopt, std::nullopt}, {{ps[1]}, 0.05, 0.0}}, 0.1,
            {.momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    SGD simple(plain, 0.1, {.maximize = true});
    for (int s = 0; s < 3; ++s) opt.step(), simple.step();
    Tensors out = detached(ps);
    append(out, detached(plain));
    append_state(out, opt, ps.size());
    return out;
  });
  sgd.cuda_samples = {large_params()};
  sgd.cuda_scaled_tolerance = kStepTolerance;
  sgd.bad_inputs = {
      bad_input<ValueError>("a negative lr", "lr must be in",
                            [](Device d) { SGD({leaf(d)}, -0.1); }),
      bad_input<ValueError>("nesterov without momentum", "nesterov momentum requires momentum > 0",
                            [](Device d) { SGD({leaf(d)}, 0.1, {.nesterov = true}); }),
      bad_input<ValueError>("a parameter that does not require grad",
                            "must be a floating leaf tensor that requires grad",
                            [](Device d) { SGD({f32({2}, d)}, 0.1); }),
      bad_input<ValueError>("a parameter given twice", "appears more than once", [](Device d) {
        Tensor p = leaf(d);
        SGD({p, p}, 0.1);
      })};
  ops.push_back(std::move(sgd));

  OpInfo adamw = make("adamw_step", kFloats, params_and_grads({3, 4}, {5}), [](const Tensors& in) {
    Tensors ps = leaves_with_grads(in), ams = leaves_with_grads(in);
    AdamW opt({{{ps[0]}, std::nullopt, std::nullopt}, {{ps[1]}, 0.02, 0.0}}, 0.01, {.weight_decay = 0.1});
    AdamW amsgrad(ams, 0.01, {.betas = {0.8, 0.99}, .amsgrad = true, .maximize = true});
    for (int s = 0; s < 3; ++s) opt.step(), amsgrad.step();
    Tensors out = detached(ps);
    append(out, detached(ams));
    append_state(out, opt, ps.size());
    append_state(out, amsgrad, ams.size());
    return out;
  });
  adamw.cuda_samples = {large_params()};
  adamw.cuda_scaled_tolerance = kStepTolerance;
  adamw.bad_inputs = {
      bad_input<ValueError>("beta1 = 1", "betas[0] must be in",
                            [](Device d) { AdamW({leaf(d)}, 0.1, {.betas = {1.0, 0.999}}); }),
      bad_input<ValueError>("a negative eps", "eps must be in",
                            [](Device d) { AdamW({leaf(d)}, 0.1, {.eps = -1.0}); }),
      bad_input<ValueError>("an empty parameter group", "has no parameters",
                            [](Device) { AdamW(std::vector<ParamGroup>{ParamGroup{{}, std::nullopt, std::nullopt}}, 0.1); })};
  ops.push_back(std::move(adamw));
}

void add_clipping(std::vector<OpInfo>& ops) {
  OpInfo norm = make("clip_grad_norm", kFloats, params_and_grads({3, 4}, {5}), [](const Tensors& in) {
    Tensors two = leaves_with_grads(in), inf = leaves_with_grads(in), loose = leaves_with_grads(in);
    const double n2 = clip_grad_norm_(two, 0.5);
    const double ninf = clip_grad_norm_(inf, 0.5, INFINITY);
    const double n3 = clip_grad_norm_(loose, 100.0, 3.0);  // under the bound: untouched
    Tensors out = grads_of(two);
    append(out, grads_of(inf));
    append(out, grads_of(loose));
    // The norms on the inputs' device, like every other output: the GPU
    // comparison expects each output where the op ran (the 2026-11-28 GPU
    // run failed on host scalars here).
    for (double n : {n2, ninf, n3})
      out.push_back(Tensor::scalar(n, TensorOptions(DType::f64).device(in[0].device())));
    return out;
  });
  norm.cuda_samples = {large_params()};
  norm.cuda_scaled_tolerance = kStepTolerance;
  norm.bad_inputs = {
      bad_input<ValueError>("a negative max_norm", "max_norm must be >= 0",
                            [](Device d) { clip_grad_norm_({leaf(d)}, -1.0); }),
      bad_input<ValueError>("norm_type 0", "norm_type must be > 0",
                            [](Device d) { clip_grad_norm_({leaf(d)}, 1.0, 0.0); }),
      bad_input<Error>("an infinite gradient with error_if_nonfinite", "clip_grad_norm_",
                       [](Device d) {
                         Tensor p = leaf(d);
                         p.set_grad(Tensor::full({2}, INFINITY, opts(DType::f32, d)));
                         clip_grad_norm_({p}, 1.0, 2.0, /*error_if_nonfinite=*/true);
                       })};
  ops.push_back(std::move(norm));

  OpInfo value = make("clip_grad_value", kFloats, params_and_grads({3, 4}, {5}), [](const Tensors& in) {
    Tensors ps = leaves_with_grads(in);
    clip_grad_value_(ps, 0.75);
    return grads_of(ps);
  });
  value.cuda_samples = {large_params()};
  value.bad_inputs = {bad_input<ValueError>("a negative clip_value", "clip_value must be >= 0",
                                            [](Device d) { clip_grad_value_({leaf(d)}, -1.0); })};
  ops.push_back(std::move(value));
}

void add_optim_op_infos(std::vector<OpInfo>& ops) {
  add_steps(ops);
  add_clipping(ops);
}

const OpInfoRegistrar kOptimOps("optim", add_optim_op_infos);

}  // namespace
}  // namespace ddp::optim
