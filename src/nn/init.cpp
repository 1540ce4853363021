// Parameter initialisation (init.h), after torch.nn.init's formulas.

#include "ddp/nn/init.h"

#include <cmath>

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"

namespace ddp::nn::init {

namespace {

void check_tensor(const Tensor& t, const char* op) {
  DDP_CHECK(t.defined(), "init::{}: the tensor is undefined", op);
}

// uniform_/normal_ of the ops layer take a mutable handle; a copy of the
// handle writes the same storage.
Tensor fill_uniform(const Tensor& t, double low, double high, Generator* gen) {
  NoGradGuard no_grad;
  Tensor h = t;
  ddp::uniform_(h, low, high, gen);
  return t;
}

Tensor fill_normal(const Tensor& t, double mean, double stddev, Generator* gen) {
  NoGradGuard no_grad;
  Tensor h = t;
  ddp::normal_(h, mean, stddev, gen);
  return t;
}

}  // namespace

Fans calculate_fans(const Tensor& t) {
  check_tensor(t, "calculate_fans");
  DDP_CHECK_T(ShapeError, t.dim() >= 2,
              "init::calculate_fans: fan in and fan out need a tensor of at least 2 dims, got {}",
              t.describe());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return Fans{t.size(1) * receptive, t.size(0) * receptive};
}

int64_t calculate_fan(const Tensor& t, FanMode mode) {
  Fans f = calculate_fans(t);
  return mode == FanMode::fan_in ? f.fan_in : f.fan_out;
}

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: {
      double slope = param.value_or(0.01);
      DDP_CHECK(std::isfinite(slope), "init::calculate_gain: negative slope {} is not finite",
                slope);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::selu:
      return 0.75;
  }
  DDP_THROW(ValueError, "init::calculate_gain: unknown nonlinearity {}", int(nonlinearity));
}

Tensor uniform_(const Tensor& t, double low, double high, Generator* gen) {
  check_tensor(t, "uniform_");
  return fill_uniform(t, low, high, gen);
}

Tensor normal_(const Tensor& t, double mean, double stddev, Generator* gen) {
  check_tensor(t, "normal_");
  return fill_normal(t, mean, stddev, gen);
}

Tensor constant_(const Tensor& t, double value) {
  check_tensor(t, "constant_");
  NoGradGuard no_grad;
  Tensor(t).fill_(value);
  return t;
}
Tensor zeros_(const Tensor& t) { return constant_(t, 0.0); }
Tensor ones_(const Tensor& t) { return constant_(t, 1.0); }

Tensor xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  Fans f = calculate_fans(t);
  if (t.numel() == 0) return t;
  double bound = std::sqrt(3.0) * gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out));
  return fill_uniform(t, -bound, bound, gen);
}

Tensor xavier_normal_(const Tensor& t, double gain, Generator* gen) {
  Fans f = calculate_fans(t);
  if (t.numel() == 0) return t;
  return fill_normal(t, 0.0, gain * std::sqrt(2.0 / double(f.fan_in + f.fan_out)), gen);
}

namespace {
double kaiming_std(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  // torch passes `a` as the slope whatever the nonlinearity; only
  // leaky_relu reads it.
  return calculate_gain(nonlinearity, a) / std::sqrt(double(calculate_fan(t, mode)));
}
}  // namespace

Tensor kaiming_uniform_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                        Generator* gen) {
  check_tensor(t, "kaiming_uniform_");
  calculate_fans(t);  // rank check even for an empty tensor
  if (t.numel() == 0) return t;
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nonlinearity);
  return fill_uniform(t, -bound, bound, gen);
}

Tensor kaiming_normal_(const Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity,
                       Generator* gen) {
  check_tensor(t, "kaiming_normal_");
  calculate_fans(t);
  if (t.numel() == 0) return t;
  return fill_normal(t, 0.0, kaiming_std(t, a, mode, nonlinearity), gen);
}

}  // namespace ddp::nn::init
