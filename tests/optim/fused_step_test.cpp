// The multi-tensor ("foreach") optimizer steps on the CPU beyond the golden
// numbers: f16/bf16 parameters computed in f32 and rounded once, several
// dtypes in one group, non-contiguous parameters and gradients. See Note
// [Foreach numerics] in src/optim/foreach.h.
#include <gtest/gtest.h>

#include "ddp/optim/adamw.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"

namespace ddp::test {
namespace {

using optim::AdamW;
using optim::AdamWOptions;
using optim::SGD;
using optim::SGDOptions;

const SGDOptions kSgd{.momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01};
const AdamWOptions kAdamW{.betas = {0.8, 0.95}, .weight_decay = 0.1, .amsgrad = true};

// Values exactly representable in f16 and bf16 (multiples of 1/64 below 4).
Tensor grid_values(const Shape& shape, double offset) {
  Tensor t = arange(0.0, double(shape_numel(shape)), 1.0, DType::f32).reshape(shape);
  return add(mul(t, 1.0 / 64), offset);
}

struct LowPrecision : ::testing::TestWithParam<DType> {};

// One step in f16/bf16 equals the f32 step on the same values, rounded once:
// the update is computed in f32, not op by op in the low precision.
TEST_P(LowPrecision, StepsComputeInF32AndRoundOnce) {
  const DType low = GetParam();
  for (bool adamw : {false, true}) {
    Tensor p32 = grid_values({4, 5}, -0.5).set_requires_grad();
    Tensor plow = p32.detach().to(low).set_requires_grad();
    Tensor g = grid_values({4, 5}, -19.0 / 64);
    p32.set_grad(g.clone());
    plow.set_grad(g.to(low));
    std::unique_ptr<optim::Optimizer> o32, olow;
    if (adamw) {
      o32 = std::make_unique<AdamW>(Tensors{p32}, 0.01, kAdamW);
      olow = std::make_unique<AdamW>(Tensors{plow}, 0.01, kAdamW);
    } else {
      o32 = std::make_unique<SGD>(Tensors{p32}, 0.1, kSgd);
      olow = std::make_unique<SGD>(Tensors{plow}, 0.1, kSgd);
    }
    o32->step();
    olow->step();
    EXPECT_EQ(plow.dtype(), low);
    EXPECT_EQ(plow.to_vector<double>(), p32.to(low).to_vector<double>())
        << (adamw ? "AdamW" : "SGD");
    // The state is kept in the parameter's dtype, as in torch.
    const char* key = adamw ? "exp_avg" : "momentum_buffer";
    EXPECT_EQ(olow->state(0).at(key).dtype(), low);
    EXPECT_EQ(olow->state(0).at(key).to_vector<double>(),
              o32->state(0).at(key).to(low).to_vector<double>());
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LowPrecision, ::testing::Values(DType::f16, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// A group mixing dtypes is split into per-dtype buckets; each parameter ends
// exactly where an optimizer of its own would put it.
TEST(FusedStep, MixedDtypesInOneGroupMatchSeparateOptimizers) {
  const DType dtypes[] = {DType::f32, DType::f64, DType::bf16, DType::f32};
  for (bool adamw : {false, true}) {
    Tensors together, alone;
    std::vector<std::unique_ptr<optim::Optimizer>> singles;
    for (int k = 0; k < 4; ++k) {
      Tensor p = grid_values({3, k + 1}, 0.25 * k).to(dtypes[k]);
      together.push_back(p.clone().set_requires_grad());
      alone.push_back(p.clone().set_requires_grad());
    }
    std::unique_ptr<optim::Optimizer> joint;
    if (adamw)
      joint = std::make_unique<AdamW>(together, 0.01, kAdamW);
    else
      joint = std::make_unique<SGD>(together, 0.1, kSgd);
    for (int k = 0; k < 4; ++k) {
      if (adamw)
        singles.push_back(std::make_unique<AdamW>(Tensors{alone[k]}, 0.01, kAdamW));
      else
        singles.push_back(std::make_unique<SGD>(Tensors{alone[k]}, 0.1, kSgd));
    }
    for (int step = 0; step < 3; ++step) {
      for (int k = 0; k < 4; ++k) {
        Tensor g = grid_values({3, k + 1}, -0.1 * (step + k)).to(dtypes[k]);
        together[k].set_grad(g.clone());
        alone[k].set_grad(g.clone());
      }
      joint->step();
      for (auto& o : singles) o->step();
    }
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(together[k].dtype(), dtypes[k]);
      EXPECT_EQ(together[k].to_vector<double>(), alone[k].to_vector<double>())
          << (adamw ? "AdamW" : "SGD") << " parameter " << k;
    }
  }
}

// A transposed parameter and gradient go through contiguous copies; the
// parameter keeps its storage and strides and gets the contiguous result.
TEST(FusedStep, NonContiguousParametersAndGradients) {
  for (bool adamw : {false, true}) {
    Tensor base = grid_values({5, 3}, -0.2);
    Tensor strided = base.clone().t().detach().set_requires_grad();  // [3, 5], not contiguous
    Tensor dense = strided.contiguous().detach().set_requires_grad();
    ASSERT_FALSE(strided.is_contiguous());
    void* data = strided.data_ptr();
    std::unique_ptr<optim::Optimizer> a, b;
    if (adamw) {
      a = std::make_unique<AdamW>(Tensors{strided}, 0.01, kAdamW);
      b = std::make_unique<AdamW>(Tensors{dense}, 0.01, kAdamW);
    } else {
      a = std::make_unique<SGD>(Tensors{strided}, 0.1, kSgd);
      b = std::make_unique<SGD>(Tensors{dense}, 0.1, kSgd);
    }
    for (int step = 0; step < 3; ++step) {
      Tensor g = grid_values({5, 3}, 0.1 * step).t();
      strided.set_grad(g);
      dense.set_grad(g.contiguous());
      a->step();
      b->step();
    }
    EXPECT_EQ(strided.data_ptr(), data);
    EXPECT_FALSE(strided.is_contiguous());
    EXPECT_EQ(strided.to_vector<float>(), dense.to_vector<float>()) << (adamw ? "AdamW" : "SGD");
  }
}

// An empty parameter is legal and stays empty; its neighbours still step.
TEST(FusedStep, EmptyParameterInAGroup) {
  Tensor empty = Tensor::zeros({0, 3}).set_requires_grad();
  Tensor p = Tensor::ones({2}).set_requires_grad();
  SGD opt({empty, p}, 0.5, {.momentum = 0.9});
  empty.set_grad(Tensor::zeros({0, 3}));
  p.set_grad(Tensor::ones({2}));
  opt.step();
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(opt.state(0).at("momentum_buffer").numel(), 0);
}

}  // namespace
}  // namespace ddp::test
