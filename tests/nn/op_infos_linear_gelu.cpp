// The op registry's entry for linear_gelu (the fused linear + tanh GELU of
// Note [linear_gelu]); linear's own entry is in op_infos_dense.cpp.
// Registered from here, as the tensor layer may not see nn: see Note
// [Registering ops from higher layers] in tests/tensor/op_registry.h.

#include "ddp/nn/functional/linear.h"
#include "ddp/tensor/ops.h"
#include "tensor/op_registry.h"

namespace ddp::nn::functional {
namespace {

using namespace op_samples;

// As linear's entry: gradients that sum over many rows (db over 4096).
const std::map<DType, double> kTolerance = {
    {DType::f64, 1e-10}, {DType::f32, 1e-4}, {DType::f16, 4e-3}, {DType::bf16, 2e-2}};

void add_linear_op_infos(std::vector<OpInfo>& ops) {
  // out = 8 reaches the fused CUDA path (the GELU aux needs out % 8 == 0);
  // the 6-feature slice and the strided input take the composed one.
  OpInfo op = make(
      "linear_gelu", kFloats, signed_samples({{3, 4, 5}, {8, 5}, {8}}),
      [](const Tensors& in) {
        const Tensor &x = in[0], &w = in[1], &b = in[2];
        return Tensors{linear_gelu(x, w, b), linear_gelu(x, w),
                       linear_gelu(x.transpose(0, 1), w.narrow(0, 0, 6), b.narrow(0, 0, 6))};
      },
      {0, 1, 2});
  // A GPT-2 MLP's first layer: 4096 tokens (2 × 2048), 768 → 3072.
  op.cuda_samples = {signed_samples({{2, 2048, 768}, {3072, 768}, {3072}})};
  op.cuda_scaled_tolerance = kTolerance;
  op.bad_inputs = {
      bad_input<ShapeError>("in-features that differ", "linear_gelu",
                            [](Device d) { linear_gelu(zeros({2, 4}, d), zeros({3, 5}, d)); }),
      bad_input<ShapeError>("a 1-D weight", "weight must be [out, in]",
                            [](Device d) { linear_gelu(zeros({2, 4}, d), zeros({4}, d)); }),
      bad_input<ShapeError>("a bias of the wrong size", "bias must be [3]",
                            [](Device d) {
                              linear_gelu(zeros({2, 4}, d), zeros({3, 4}, d), zeros({4}, d));
                            }),
      bad_input<DTypeError>("integer tensors", "linear_gelu", [](Device d) {
        linear_gelu(zeros({2, 4}, d, DType::i64), zeros({3, 4}, d, DType::i64));
      })};
  ops.push_back(std::move(op));
}

const OpInfoRegistrar kLinearOps("nn/functional/linear", add_linear_op_infos);

}  // namespace
}  // namespace ddp::nn::functional
