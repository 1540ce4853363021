// Note [Tensor version counter] (ddp/tensor/storage.h): which writes count,
// that views share the count, and that storage ids are never reused.
#include <gtest/gtest.h>

#include <set>

#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/ops.h"
#include "ddp/tensor/tensor.h"

namespace ddp {
namespace {

TEST(TensorVersion, EveryInPlaceMethodCountsOneWrite) {
  EXPECT_EQ(Tensor::empty({4}).version(), 0u) << "a new allocation has no counted writes";
  Tensor t = Tensor::zeros({4});
  Tensor other = Tensor::ones({4});
  uint64_t v = t.version();
  t.copy_(other);
  EXPECT_EQ(t.version(), ++v) << "copy_";
  t.fill_(2.0);
  EXPECT_EQ(t.version(), ++v) << "fill_";
  t.zero_();
  EXPECT_EQ(t.version(), ++v) << "zero_";
  t.add_(other);
  EXPECT_EQ(t.version(), ++v) << "add_";
  t.add_(other, 0.5);
  EXPECT_EQ(t.version(), ++v) << "add_ with alpha";
  t.sub_(other);
  EXPECT_EQ(t.version(), ++v) << "sub_";
  t.mul_(other);
  EXPECT_EQ(t.version(), ++v) << "mul_";
  t.mul_(3.0);
  EXPECT_EQ(t.version(), ++v) << "mul_ by a scalar";
  t.div_(other);
  EXPECT_EQ(t.version(), ++v) << "div_";
  uniform_(t, 0, 1);
  EXPECT_EQ(t.version(), ++v) << "uniform_";
  normal_(t, 0, 1);
  EXPECT_EQ(t.version(), ++v) << "normal_";
  t.bump_version();
  EXPECT_EQ(t.version(), ++v) << "bump_version";
}

TEST(TensorVersion, ReadsAndOutOfPlaceOpsCountNothing) {
  Tensor t = Tensor::ones({2, 3});
  const uint64_t v = t.version();
  Tensor r = add(t, t);
  (void)t.to_vector<float>();
  (void)t.contiguous();
  (void)t.clone();
  (void)t.transpose(0, 1).contiguous();
  EXPECT_EQ(t.version(), v);
  EXPECT_EQ(r.version(), 0u);
}

TEST(TensorVersion, ViewsShareTheirStoragesCount) {
  Tensor base = Tensor::zeros({4, 4});
  Tensor row = base.narrow(0, 1, 1);
  Tensor view = base.view({16});
  const uint64_t v = base.version();
  row.fill_(1.0);  // a write through one view is a write to all of them
  EXPECT_EQ(base.version(), v + 1);
  EXPECT_EQ(view.version(), v + 1);
  view.add_(Tensor::ones({16}));
  EXPECT_EQ(row.version(), v + 2);
  Tensor copy = base.clone();  // a copy has its own storage and count
  copy.fill_(0.0);
  EXPECT_EQ(base.version(), v + 2);
}

TEST(TensorVersion, AFailedWriteRaisesAndLeavesTheValues) {
  Tensor w = Tensor::ones({3}, TensorOptions().requires_grad(true));
  // The leaf check refuses before anything is written or counted.
  const uint64_t v = w.version();
  EXPECT_THROW(w.fill_(0.0), Error);
  EXPECT_EQ(w.version(), v);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  autograd::NoGradGuard no_grad;
  w.fill_(0.0);
  EXPECT_EQ(w.version(), v + 1);
}

TEST(TensorVersion, StorageIdsAreUniqueEvenWhenMemoryIsReused) {
  std::set<uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    Tensor t = Tensor::empty({16});  // the allocator may hand back the same block
    EXPECT_NE(t.storage().id(), 0u);
    EXPECT_TRUE(ids.insert(t.storage().id()).second) << "id reused at iteration " << i;
  }
  EXPECT_EQ(Storage().id(), 0u);
  EXPECT_EQ(Storage().version(), 0u);
  Storage().bump_version();  // an undefined storage: nothing to count, no crash
  EXPECT_THROW((void)Tensor().version(), Error);
}

}  // namespace
}  // namespace ddp
