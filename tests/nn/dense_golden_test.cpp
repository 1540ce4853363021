// The dense layers and losses against PyTorch 1.13 (golden values from
// tests/golden/make_dense_golden.py): outputs and the gradients of
// sum(y · dy) w.r.t. inputs and parameters, in f32 and f64 on the CPU.
//
// Tolerance: scaled_max_error (dense_test_util.h), i.e.
//   max_i |ddp_i - torch_i| / max_i |torch_i|  <=  1e-4 (f32), 1e-10 (f64).

#include "nn/dense_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

class DenseGolden : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dt() const { return GetParam(); }
  DType dtype() const { return dt() == "f64" ? DType::f64 : DType::f32; }
  double tol() const { return dt() == "f64" ? 1e-10 : 1e-4; }
  Tensor g(const std::string& c, const std::string& t) const { return golden_tensor(dt(), c, t); }
  // A golden input as a fresh leaf that requires grad.
  Tensor input(const std::string& c, const std::string& t = "x") const {
    return g(c, t).clone().set_requires_grad();
  }
};

TEST_P(DenseGolden, Linear) {
  auto lin = std::make_shared<nn::Linear>(5, 4);
  lin->to(dtype());
  set_param(lin->weight, g("linear", "weight"));
  set_param(lin->bias, g("linear", "bias"));
  Tensor x = input("linear");
  Tensor y = lin->forward(x);
  y.backward(g("linear", "dy"));
  EXPECT_CLOSE_TO(y, g("linear", "y"), tol(), "y");
  EXPECT_CLOSE_TO(x.grad(), g("linear", "dx"), tol(), "dx");
  EXPECT_CLOSE_TO(lin->weight.grad(), g("linear", "dweight"), tol(), "dweight");
  EXPECT_CLOSE_TO(lin->bias.grad(), g("linear", "dbias"), tol(), "dbias");
}

TEST_P(DenseGolden, LinearWithoutBias) {
  auto lin = std::make_shared<nn::Linear>(5, 2, false);
  lin->to(dtype());
  EXPECT_FALSE(lin->bias.defined());
  set_param(lin->weight, g("linear_nobias", "weight"));
  Tensor x = input("linear_nobias");
  Tensor y = lin->forward(x);
  y.backward(g("linear_nobias", "dy"));
  EXPECT_CLOSE_TO(y, g("linear_nobias", "y"), tol(), "y");
  EXPECT_CLOSE_TO(x.grad(), g("linear_nobias", "dx"), tol(), "dx");
  EXPECT_CLOSE_TO(lin->weight.grad(), g("linear_nobias", "dweight"), tol(), "dweight");
}

TEST_P(DenseGolden, LayerNorm) {
  for (const char* c : {"layer_norm", "layer_norm_2d"}) {
    SCOPED_TRACE(c);
    Tensor w = g(c, "weight");
    auto ln = std::make_shared<nn::LayerNorm>(w.shape());
    ln->to(dtype());
    set_param(ln->weight, w);
    set_param(ln->bias, g(c, "bias"));
    Tensor x = input(c);
    Tensor y = ln->forward(x);
    y.backward(g(c, "dy"));
    EXPECT_CLOSE_TO(y, g(c, "y"), tol(), "y");
    EXPECT_CLOSE_TO(x.grad(), g(c, "dx"), tol(), "dx");
    EXPECT_CLOSE_TO(ln->weight.grad(), g(c, "dweight"), tol(), "dweight");
    EXPECT_CLOSE_TO(ln->bias.grad(), g(c, "dbias"), tol(), "dbias");
  }
}

TEST_P(DenseGolden, LayerNormWithoutAffine) {
  auto ln = std::make_shared<nn::LayerNorm>(7, 1e-5, false);
  EXPECT_EQ(ln->parameters().size(), 0u);
  Tensor x = input("layer_norm_noaffine");
  Tensor y = ln->forward(x);
  y.backward(g("layer_norm_noaffine", "dy"));
  EXPECT_CLOSE_TO(y, g("layer_norm_noaffine", "y"), tol(), "y");
  EXPECT_CLOSE_TO(x.grad(), g("layer_norm_noaffine", "dx"), tol(), "dx");
}

TEST_P(DenseGolden, Activations) {
  struct Case {
    const char* name;
    std::shared_ptr<nn::UnaryModule> m;
  };
  for (const Case& c : {Case{"gelu", std::make_shared<nn::GELU>()},
                        Case{"gelu_tanh", std::make_shared<nn::GELU>("tanh")},
                        Case{"relu", std::make_shared<nn::ReLU>()}}) {
    SCOPED_TRACE(c.name);
    Tensor x = input(c.name);
    Tensor y = c.m->forward(x);
    y.backward(g(c.name, "dy"));
    EXPECT_CLOSE_TO(y, g(c.name, "y"), tol(), "y");
    EXPECT_CLOSE_TO(x.grad(), g(c.name, "dx"), tol(), "dx");
  }
}

TEST_P(DenseGolden, Embedding) {
  auto emb = std::make_shared<nn::Embedding>(7, 4);
  emb->to(dtype());
  set_param(emb->weight, g("embedding", "weight"));
  Tensor y = emb->forward(g("embedding", "index"));
  y.backward(g("embedding", "dy"));
  EXPECT_CLOSE_TO(y, g("embedding", "y"), tol(), "y");
  EXPECT_CLOSE_TO(emb->weight.grad(), g("embedding", "dweight"), tol(), "dweight");
}

TEST_P(DenseGolden, CrossEntropy) {
  struct Case {
    const char* name;
    nn::Reduction reduction;
    double smoothing;
  };
  for (const Case& c :
       {Case{"ce_mean", nn::Reduction::mean, 0.0}, Case{"ce_smooth", nn::Reduction::mean, 0.1},
        Case{"ce_sum", nn::Reduction::sum, 0.2}, Case{"ce_none", nn::Reduction::none, 0.1}}) {
    SCOPED_TRACE(c.name);
    nn::CrossEntropyLoss loss(c.reduction, c.smoothing);
    Tensor x = input(c.name);
    Tensor y = loss(x, g(c.name, "target"));
    y.backward(g(c.name, "dy"));
    EXPECT_CLOSE_TO(y, g(c.name, "y"), tol(), "loss");
    EXPECT_CLOSE_TO(x.grad(), g(c.name, "dx"), tol(), "dlogits");
  }
}

TEST_P(DenseGolden, CrossEntropyOverExtraDims) {
  Tensor x = input("ce_nd");
  Tensor y = nn::functional::cross_entropy(x, g("ce_nd", "target"));
  y.backward();
  EXPECT_CLOSE_TO(y, g("ce_nd", "y"), tol(), "loss");
  EXPECT_CLOSE_TO(x.grad(), g("ce_nd", "dx"), tol(), "dlogits");
}

TEST_P(DenseGolden, MseLoss) {
  nn::MSELoss loss;
  Tensor a = input("mse", "input"), b = input("mse", "target");
  Tensor y = loss(a, b);
  y.backward();
  EXPECT_CLOSE_TO(y, g("mse", "y"), tol(), "loss");
  EXPECT_CLOSE_TO(a.grad(), g("mse", "dinput"), tol(), "dinput");
  EXPECT_CLOSE_TO(b.grad(), g("mse", "dtarget"), tol(), "dtarget");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DenseGolden, ::testing::Values("f32", "f64"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ddp::test
