#pragma once
// Helpers shared by the nn and io tests: an error-checking macro and small
// stand-in layers. The real layers come later; these have the same names
// and parameter names as torch's (Linear: weight, bias; BatchNorm1d: weight,
// bias, running_mean, running_var, num_batches_tracked), which is all the
// module tests and the PyTorch golden files need.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <typeinfo>

#include "ddp/autograd/grad_mode.h"
#include "ddp/nn/nn.h"
#include "ddp/tensor/ops.h"

namespace ddp::test {

// `stmt` must throw exactly `Type` (not a subclass) with a message that
// contains `substr` and ends with "(file.cpp:line)" (Note [Error messages]).
// Evaluates to nothing; the message is in `last_error_message()`.
#define EXPECT_DDP_ERROR(stmt, Type, substr)                                                  \
  do {                                                                                        \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << "expected " #Type " from: " #stmt;                                     \
    } catch (const ::ddp::Type& e) {                                                          \
      EXPECT_EQ(typeid(e), typeid(::ddp::Type))                                               \
          << #stmt " threw a subclass of " #Type ": " << e.what();                            \
      ::ddp::test::check_error_message(e.what(), substr);                                     \
    } catch (const std::exception& e) {                                                       \
      ADD_FAILURE() << "expected " #Type " from: " #stmt "; got " << typeid(e).name() << ": " \
                    << e.what();                                                              \
    }                                                                                         \
  } while (0)

inline std::string& last_error_message() {
  static std::string msg;
  return msg;
}

inline void check_error_message(const std::string& msg, const std::string& substr) {
  last_error_message() = msg;
  EXPECT_THAT(msg, ::testing::HasSubstr(substr));
  EXPECT_TRUE(std::regex_search(msg, std::regex(R"(\([A-Za-z0-9_]+\.(cpp|h):[0-9]+\)$)")))
      << "no (file:line) at the end of: " << msg;
}

// y = x W^T + b, initialised like torch.nn.Linear.
class TestLinear : public nn::UnaryModule {
 public:
  TestLinear(int64_t in, int64_t out, bool with_bias = true)
      : UnaryModule("Linear"), in_(in), out_(out) {
    weight = register_parameter("weight", Tensor::empty({out, in}));
    nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
    double bound = 1.0 / std::sqrt(double(in));
    bias = register_parameter("bias", with_bias ? uniform({out}, -bound, bound) : Tensor());
  }
  Tensor forward(const Tensor& x) override {
    DDP_CHECK_T(ShapeError, x.dim() >= 1 && x.size(-1) == in_,
                "{}: expected an input [..., {}], got {}", describe(), in_, x.describe());
    Tensor y = matmul(x, weight.t());
    return bias.defined() ? y + bias : y;
  }
  std::string extra_repr() const override {
    return fmt::format("in_features={}, out_features={}, bias={}", in_, out_, bias.defined());
  }

  Tensor weight, bias;

 private:
  int64_t in_, out_;
};

// Batch normalisation over dim 0 of [N, C]: batch statistics (and running
// averages, momentum 0.1) in training, running statistics in eval.
class TestBatchNorm1d : public nn::UnaryModule {
 public:
  explicit TestBatchNorm1d(int64_t c) : UnaryModule("BatchNorm1d") {
    weight = register_parameter("weight", Tensor::ones({c}));
    bias = register_parameter("bias", Tensor::zeros({c}));
    running_mean = register_buffer("running_mean", Tensor::zeros({c}));
    running_var = register_buffer("running_var", Tensor::ones({c}));
    num_batches_tracked = register_buffer("num_batches_tracked", Tensor::zeros({}, kInt64));
  }
  Tensor forward(const Tensor& x) override {
    Tensor m = running_mean, v = running_var;
    if (is_training()) {
      m = mean(x, {0});
      v = var(x, {0}, 0);
      NoGradGuard no_grad;
      running_mean.mul_(0.9).add_(m.detach(), 0.1);
      running_var.mul_(0.9).add_(var(x.detach(), {0}, 1), 0.1);
      num_batches_tracked.add_(Tensor::ones({}, kInt64));
    }
    return (x - m) / sqrt(v + 1e-5) * weight + bias;
  }

  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
};

inline std::shared_ptr<nn::Functional> relu_module() {
  return std::make_shared<nn::Functional>([](const Tensor& x) { return relu(x); }, "ReLU");
}

// Sequential(Linear(4, 8), BatchNorm1d(8), ReLU(), Linear(8, 3)): the model
// of tests/golden/torch_mlp.safetensors.
inline std::shared_ptr<nn::Sequential> make_mlp() {
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<TestLinear>(4, 8));
  seq->push_back(std::make_shared<TestBatchNorm1d>(8));
  seq->push_back(relu_module());
  seq->push_back(std::make_shared<TestLinear>(8, 3));
  return seq;
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

}  // namespace ddp::test
