// clip_grad_norm_ against torch.nn.utils.clip_grad_norm_ (golden data from
// tests/golden/make_clip_golden.py), clip_grad_value_, and bad arguments.
#include "ddp/optim/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ddp/io/safetensors.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "golden_file.h"

namespace ddp::test {
namespace {

using optim::clip_grad_norm_;
using optim::clip_grad_value_;

const nn::TensorDict& clip_golden() {
  return golden_file("clip_grad");
}

struct ClipCase {
  const char* name;
  double max_norm, norm_type;
  DType dtype;
  friend void PrintTo(const ClipCase& c, std::ostream* os) {
    *os << c.name << " " << dtype_name(c.dtype);
  }
};

// The three parameters of make_clip_golden.py; parameter 1 has no gradient.
Tensors golden_params(DType dtype) {
  const std::string d = dtype == DType::f32 ? "f32" : "f64";
  Tensors ps = {Tensor::zeros({5, 7}, dtype).set_requires_grad(),
                Tensor::zeros({3}, dtype).set_requires_grad(),
                Tensor::zeros({2, 3, 4}, dtype).set_requires_grad()};
  ps[0].set_grad(clip_golden().at(d + ".g0").clone());
  ps[2].set_grad(clip_golden().at(d + ".g2").clone());
  return ps;
}

class ClipGolden : public ::testing::TestWithParam<ClipCase> {};

TEST_P(ClipGolden, MatchesTorch) {
  const ClipCase c = GetParam();
  const std::string d = c.dtype == DType::f32 ? "f32" : "f64";
  // torch sums in the gradients' dtype, libddp in f64: f32 differs by ~1e-7.
  const double tol = c.dtype == DType::f32 ? 1e-6 : 1e-12;
  Tensors ps = golden_params(c.dtype);
  const double total = clip_grad_norm_(ps, c.max_norm, c.norm_type);
  const double want =
      clip_golden().at(std::string(c.name) + "." + d + ".total_norm").item<double>();
  EXPECT_NEAR(total, want, tol * want);
  for (int k : {0, 2}) {
    const Tensor& ref = clip_golden().at(std::string(c.name) + "." + d + ".g" + std::to_string(k));
    EXPECT_LE(scaled_error(ps[k].grad(), ref, 1e-6), tol) << "gradient " << k;
    EXPECT_EQ(ps[k].grad().dtype(), c.dtype);
  }
  EXPECT_FALSE(ps[1].grad().defined());
  // "below" cases really clip: the norm afterwards is max_norm.
  if (c.max_norm < want) {
    const double after = clip_grad_norm_(ps, 1e30, c.norm_type);
    EXPECT_NEAR(after, c.max_norm, 1e-5 * c.max_norm);
  }
}

std::vector<ClipCase> clip_cases() {
  std::vector<ClipCase> out;
  for (DType d : {DType::f32, DType::f64}) {
    out.push_back({"l2_below", 1.0, 2.0, d});
    out.push_back({"l2_above", 100.0, 2.0, d});
    out.push_back({"inf_below", 0.5, INFINITY, d});
    out.push_back({"inf_above", 10.0, INFINITY, d});
    out.push_back({"l1_below", 2.0, 1.0, d});
    out.push_back({"l3_below", 1.5, 3.0, d});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Torch, ClipGolden, ::testing::ValuesIn(clip_cases()),
                         [](const auto& info) {
                           return std::string(info.param.name) +
                                  (info.param.dtype == DType::f32 ? "_f32" : "_f64");
                         });

Tensor leaf_with_grad(const std::vector<float>& grad) {
  Tensor p = Tensor::zeros({int64_t(grad.size())}).set_requires_grad();
  p.set_grad(Tensor::from_vector(grad, {int64_t(grad.size())}));
  return p;
}

TEST(ClipGradNorm, MixedDtypesFormOneNorm) {
  Tensor a = leaf_with_grad({3.0f});
  Tensor b = Tensor::zeros({1}, DType::f64).set_requires_grad();
  b.set_grad(Tensor::full({1}, 4.0, DType::f64));
  Tensor c = Tensor::zeros({1}, DType::bf16).set_requires_grad();
  c.set_grad(Tensor::full({1}, 12.0, DType::bf16));
  EXPECT_DOUBLE_EQ(clip_grad_norm_({a, b, c}, 6.5), 13.0);  // sqrt(9 + 16 + 144)
  EXPECT_NEAR(a.grad().item<float>(), 1.5, 1e-6);
  EXPECT_NEAR(b.grad().item<double>(), 2.0, 1e-6);
  EXPECT_NEAR(c.grad().to(DType::f32).item<float>(), 6.0, 0.05);
}

TEST(ClipGradNorm, NoGradientsGiveZero) {
  Tensor a = Tensor::ones({2}).set_requires_grad();
  EXPECT_EQ(clip_grad_norm_({a}, 1.0), 0.0);
  EXPECT_EQ(clip_grad_norm_({}, 1.0), 0.0);
}

TEST(ClipGradNorm, ZeroMaxNormZeroesAndNonContiguousGradsAreScaled) {
  Tensor p = Tensor::zeros({3, 2}).set_requires_grad();
  Tensor g = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}).t();
  ASSERT_FALSE(g.is_contiguous());
  p.set_grad(g);
  EXPECT_NEAR(clip_grad_norm_({p}, 0.0), std::sqrt(91.0), 1e-5);
  EXPECT_EQ(p.grad().to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_TRUE(p.grad().is_same(g));  // scaled in place
}

TEST(ClipGradNorm, NonFiniteNorm) {
  Tensor a = leaf_with_grad({1.0f, INFINITY});
  EXPECT_TRUE(std::isinf(clip_grad_norm_({a}, 1.0)));
  // max_norm / inf = 0: torch zeroes the finite entries and makes inf NaN.
  EXPECT_EQ(a.grad().to_vector<float>()[0], 0.0f);
  Tensor b = leaf_with_grad({1.0f, NAN});
  EXPECT_TRUE(std::isnan(clip_grad_norm_({b}, 1.0, INFINITY)));
  EXPECT_TRUE(std::isnan(b.grad().to_vector<float>()[0]));
  Tensor c = leaf_with_grad({2.0f, NAN});
  try {
    clip_grad_norm_({c}, 1.0, 2.0, /*error_if_nonfinite=*/true);
    ADD_FAILURE() << "no error for a NaN norm";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("error_if_nonfinite"), std::string::npos) << e.what();
  }
  EXPECT_EQ(c.grad().to_vector<float>()[0], 2.0f);  // untouched
}

template <class F>
void expect_value_error(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << fragment << "'";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(ClipGradNorm, RejectsBadArguments) {
  Tensor a = leaf_with_grad({3.0f, 4.0f});
  expect_value_error([&] { clip_grad_norm_({a}, -1.0); }, "max_norm must be >= 0");
  expect_value_error([&] { clip_grad_norm_({a}, NAN); }, "max_norm");
  expect_value_error([&] { clip_grad_norm_({a}, 1.0, 0.0); }, "norm_type must be > 0");
  expect_value_error([&] { clip_grad_norm_({a}, 1.0, -INFINITY); }, "norm_type");
  expect_value_error([&] { clip_grad_norm_({a}, 1.0, NAN); }, "norm_type");
  expect_value_error([&] { clip_grad_norm_({a, Tensor()}, 1.0); }, "parameter 1 is undefined");
  // Nothing was scaled by the rejected calls.
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{3.0f, 4.0f}));
}

TEST(ClipGradValue, ClampsEveryDefinedGradient) {
  Tensor a = leaf_with_grad({-3.0f, 0.5f, 2.0f});
  Tensor b = Tensor::ones({2}).set_requires_grad();  // no grad: skipped
  clip_grad_value_({a, b}, 1.0);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{-1.0f, 0.5f, 1.0f}));
  EXPECT_FALSE(b.grad().defined());
  clip_grad_value_({a}, 0.0);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
}

TEST(ClipGradValue, RejectsBadArguments) {
  Tensor a = leaf_with_grad({1.0f});
  expect_value_error([&] { clip_grad_value_({a}, -0.5); }, "clip_value must be >= 0");
  expect_value_error([&] { clip_grad_value_({a}, NAN); }, "clip_value");
}

}  // namespace
}  // namespace ddp::test
