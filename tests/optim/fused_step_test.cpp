// The multi-tensor ("foreach") optimizer steps on the CPU beyond the golden
// numbers: f16/bf16 parameters computed in f32 and rounded once, several
// dtypes in one group, non-contiguous parameters and gradients. See Note
// [Foreach numerics] in src/optim/foreach.h.
#include <gtest/gtest.h>

#include "ddp/optim/adamw.h"
#include "ddp/optim/clip_grad.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"
#include "optim/foreach.h"

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

// A transposed parameter and gradient (one dense layout) are updated in
// place as flat blocks (Note [Optimizer tensors in any dense layout]); the
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

Tensor nhwc(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2}); }

// Channels-last parameters with channels-last gradients: every optimizer
// step, the clipping and the GradScaler's unscale work on them in place, with
// no staging copy, and give the values of the contiguous twin; the state
// takes the parameter's layout.
TEST(FusedStep, ChannelsLastParametersStepInPlace) {
  for (bool adamw : {false, true}) {
    Tensor dense = grid_values({4, 3, 2, 5}, -0.4).set_requires_grad();
    Tensor cl = nhwc(dense.detach()).set_requires_grad();
    ASSERT_FALSE(cl.is_contiguous());
    void* data = cl.data_ptr();
    const Shape strides = cl.strides();
    std::unique_ptr<optim::Optimizer> a, b;
    if (adamw) {
      a = std::make_unique<AdamW>(Tensors{cl}, 0.01, kAdamW);
      b = std::make_unique<AdamW>(Tensors{dense}, 0.01, kAdamW);
    } else {
      a = std::make_unique<SGD>(Tensors{cl}, 0.1, kSgd);
      b = std::make_unique<SGD>(Tensors{dense}, 0.1, kSgd);
    }
    const int64_t staged = optim::multi_tensor::staged_copies();
    for (int step = 0; step < 3; ++step) {
      Tensor g = grid_values({4, 3, 2, 5}, 0.1 * step - 0.5);
      cl.set_grad(nhwc(g));
      dense.set_grad(g);
      a->step();
      b->step();
    }
    // Clipping scales the gradients in place (its sum may run in another
    // order: equal to rounding).
    const double n_cl = optim::clip_grad_norm_({cl}, 0.5), n_dense = optim::clip_grad_norm_({dense}, 0.5);
    EXPECT_NEAR(n_cl, n_dense, 1e-12 * n_dense);
    EXPECT_EQ(cl.grad().strides(), strides);
    const auto g_cl = cl.grad().to_vector<float>(), g_dense = dense.grad().to_vector<float>();
    for (size_t i = 0; i < g_cl.size(); ++i) EXPECT_NEAR(g_cl[i], g_dense[i], 1e-6) << i;
    EXPECT_EQ(optim::multi_tensor::staged_copies(), staged) << (adamw ? "AdamW" : "SGD");
    EXPECT_EQ(cl.data_ptr(), data);
    EXPECT_EQ(cl.strides(), strides);
    EXPECT_EQ(cl.to_vector<float>(), dense.to_vector<float>()) << (adamw ? "AdamW" : "SGD");
    const char* key = adamw ? "exp_avg" : "momentum_buffer";
    EXPECT_EQ(a->state(0).at(key).strides(), strides);
    EXPECT_EQ(a->state(0).at(key).to_vector<float>(), b->state(0).at(key).to_vector<float>());
  }
}

// A gradient in another layout than its parameter, and a view with gaps,
// still step correctly, through contiguous copies (counted).
TEST(FusedStep, MixedLayoutsAndGappedViewsAreStaged) {
  Tensor dense = grid_values({2, 3, 2, 2}, -0.3).set_requires_grad();
  Tensor cl = nhwc(dense.detach()).set_requires_grad();
  Tensor base = grid_values({4, 6}, 0.2);
  Tensor gapped = base.slice(1, 0, 6, 2).detach().set_requires_grad();  // [4, 3], stride 2
  Tensor gapped_twin = gapped.contiguous().detach().set_requires_grad();
  SGD a({cl, gapped}, 0.1, kSgd), b({dense, gapped_twin}, 0.1, kSgd);
  Tensor g = grid_values({2, 3, 2, 2}, 0.25);
  cl.set_grad(g);  // contiguous, unlike cl
  dense.set_grad(g);
  gapped.set_grad(grid_values({4, 3}, 0.5));
  gapped_twin.set_grad(grid_values({4, 3}, 0.5));
  const int64_t staged = optim::multi_tensor::staged_copies();
  a.step();
  b.step();
  EXPECT_GT(optim::multi_tensor::staged_copies(), staged);
  EXPECT_EQ(cl.to_vector<float>(), dense.to_vector<float>());
  EXPECT_EQ(gapped.to_vector<float>(), gapped_twin.to_vector<float>());
  // The gapped view wrote through to its base, and only to its own elements.
  EXPECT_EQ(base.slice(1, 1, 6, 2).to_vector<float>(),
            grid_values({4, 6}, 0.2).slice(1, 1, 6, 2).to_vector<float>());
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
