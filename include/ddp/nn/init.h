#pragma once
// Parameter initialisation, like torch.nn.init: the same formulas for fans,
// gains and bounds, drawing from ddp's seeded Philox generators (so the
// numbers differ from PyTorch's, the distributions do not). Each function
// fills the tensor in place without recording autograd (it is meant for
// parameters that require grad) and returns it; the fan-based ones leave a
// tensor with no elements alone, as torch does. `gen` = nullptr draws from
// default_generator(), so manual_seed(s) makes initialisation reproducible.

#include <cstdint>
#include <optional>

#include "ddp/tensor/generator.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::init {

enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu, selu };
enum class FanMode { fan_in, fan_out };

struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};

// torch.nn.init._calculate_fan_in_and_fan_out: for a weight of shape
// [out, in, k...], fan_in = in * prod(k), fan_out = out * prod(k). Tensors
// with fewer than 2 dims raise ShapeError.
Fans calculate_fans(const Tensor& t);
int64_t calculate_fan(const Tensor& t, FanMode mode);

// The recommended gain of a nonlinearity: 1 for linear/conv/sigmoid, 5/3 for
// tanh, sqrt(2) for relu, sqrt(2 / (1 + slope^2)) for leaky_relu (`param` is
// the negative slope, by default torch's 0.01), 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);

Tensor uniform_(const Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor normal_(const Tensor& t, double mean = 0.0, double stddev = 1.0, Generator* gen = nullptr);
Tensor constant_(const Tensor& t, double value);
Tensor zeros_(const Tensor& t);
Tensor ones_(const Tensor& t);

// Glorot: std = gain * sqrt(2 / (fan_in + fan_out)); uniform in ±sqrt(3)·std.
Tensor xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);
Tensor xavier_normal_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);

// He: std = gain(nonlinearity, a) / sqrt(fan); uniform in ±sqrt(3)·std.
// `a` is the negative slope of the leaky_relu that follows.
// torch's defaults: a = 0, fan_in, leaky_relu (so the gain is sqrt(2));
// torch's Linear and Conv layers use kaiming_uniform_(w, a = sqrt(5)).
Tensor kaiming_uniform_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu,
                        Generator* gen = nullptr);
Tensor kaiming_normal_(const Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                       Nonlinearity nonlinearity = Nonlinearity::leaky_relu,
                       Generator* gen = nullptr);

}  // namespace ddp::nn::init
