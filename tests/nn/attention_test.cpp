// nn::functional::scaled_dot_product_attention against PyTorch's values
// (tests/golden/make_attention_golden.py), gradcheck in f64, and bad input.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ddp/autograd/gradcheck.h"
#include "ddp/io/safetensors.h"
#include "ddp/nn/functional/attention.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "golden_file.h"

using namespace ddp;
using ddp::test::scaled_error;
namespace F = ddp::nn::functional;

namespace {

const nn::TensorDict& golden() {
  return test::golden_file("attention");
}

void check_against_torch(const std::string& prefix, bool causal, double tol) {
  const auto& g = golden();
  Tensor q = g.at(prefix + "q").clone().set_requires_grad();
  Tensor k = g.at(prefix + "k").clone().set_requires_grad();
  Tensor v = g.at(prefix + "v").clone().set_requires_grad();
  Tensor y = F::scaled_dot_product_attention(q, k, v, causal);
  EXPECT_LE(scaled_error(y, g.at(prefix + "out")), tol) << prefix << "out";
  y.backward(g.at(prefix + "dout"));
  EXPECT_LE(scaled_error(q.grad(), g.at(prefix + "dq")), tol) << prefix << "dq";
  EXPECT_LE(scaled_error(k.grad(), g.at(prefix + "dk")), tol) << prefix << "dk";
  EXPECT_LE(scaled_error(v.grad(), g.at(prefix + "dv")), tol) << prefix << "dv";
}

TEST(Attention, CausalMatchesTorch) {
  check_against_torch("causal.f32.", true, 1e-5);
  check_against_torch("causal.f64.", true, 1e-12);
}

TEST(Attention, FullMatchesTorchWithMoreKeysThanQueries) {
  check_against_torch("full.f32.", false, 1e-5);
  check_against_torch("full.f64.", false, 1e-12);
}

TEST(Attention, CausalFirstPositionSeesOnlyItself) {
  // Query 0 may only attend to key 0, so its output is v[..., 0, :].
  Tensor q = randn({1, 2, 4, 3}), k = randn({1, 2, 4, 3}), v = randn({1, 2, 4, 3});
  Tensor y = F::scaled_dot_product_attention(q, k, v, true);
  auto yv = y.narrow(2, 0, 1).contiguous().to_vector<float>();
  auto vv = v.narrow(2, 0, 1).contiguous().to_vector<float>();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_NEAR(yv[i], vv[i], 1e-6);
}

TEST(Attention, Gradcheck) {
  for (bool causal : {true, false}) {
    TensorOptions o = TensorOptions(DType::f64).requires_grad();
    Tensor q = randn({1, 2, 3, 2}, o), k = randn({1, 2, 3, 2}, o), v = randn({1, 2, 3, 2}, o);
    auto r = autograd::gradcheck(
        [&](const Tensors& in) {
          return Tensors{F::scaled_dot_product_attention(in[0], in[1], in[2], causal)};
        },
        {q, k, v});
    EXPECT_TRUE(r.ok) << (causal ? "causal: " : "full: ") << r.message;
  }
}

TEST(Attention, BadInputRaises) {
  Tensor q = randn({1, 2, 3, 4});
  EXPECT_THROW(F::scaled_dot_product_attention(q, randn({1, 2, 3}), q), ShapeError);
  EXPECT_THROW(F::scaled_dot_product_attention(q, randn({1, 3, 3, 4}), randn({1, 3, 3, 4})),
               ShapeError);  // heads
  EXPECT_THROW(F::scaled_dot_product_attention(q, randn({1, 2, 3, 5}), randn({1, 2, 3, 5})),
               ShapeError);  // head size
  EXPECT_THROW(F::scaled_dot_product_attention(q, randn({1, 2, 5, 4}), randn({1, 2, 5, 4}), true),
               ShapeError);  // causal needs S == T
  EXPECT_THROW(F::scaled_dot_product_attention(q, randn({1, 2, 3, 4}), randn({1, 2, 4, 4})),
               ShapeError);  // k and v disagree
  Tensor qi = Tensor::zeros({1, 2, 3, 4}, TensorOptions(DType::i64));
  EXPECT_THROW(F::scaled_dot_product_attention(qi, qi, qi), DTypeError);
  EXPECT_THROW(F::scaled_dot_product_attention(q, randn({1, 2, 3, 4}, TensorOptions(DType::f64)), q),
               DTypeError);
}

}  // namespace
