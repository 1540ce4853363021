// The dense layers' construction (parameters, names, init), modes, repr,
// Dropout and Flatten behaviour, and their errors for bad inputs.

#include <cmath>

#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/dropout.h"
#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/functional/layer_norm.h"
#include "ddp/nn/functional/linear.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

TEST(DenseLayers, LinearParametersAndInit) {
  manual_seed(0);
  nn::Linear lin(64, 32);
  EXPECT_EQ(lin.named_parameters().keys(), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(lin.weight.shape(), (Shape{32, 64}));
  EXPECT_EQ(lin.bias.shape(), (Shape{32}));
  // kaiming_uniform(a = √5) and the bias both draw from U(-1/√in, 1/√in).
  const double bound = 1.0 / 8.0;
  for (const Tensor& t : {lin.weight, lin.bias}) {
    EXPECT_LE(max(t).item<double>(), bound);
    EXPECT_GE(min(t).item<double>(), -bound);
    EXPECT_GT(max(t).item<double>(), 0.8 * bound);  // spread over the range
  }
  EXPECT_EQ(lin.to_string(), "Linear(in_features=64, out_features=32, bias=true)");
  nn::Linear no_bias(3, 2, false);
  EXPECT_EQ(no_bias.parameters().size(), 1u);
  EXPECT_EQ(no_bias.state_dict().keys(), (std::vector<std::string>{"weight"}));
}

TEST(DenseLayers, LinearInitIsSeeded) {
  manual_seed(5);
  nn::Linear a(4, 3);
  manual_seed(5);
  nn::Linear b(4, 3);
  EXPECT_TRUE(allclose(a.weight, b.weight, 0, 0));
  EXPECT_TRUE(allclose(a.bias, b.bias, 0, 0));
}

TEST(DenseLayers, LinearTakesAnyLeadingShape) {
  nn::Linear lin(3, 2);
  EXPECT_EQ(lin(Tensor::ones({3})).shape(), (Shape{2}));
  EXPECT_EQ(lin(Tensor::ones({4, 5, 3})).shape(), (Shape{4, 5, 2}));
  EXPECT_EQ(lin(Tensor::ones({0, 3})).shape(), (Shape{0, 2}));
}

TEST(DenseLayers, LayerNormAndEmbeddingInit) {
  nn::LayerNorm ln(Shape{2, 3});
  EXPECT_EQ(values(ln.weight), std::vector<double>(6, 1.0));
  EXPECT_EQ(values(ln.bias), std::vector<double>(6, 0.0));
  EXPECT_EQ(ln.to_string(), "LayerNorm([2, 3], eps=1e-05, elementwise_affine=true)");
  manual_seed(1);
  nn::Embedding emb(100, 50);
  EXPECT_EQ(emb.weight.shape(), (Shape{100, 50}));
  EXPECT_NEAR(mean(emb.weight).item<double>(), 0.0, 0.05);
  EXPECT_NEAR(var(emb.weight).item<double>(), 1.0, 0.06);
}

// A row of millions of values (layer_norm over [rows, cols] at once): f32
// agrees with f64 to f32 rounding, forward and backward. A running f32 sum
// drifted by 2e-3 of the result here (Note [LayerNorm formulas]).
TEST(DenseLayers, LayerNormLongRowsMatchF64) {
  Generator gen(7);
  Tensor x64 = randn({4096, 768}, TensorOptions(DType::f64), &gen).mul_(0.7).add_(
      Tensor::scalar(0.3, DType::f64));
  Tensor dy64 = randn({4096, 768}, TensorOptions(DType::f64), &gen);
  auto run = [&](DType dt, Tensor* dx) {
    Tensor x = x64.to(dt).detach().set_requires_grad();
    Tensor y = F::layer_norm(x, {4096, 768}, {}, {}, 1e-3);
    sum(y * dy64.to(dt)).backward();
    *dx = x.grad().to(DType::f64);
    return y.to(DType::f64);
  };
  auto largest = [](const Tensor& t) { return max(abs(t)).item<double>(); };
  Tensor dx64, dx32;
  Tensor y64 = run(DType::f64, &dx64), y32 = run(DType::f32, &dx32);
  EXPECT_LT(largest(y32 - y64), 2e-5 * largest(y64));
  EXPECT_LT(largest(dx32 - dx64), 2e-5 * largest(dx64));
}

TEST(DenseLayers, LayerNormNormalisesRows) {
  Generator gen(3);
  Tensor x = randn({4, 16}, {}, &gen) * 5.0 + 2.0;
  Tensor y = F::layer_norm(x, {16});
  auto m = values(mean(y, {1})), v = values(var(y, {1}, 0));
  for (double e : m) EXPECT_NEAR(e, 0.0, 1e-6);
  for (double e : v) EXPECT_NEAR(e, 1.0, 1e-3);  // var / (var + eps)
}

TEST(DenseLayers, LayerNormInReducedPrecisionMatchesF32) {
  Generator gen(4);
  Tensor x = randn({3, 40}, {}, &gen);
  Tensor ref = F::layer_norm(x, {40});
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor y = F::layer_norm(x.to(dt), {40});
    EXPECT_EQ(y.dtype(), dt);
    // One rounding of the output: 2^-8 (bf16) relative to values of size ~3.
    EXPECT_LE(max_abs_error(y.to(DType::f32), ref), 3 * 0.0079) << dtype_name(dt);
  }
}

TEST(DenseLayers, DropoutTrainAndEval) {
  nn::Dropout drop(0.25);
  EXPECT_EQ(drop.to_string(), "Dropout(p=0.25)");
  Tensor x = Tensor::ones({100, 100}).set_requires_grad();
  manual_seed(7);
  Tensor y = drop(x);
  auto v = values(y);
  int64_t zeros = 0;
  for (double e : v) {
    if (e == 0.0)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(float(e), float(1.0 / 0.75));
  }
  EXPECT_NEAR(double(zeros) / 10000.0, 0.25, 0.02);
  // The same seed drops the same elements.
  manual_seed(7);
  EXPECT_TRUE(allclose(drop(x), y, 0, 0));
  // Backward: the same mask and scale.
  sum(y).backward();
  EXPECT_TRUE(allclose(x.grad(), y.detach(), 0, 0));
  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));
  nn::Dropout all(1.0);
  EXPECT_EQ(values(sum(all(x))), std::vector<double>{0.0});
}

TEST(DenseLayers, FlattenLikeTorch) {
  Tensor x = Tensor::zeros({2, 3, 4, 5});
  EXPECT_EQ(nn::Flatten()(x).shape(), (Shape{2, 60}));
  EXPECT_EQ(nn::Flatten(0)(x).shape(), (Shape{120}));
  EXPECT_EQ(nn::Flatten(1, 2)(x).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(nn::Flatten(-3, -2)(x).shape(), (Shape{2, 12, 5}));
  EXPECT_EQ(nn::Flatten(0)(Tensor::zeros({})).shape(), (Shape{1}));
}

TEST(DenseLayers, ModulesChainInSequential) {
  manual_seed(2);
  nn::Sequential mlp{std::make_shared<nn::Flatten>(),    std::make_shared<nn::Linear>(6, 8),
                     std::make_shared<nn::LayerNorm>(8), std::make_shared<nn::GELU>(),
                     std::make_shared<nn::Dropout>(0.1), std::make_shared<nn::Linear>(8, 3)};
  EXPECT_EQ(
      mlp.named_parameters().keys(),
      (std::vector<std::string>{"1.weight", "1.bias", "2.weight", "2.bias", "5.weight", "5.bias"}));
  Tensor logits = mlp(Tensor::ones({4, 2, 3}));
  Tensor loss = nn::CrossEntropyLoss()(logits, Tensor::from_vector<int64_t>({0, 1, 2, 1}, {4}));
  loss.backward();
  for (const Tensor& p : mlp.parameters()) EXPECT_TRUE(p.grad().defined());
}

// ---- bad inputs -----------------------------------------------------------

// A model in which the layers sit at known paths.
struct Block : nn::Module {
  Block() : nn::Module("Block") {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3));
    ln = register_module("ln", std::make_shared<nn::LayerNorm>(4));
    emb = register_module("emb", std::make_shared<nn::Embedding>(10, 4));
    flat = register_module("flat", std::make_shared<nn::Flatten>(2));
  }
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::LayerNorm> ln;
  std::shared_ptr<nn::Embedding> emb;
  std::shared_ptr<nn::Flatten> flat;
};

TEST(DenseLayersErrors, ShapeErrorsNameTheModulePath) {
  auto root = std::make_shared<nn::Module>("Root");
  auto list = std::make_shared<nn::ModuleList>();
  list->push_back(std::make_shared<Block>());
  root->register_module("blocks", list);
  auto block = list->at<Block>(0);

  EXPECT_DDP_ERROR(block->fc->forward(Tensor::zeros({2, 5})), ShapeError,
                   "blocks.0.fc (Linear): expected an input [..., 4], got f32[2, 5] on cpu");
  EXPECT_DDP_ERROR(block->ln->forward(Tensor::zeros({2, 5})), ShapeError,
                   "blocks.0.ln (LayerNorm): expected an input whose last dims are [4], got "
                   "f32[2, 5]");
  EXPECT_DDP_ERROR(block->flat->forward(Tensor::zeros({2, 5})), ShapeError,
                   "blocks.0.flat (Flatten): cannot flatten dims 2..-1 of f32[2, 5]");
  EXPECT_DDP_ERROR(block->emb->forward(Tensor::zeros({2})), DTypeError,
                   "blocks.0.emb (Embedding): expected an integer index (i64 or i32), got f32[2]");
}

TEST(DenseLayersErrors, BadArguments) {
  EXPECT_DDP_ERROR(nn::Dropout(1.5), ValueError, "Dropout: p must be in [0, 1], got 1.5");
  EXPECT_DDP_ERROR(nn::GELU("fast"), ValueError, "approximate must be \"none\" or \"tanh\"");
  EXPECT_DDP_ERROR(nn::CrossEntropyLoss(nn::Reduction::mean, -0.1), ValueError,
                   "label_smoothing must be in [0, 1]");
  EXPECT_DDP_ERROR(nn::LayerNorm(Shape{}), ValueError, "normalized_shape must have at least one");
  EXPECT_DDP_ERROR(F::linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}, DType::f64)), DTypeError,
                   "linear: weight is f64[4, 3] on cpu but the input is f32[2, 3]");
  EXPECT_DDP_ERROR(F::linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}), Tensor::zeros({3})),
                   ShapeError, "linear: bias must be [4], got f32[3]");
  EXPECT_DDP_ERROR(F::gelu(Tensor::zeros({2}, DType::i64)), DTypeError,
                   "gelu: input must be floating");
  EXPECT_DDP_ERROR(F::layer_norm(Tensor::zeros({2, 4}), {4}, Tensor::zeros({3})), ShapeError,
                   "layer_norm: weight and bias must have shape [4], got f32[3]");
}

TEST(DenseLayersErrors, BadEmbeddingIndices) {
  nn::Embedding emb(5, 2);
  EXPECT_DDP_ERROR(emb(Tensor::from_vector<int64_t>({0, 5}, {2})), IndexError,
                   "embedding: index 5 at position 1 is out of range [0, 5)");
  EXPECT_DDP_ERROR(emb(Tensor::from_vector<int64_t>({-1}, {1})), IndexError,
                   "embedding: index -1 at position 0 is out of range [0, 5)");
  EXPECT_EQ(emb(Tensor::from_vector<int32_t>({4, 0}, {2})).shape(), (Shape{2, 2}));
}

TEST(DenseLayersErrors, BadCrossEntropyTargets) {
  nn::CrossEntropyLoss loss;
  Tensor logits = Tensor::zeros({3, 4});
  EXPECT_DDP_ERROR(loss(logits, Tensor::from_vector<int64_t>({0, 4, 1}, {3})), IndexError,
                   "cross_entropy: target 4 at position 1 is out of range [0, 4) and is not "
                   "ignore_index (-100)");
  EXPECT_DDP_ERROR(loss(logits, Tensor::from_vector<int64_t>({0, -1, 1}, {3})), IndexError,
                   "cross_entropy: target -1 at position 1 is out of range [0, 4)");
  EXPECT_DDP_ERROR(loss(logits, Tensor::from_vector<int32_t>({0, 1, 1}, {3})), DTypeError,
                   "cross_entropy: target must hold class indices as i64, got i32[3]");
  EXPECT_DDP_ERROR(loss(logits, Tensor::zeros({3})), DTypeError, "got f32[3]");
  EXPECT_DDP_ERROR(loss(logits, Tensor::from_vector<int64_t>({0, 1}, {2})), ShapeError,
                   "cross_entropy: logits f32[3, 4] on cpu need a target of shape [3], got i64[2]");
  EXPECT_DDP_ERROR(loss(Tensor::zeros({3, 4}, DType::i64), Tensor::zeros({3}, DType::i64)),
                   DTypeError, "cross_entropy: logits must be floating");
  EXPECT_DDP_ERROR(loss(Tensor::zeros({3, 0}), Tensor::zeros({3}, DType::i64)), ShapeError,
                   "cross_entropy: logits f32[3, 0] on cpu have no classes");
  EXPECT_DDP_ERROR(nn::MSELoss()(Tensor::zeros({2, 3}), Tensor::zeros({3, 2})), ShapeError,
                   "mse_loss: input f32[2, 3] on cpu and target f32[3, 2] on cpu must have the "
                   "same shape");
}

TEST(DenseLayers, CrossEntropyEdgeCases) {
  // Ignored rows only: mean is 0/0 = NaN, as in torch; sum is 0.
  Tensor logits = Tensor::zeros({2, 3}).set_requires_grad();
  Tensor ignored = Tensor::from_vector<int64_t>({-100, -100}, {2});
  EXPECT_TRUE(std::isnan(F::cross_entropy(logits, ignored).item<double>()));
  EXPECT_EQ(F::cross_entropy(logits, ignored, nn::Reduction::sum).item<double>(), 0.0);
  // A custom ignore_index; uniform logits give log(C).
  Tensor t = Tensor::from_vector<int64_t>({7, 2}, {2});
  Tensor l = F::cross_entropy(logits, t, nn::Reduction::mean, 0.0, 7);
  EXPECT_NEAR(l.item<double>(), std::log(3.0), 1e-6);
  l.backward();
  EXPECT_EQ(values(logits.grad().select(0, 0)), std::vector<double>(3, 0.0));
  // [C] logits with a 0-dim target.
  Tensor one = F::cross_entropy(Tensor::zeros({4}), Tensor::from_vector<int64_t>({1}, {}));
  EXPECT_NEAR(one.item<double>(), std::log(4.0), 1e-6);
  // bf16 logits: computed in f32, returned in bf16.
  Tensor lb = F::cross_entropy(Tensor::zeros({2, 3}, DType::bf16), t.clone().fill_(1));
  EXPECT_EQ(lb.dtype(), DType::bf16);
}

}  // namespace
}  // namespace ddp::test
