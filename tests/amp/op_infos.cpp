// The op registry's entry for GradScaler: scale, and its fused unscale and inf/NaN check
// (one multi-tensor pass per device and dtype), with the step decision and
// scale update that read its result. Registered from here, as the tensor
// layer may not see amp: see Note [Registering ops from higher layers] in
// tests/tensor/op_registry.h.

#include <cmath>

#include "ddp/amp/grad_scaler.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::amp {
namespace {

using namespace op_samples;

constexpr double kScale = 1024.0;

// Two parameters with gradients that carry the loss scale: {p0, g0, p1, g1}.
SampleFn scaled_grads(Shape a, Shape b) {
  return [=](DType dt, Device dev, Generator& gen) {
    return Tensors{signed_values(a, dt, dev, gen), uniform_values(a, -kScale, kScale, dt, dev, gen),
                   signed_values(b, dt, dev, gen), uniform_values(b, -kScale, kScale, dt, dev, gen)};
  };
}

Tensors leaves_with_grads(const Tensors& in, bool poison) {
  Tensors ps;
  for (size_t k = 0; k + 1 < in.size(); k += 2) {
    Tensor p = in[k].detach().clone().set_requires_grad(true);
    Tensor g = in[k + 1].detach().clone();
    if (poison && k == 2) g.narrow(0, 1, 1).fill_(INFINITY);  // an overflowed gradient
    p.set_grad(g);
    ps.push_back(p);
  }
  return ps;
}

// One scaler step with finite gradients (unscaled, stepped, and the scale
// grows as growth_interval is 1) and one with an inf (skipped, the scale
// backs off, the parameters stay). Inf gradients are not returned.
Tensors run_unscale(const Tensors& in) {
  Tensors out;
  for (bool poison : {false, true}) {
    Tensors ps = leaves_with_grads(in, poison);
    optim::SGD opt(ps, 0.1);
    GradScaler scaler({.init_scale = kScale, .growth_interval = 1});
    out.push_back(scaler.scale(sum(ps[0].detach())));  // the loss backward would start from
    scaler.unscale_(opt);
    if (!poison)
      for (const Tensor& p : ps) out.push_back(p.grad().clone());
    const bool stepped = scaler.step(opt);
    scaler.update();
    for (const Tensor& p : ps) out.push_back(p.detach().clone());
    // On the run's device, like every other output (the comparison expects it).
    const Device dev = ps[0].device();
    out.push_back(Tensor::scalar(stepped ? 1.0 : 0.0, DType::f64).to(dev));
    out.push_back(Tensor::scalar(scaler.get_scale(), DType::f64).to(dev));
  }
  return out;
}

Tensor leaf(Device d, DType dt = DType::f32) {
  return Tensor::zeros({2}, opts(dt, d)).set_requires_grad(true);
}

void add_grad_scaler(std::vector<OpInfo>& ops) {
  // f16 gradients are refused (f32 master weights), as in torch.
  OpInfo op = make("grad_scaler_unscale", {DType::f32, DType::f64, DType::bf16},
                   scaled_grads({3, 4}, {5}), run_unscale);
  op.cuda_samples = {scaled_grads({1024, 1024}, {3001})};
  // f32: the scaled loss is a sum with cancellation (|Σx| ≪ Σ|x|), whose
  // rounding is relative to Σ|x|: 1.25e-6 of the result on the first GPU run.
  op.cuda_scaled_tolerance = {{DType::f64, 1e-12}, {DType::f32, 1e-5}, {DType::bf16, 1e-2}};
  op.bad_inputs = {
      bad_input<ValueError>("f16 gradients", "refusing to unscale the f16 gradient",
                            [](Device d) {
                              Tensor p = leaf(d, DType::f16);
                              p.set_grad(zeros_like(p));
                              optim::SGD opt({p}, 0.1);
                              GradScaler().unscale_(opt);
                            }),
      bad_input<ValueError>("unscale_ twice in one step", "already called",
                            [](Device d) {
                              Tensor p = leaf(d);
                              p.set_grad(zeros_like(p));
                              optim::SGD opt({p}, 0.1);
                              GradScaler scaler;
                              scaler.unscale_(opt);
                              scaler.unscale_(opt);
                            }),
      bad_input<ValueError>("a step with no gradient", "none has a gradient",
                            [](Device d) {
                              optim::SGD opt({leaf(d)}, 0.1);
                              GradScaler().step(opt);
                            }),
      bad_input<ValueError>("init_scale 0", "init_scale must be positive",
                            [](Device) { GradScaler({.init_scale = 0.0}); })};
  ops.push_back(std::move(op));
}

const OpInfoRegistrar kAmpOps("amp", add_grad_scaler);

}  // namespace
}  // namespace ddp::amp
