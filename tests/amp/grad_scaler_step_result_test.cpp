// amp::StepResult, what GradScaler::step returns: known at once on the host
// path, read from the flag only when converted on the device path (Note
// [GradScaler without host syncs]); the CPU path stays the host path.
#include <gtest/gtest.h>

#include <cmath>

#include "ddp/amp/grad_scaler.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/ops.h"

namespace ddp::test {
namespace {

TEST(StepResult, AHostAnswerIsKnown) {
  amp::StepResult yes = true, no = false;
  EXPECT_TRUE(yes.known());
  EXPECT_TRUE(yes);
  EXPECT_FALSE(no);
  int taken = 0;
  taken += yes;
  taken += no;
  EXPECT_EQ(taken, 1);
}

TEST(StepResult, AFlagIsReadWhenConvertedAndOnlyOnce) {
  Tensor flag = Tensor::scalar(1.0, DType::f32);
  amp::StepResult r = amp::StepResult::from_device_flag(flag);
  EXPECT_FALSE(r.known());
  flag.fill_(0.0);  // cleared before the first read: the read sees it
  EXPECT_TRUE(bool(r));
  EXPECT_TRUE(r.known());
  flag.fill_(1.0);  // later changes are not read again
  EXPECT_TRUE(bool(r));
  EXPECT_FALSE(bool(amp::StepResult::from_device_flag(Tensor::scalar(1.0, DType::f32))));
}

TEST(StepResult, TheCpuPathAnswersAtOnce) {
  Tensor p = Tensor::from_vector(std::vector<float>{1, 2}, {2}).set_requires_grad();
  optim::SGD opt(Tensors{p}, 0.5);
  amp::GradScaler scaler({.init_scale = 4});
  p.set_grad(Tensor::from_vector(std::vector<float>{4, 8}, {2}));
  amp::StepResult r = scaler.step(opt);
  EXPECT_TRUE(r.known());
  EXPECT_TRUE(r);
  scaler.update();
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.5f, 1.0f}));
  p.set_grad(Tensor::from_vector(std::vector<float>{INFINITY, 8}, {2}));
  amp::StepResult skipped = scaler.step(opt);
  EXPECT_TRUE(skipped.known());
  EXPECT_FALSE(skipped);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 2.0);
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.5f, 1.0f}));
}

}  // namespace
}  // namespace ddp::test
