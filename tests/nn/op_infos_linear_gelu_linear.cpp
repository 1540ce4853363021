// The op registry's entry for linear_gelu_linear (the GPT MLP's two layers
// as one op, Note [linear_gelu_linear]). Its own file, registered from nn
// (Note [Registering ops from higher layers] in tests/tensor/op_registry.h).

#include "ddp/nn/functional/linear.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::nn::functional {
namespace {

using namespace op_samples;

// As linear's entry: gradients that sum over many rows (db1, db2 over 512).
const std::map<DType, double> kTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 4e-3}, {DType::bf16, 2e-2}};

void add_linear_gelu_linear_op_info(std::vector<OpInfo>& ops) {
  // hid = 8 reaches the fused CUDA path (forward GELU aux and the backward's
  // DGELU_BGRAD need hid % 8 == 0); the 6-wide hidden slice with a strided
  // input takes the composed one.
  OpInfo op = make(
      "linear_gelu_linear", kFloats, signed_samples({{3, 4, 5}, {8, 5}, {8}, {6, 8}, {6}}),
      [](const Tensors& in) {
        const Tensor &x = in[0], &w1 = in[1], &b1 = in[2], &w2 = in[3], &b2 = in[4];
        return Tensors{linear_gelu_linear(x, w1, b1, w2, b2), linear_gelu_linear(x, w1, {}, w2),
                       linear_gelu_linear(x.transpose(0, 1), w1.narrow(0, 0, 6),
                                          b1.narrow(0, 0, 6), w2.narrow(1, 0, 6), b2)};
      },
      {0, 1, 2, 3, 4});
  // A GPT-2 MLP: 512 tokens, 768 → 3072 → 768.
  op.cuda_samples = {signed_samples({{512, 768}, {3072, 768}, {3072}, {768, 3072}, {768}})};
  op.cuda_scaled_tolerance = kTolerance;
  op.bad_inputs = {
      bad_input<ShapeError>("a w2 whose in-features are not w1's out-features",
                            "linear_gelu_linear: w2 must be [out, 3]",
                            [](Device d) {
                              linear_gelu_linear(zeros({2, 4}, d), zeros({3, 4}, d), {},
                                                 zeros({5, 4}, d));
                            }),
      bad_input<ShapeError>("a b2 of the wrong size", "linear_gelu_linear: b2 must be [5]",
                            [](Device d) {
                              linear_gelu_linear(zeros({2, 4}, d), zeros({3, 4}, d), {},
                                                 zeros({5, 3}, d), zeros({3}, d));
                            }),
      bad_input<ShapeError>("in-features that differ", "linear_gelu_linear",
                            [](Device d) {
                              linear_gelu_linear(zeros({2, 4}, d), zeros({3, 5}, d), {},
                                                 zeros({5, 3}, d));
                            }),
      bad_input<DTypeError>("a w2 of another dtype", "linear_gelu_linear", [](Device d) {
        linear_gelu_linear(zeros({2, 4}, d), zeros({3, 4}, d), {}, zeros({5, 3}, d, DType::f64));
      })};
  ops.push_back(std::move(op));
}

const OpInfoRegistrar kLinearGeluLinearOps("nn/functional/linear_gelu_linear",
                                           add_linear_gelu_linear_op_info);

}  // namespace
}  // namespace ddp::nn::functional
