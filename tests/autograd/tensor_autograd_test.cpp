// Tensor's autograd methods: requires_grad, .grad, set_grad, hooks.

#include <string>
#include <vector>

#include "autograd/test_util.h"

namespace ddp {
namespace {

using test::expect_values;
using test::f64;

TEST(TensorAutograd, RequiresGradDefaultsAndFactories) {
  Tensor a = Tensor::zeros({2});
  EXPECT_FALSE(a.requires_grad());
  EXPECT_TRUE(a.is_leaf());
  EXPECT_FALSE(a.grad().defined());
  EXPECT_EQ(a.grad_fn(), nullptr);
  Tensor b = Tensor::zeros({2}, TensorOptions().requires_grad());
  EXPECT_TRUE(b.requires_grad());
  a.set_requires_grad();
  EXPECT_TRUE(a.requires_grad());
  a.set_requires_grad(false);
  EXPECT_FALSE(a.requires_grad());
}

TEST(TensorAutograd, RequiresGradOnIntegerTensorRaises) {
  Tensor i = Tensor::zeros({2}, kInt64);
  EXPECT_THROW(i.set_requires_grad(), DTypeError);
  EXPECT_NO_THROW(i.set_requires_grad(false));
  EXPECT_THROW(Tensor::zeros({2}, TensorOptions(kInt32).requires_grad()), DTypeError);
}

TEST(TensorAutograd, NonLeafRequiresGradRaises) {
  Tensor x = f64({1, 2}, {2});
  Tensor y = x * 2.0;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_THROW(y.set_requires_grad(false), ValueError);
  EXPECT_THROW(y.set_requires_grad(true), ValueError);
}

TEST(TensorAutograd, SetGradChecksAndStores) {
  Tensor x = f64({1, 2}, {2});
  EXPECT_THROW(x.set_grad(f64({1, 2, 3}, {3}, false)), ShapeError);
  EXPECT_THROW(x.set_grad(Tensor::zeros({2}, kFloat32)), DTypeError);
  Tensor g = f64({5, 6}, {2}, false);
  x.set_grad(g);
  EXPECT_TRUE(x.grad().is_same(g));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
}

TEST(TensorAutograd, AccumulationWritesThroughAGradView) {
  // The DDP engine points .grad at a slice of a bucket: backward must keep
  // writing into that slice.
  Tensor a = f64({1, 2}, {2});
  Tensor b = f64({3, 4, 5}, {3});
  Tensor bucket = Tensor::zeros({5}, kFloat64);
  a.set_grad(bucket.narrow(0, 0, 2));
  b.set_grad(bucket.narrow(0, 2, 3));
  (sum(a * 2.0) + sum(b * b)).backward();
  expect_values(bucket, {2, 2, 6, 8, 10});
  EXPECT_EQ(a.grad().data_ptr(), bucket.data_ptr());
  (sum(a * 2.0) + sum(b * b)).backward();
  expect_values(bucket, {4, 4, 12, 16, 20});
}

TEST(TensorAutograd, FirstGradientIsNotShared) {
  // add's backward may hand one tensor to both inputs; the two .grads must
  // still be separate buffers, and the user's root gradient must stay as is.
  Tensor a = f64({1, 2}, {2});
  Tensor b = f64({3, 4}, {2});
  Tensor g = f64({1, 1}, {2}, false);
  (a + b).backward(g);
  EXPECT_FALSE(a.grad().storage().is_same(b.grad().storage()));
  EXPECT_FALSE(a.grad().storage().is_same(g.storage()));
  (a + b).backward(g);
  expect_values(a.grad(), {2, 2});
  expect_values(b.grad(), {2, 2});
  expect_values(g, {1, 1});
}

TEST(TensorAutograd, PostAccumulateHookOrderInAChain) {
  // x -> W1 -> W2 -> W3: hooks fire W3, W2, W1, each right after its own
  // gradient is updated (the earlier layers' gradients not yet touched).
  Tensor x = f64({1, 2, 3, 4}, {2, 2}, false);
  Tensors w;
  for (int i = 0; i < 3; ++i) w.push_back(f64({0.5, -0.25, 1.0, 2.0}, {2, 2}));
  std::vector<int> fired;
  std::vector<bool> later_layers_done;
  for (int i = 0; i < 3; ++i)
    w[size_t(i)].register_post_accumulate_grad_hook([&, i](Tensor& leaf) {
      EXPECT_TRUE(leaf.is_same(w[size_t(i)]));
      EXPECT_TRUE(leaf.grad().defined());
      fired.push_back(i);
      // No layer before i has its gradient yet (first backward only).
      bool untouched = true;
      for (int j = 0; j < i; ++j) untouched = untouched && !w[size_t(j)].grad().defined();
      later_layers_done.push_back(untouched);
    });
  auto loss = [&] { return sum(matmul(matmul(matmul(x, w[0]), w[1]), w[2])); };
  loss().backward();
  EXPECT_EQ(fired, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(later_layers_done, (std::vector<bool>{true, true, true}));
  fired.clear();
  later_layers_done.clear();
  loss().backward();
  EXPECT_EQ(fired, (std::vector<int>{2, 1, 0}));  // once per backward
}

TEST(TensorAutograd, HooksRunInIdOrderAndCanBeRemoved) {
  Tensor x = f64({1, 2}, {2});
  std::vector<std::string> fired;
  int h0 = x.register_post_accumulate_grad_hook([&](Tensor&) { fired.push_back("h0"); });
  int h1 = x.register_post_accumulate_grad_hook([&](Tensor& t) {
    fired.push_back("h1");
    expect_values(t.grad(), {3, 3});  // runs after the accumulation
  });
  EXPECT_NE(h0, h1);
  sum(x * 3.0).backward();
  EXPECT_EQ(fired, (std::vector<std::string>{"h0", "h1"}));
  x.remove_post_accumulate_grad_hook(h1);
  x.remove_post_accumulate_grad_hook(h1);  // removing twice is harmless
  fired.clear();
  x.set_grad(Tensor());
  sum(x * 3.0).backward();
  EXPECT_EQ(fired, (std::vector<std::string>{"h0"}));
  x.remove_post_accumulate_grad_hook(h0);
  fired.clear();
  sum(x * 3.0).backward();
  EXPECT_TRUE(fired.empty());
}

TEST(TensorAutograd, HookMayRemoveItself) {
  Tensor x = f64({1, 2}, {2});
  int calls = 0;
  int id = -1;
  id = x.register_post_accumulate_grad_hook([&](Tensor& t) {
    ++calls;
    t.remove_post_accumulate_grad_hook(id);
  });
  sum(x * 1.0).backward();
  sum(x * 1.0).backward();
  EXPECT_EQ(calls, 1);
}

TEST(TensorAutograd, HookOnlyOnLeavesThatRequireGrad) {
  Tensor c = f64({1, 2}, {2}, false);
  EXPECT_THROW(c.register_post_accumulate_grad_hook([](Tensor&) {}), ValueError);
  Tensor x = f64({1, 2}, {2});
  Tensor y = x * 2.0;
  EXPECT_THROW(y.register_post_accumulate_grad_hook([](Tensor&) {}), ValueError);
}

TEST(TensorAutograd, HooksNotRunByGrad) {
  Tensor x = f64({1, 2}, {2});
  int calls = 0;
  x.register_post_accumulate_grad_hook([&](Tensor&) { ++calls; });
  autograd::grad({sum(x * x)}, {x}, {Tensor()});
  EXPECT_EQ(calls, 0);
  EXPECT_FALSE(x.grad().defined());
}

}  // namespace
}  // namespace ddp
