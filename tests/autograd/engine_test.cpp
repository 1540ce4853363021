// The backward engine: order, accumulation, graph release, grad(), checks.

#include <cmath>
#include <string>
#include <vector>

#include "autograd/test_util.h"

namespace ddp {
namespace {

using test::expect_values;
using test::f64;

TEST(Engine, InputUsedTwiceGetsBothContributions) {
  Tensor x = f64({1, 2, 3}, {3});
  sum(x * x).backward();
  expect_values(x.grad(), {2, 4, 6});

  Tensor z = f64({1, 2, 3}, {3});
  sum(z + z).backward();
  expect_values(z.grad(), {2, 2, 2});
}

TEST(Engine, DiamondGraph) {
  // c = (2x) * exp(x): two paths from x meet again at c.
  Tensor x = f64({0.5, -1.0}, {2});
  Tensor a = x * 2.0;
  Tensor b = exp(x);
  sum(a * b).backward();
  std::vector<double> want;
  for (double v : {0.5, -1.0}) want.push_back(2 * std::exp(v) + 2 * v * std::exp(v));
  expect_values(x.grad(), want);
}

TEST(Engine, GradAccumulatesAcrossBackwardCalls) {
  Tensor x = f64({1, 2}, {2});
  sum(x * 3.0).backward();
  sum(x * 3.0).backward();
  expect_values(x.grad(), {6, 6});
}

TEST(Engine, RetainGraphAllowsSecondBackward) {
  Tensor x = f64({1, 2}, {2});
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  expect_values(x.grad(), {4, 8});
  // The second backward released the graph.
  EXPECT_THROW(y.backward(), Error);
}

TEST(Engine, SecondBackwardWithoutRetainRaises) {
  Tensor x = f64({1, 2}, {2});
  Tensor y = sum(x * x);
  y.backward();
  try {
    y.backward();
    FAIL() << "expected ddp::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
}

TEST(Engine, NoGradScopeRecordsNothing) {
  Tensor x = f64({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(autograd::grad_enabled());
    EXPECT_FALSE(autograd::needs_grad({x}));
    y = x * x;
  }
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.grad_fn(), nullptr);
  EXPECT_TRUE(y.is_leaf());
  EXPECT_THROW(sum(y).backward(), ValueError);
}

TEST(Engine, GradModeIsThreadLocalAndNests) {
  {
    NoGradGuard outer;
    {
      NoGradGuard inner;
      EXPECT_FALSE(autograd::grad_enabled());
    }
    EXPECT_FALSE(autograd::grad_enabled());
  }
  EXPECT_TRUE(autograd::grad_enabled());
}

TEST(Engine, DetachStopsGradients) {
  Tensor x = f64({1, 2, 3}, {3});
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.data_ptr(), x.data_ptr());  // same data
  EXPECT_EQ(d.shape(), x.shape());
  sum(d * x).backward();
  expect_values(x.grad(), {1, 2, 3});  // not 2x: the detached factor is a constant
}

TEST(Engine, BackwardOnNonScalarNeedsGradient) {
  Tensor x = f64({1, 2, 3}, {3});
  Tensor y = x * 2.0;
  EXPECT_THROW(y.backward(), ValueError);
  y.backward(f64({1, 10, 100}, {3}, false));
  expect_values(x.grad(), {2, 20, 200});
}

TEST(Engine, BackwardGradientShapeMustMatch) {
  Tensor x = f64({1, 2, 3}, {3});
  EXPECT_THROW((x * 2.0).backward(f64({1, 2}, {2}, false)), ShapeError);
}

TEST(Engine, BackwardOnTensorWithoutGradRaises) {
  Tensor c = f64({1.0}, {}, false);
  EXPECT_THROW(c.backward(), ValueError);
  EXPECT_THROW(autograd::backward({c}, {Tensor()}), ValueError);
}

TEST(Engine, BackwardFromLeafItself) {
  Tensor x = f64({4.0}, {});
  x.backward();
  expect_values(x.grad(), {1.0});
}

TEST(Engine, SeveralRoots) {
  Tensor x = f64({1, 2}, {2});
  Tensor a = sum(x * 2.0);
  Tensor b = sum(x * x);
  autograd::backward({a, b}, {Tensor(), Tensor()});
  expect_values(x.grad(), {4, 6});
}

TEST(Engine, LaterNodesRunFirst) {
  // Two independent branches from x become ready together; the one created
  // later runs first.
  std::vector<std::string> order;
  auto logged = [&](const char* name, const Tensor& in) {
    Tensor out;
    {
      NoGradGuard g;
      out = in * 1.0;
    }
    autograd::record(name, {in}, {out}, [&order, name](const Tensors& g) {
      order.push_back(name);
      return Tensors{g[0]};
    });
    return out;
  };
  Tensor x = f64({1, 2}, {2});
  Tensor first = logged("first", x);
  Tensor second = logged("second", x);
  sum(first + second).backward();
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], "second");
  EXPECT_EQ(order[1], "first");
  expect_values(x.grad(), {2, 2});
}

TEST(Engine, MissingOutputGradientsAreZeros) {
  // A two-output op of which only output 0 is used: its backward still sees
  // a defined (zero) gradient for output 1.
  Tensor x = f64({1, 2}, {2});
  Tensor o0, o1;
  {
    NoGradGuard g;
    o0 = x * 2.0;
    o1 = x * 3.0;
  }
  bool saw_zeros = false;
  autograd::record("two_outputs", {x}, {o0, o1}, [&saw_zeros](const Tensors& g) {
    EXPECT_EQ(g.size(), 2u);
    saw_zeros = g[1].defined() && g[1].shape() == Shape{2} &&
                g[1].to_vector<double>() == std::vector<double>{0, 0};
    return Tensors{g[0] * 2.0 + g[1] * 3.0};
  });
  EXPECT_EQ(o1.grad_fn(), o0.grad_fn());
  sum(o0).backward();
  EXPECT_TRUE(saw_zeros);
  expect_values(x.grad(), {2, 2});
}

TEST(Engine, WrongGradientShapeRaisesShapeError) {
  Tensor x = f64({1, 2, 3}, {3});
  Tensor y;
  {
    NoGradGuard g;
    y = x * 2.0;
  }
  autograd::record("bad_shape", {x}, {y}, [](const Tensors& g) {
    return Tensors{sum(g[0])};  // a scalar for a [3] input
  });
  try {
    sum(y).backward();
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("bad_shape"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3]"), std::string::npos) << msg;
  }
}

TEST(Engine, WrongGradientCountRaisesShapeError) {
  Tensor x = f64({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard g;
    y = x * 2.0;
  }
  autograd::record("bad_count", {x}, {y}, [](const Tensors& g) { return Tensors{g[0], g[0]}; });
  EXPECT_THROW(sum(y).backward(), ShapeError);
}

TEST(Engine, RecordRejectsInputAsOutput) {
  Tensor x = f64({1, 2}, {2});
  EXPECT_THROW(autograd::record("self", {x}, {x}, [](const Tensors& g) { return g; }), Error);
  EXPECT_TRUE(x.is_leaf());
}

TEST(Engine, GradLeavesDotGradUntouched) {
  Tensor x = f64({1, 2, 3}, {3});
  Tensor y = sum(x * x);
  Tensors g = autograd::grad({y}, {x}, {Tensor()});
  ASSERT_EQ(g.size(), 1u);
  expect_values(g[0], {2, 4, 6});
  EXPECT_FALSE(x.grad().defined());
}

TEST(Engine, GradForIntermediateAndUnreachableInputs) {
  Tensor x = f64({1, 2}, {2});
  Tensor unused = f64({5}, {1});
  Tensor h = x * 3.0;
  Tensor y = sum(h * h);
  Tensors g = autograd::grad({y}, {h, x, unused}, {Tensor()});
  expect_values(g[0], {6, 12});   // 2h
  expect_values(g[1], {18, 36});  // 2h * 3
  EXPECT_FALSE(g[2].defined());
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(unused.grad().defined());
}

TEST(Engine, GradRejectsInputWithoutGrad) {
  Tensor x = f64({1, 2}, {2});
  Tensor c = f64({1, 2}, {2}, false);
  Tensor y = sum(x * c);
  EXPECT_THROW(autograd::grad({y}, {c}, {Tensor()}), ValueError);
}

TEST(Engine, DeadLeafIsSkipped) {
  Tensor y;
  {
    Tensor x = f64({1, 2}, {2});
    y = sum(x * 2.0);
  }  // the last handle to x is gone; the graph still reaches its accumulator
  EXPECT_NO_THROW(y.backward());
}

TEST(Engine, LongChainDoesNotOverflow) {
  Tensor x = f64({1.0}, {1});
  Tensor h = x;
  for (int i = 0; i < 20000; ++i) h = h * 1.0;
  sum(h).backward();
  expect_values(x.grad(), {1.0});
}

// queue_callback: runs after every node of the pass, in order, and may
// queue more; refused outside a backward; dropped when the pass fails.
TEST(Engine, QueuedCallbacksRunAfterTheWholeGraphInOrder) {
  Tensor a = f64({1, 2}, {2}).set_requires_grad();
  Tensor b = f64({3, 4}, {2}).set_requires_grad();
  std::vector<std::string> events;
  a.register_post_accumulate_grad_hook([&](Tensor&) {
    events.push_back("a");
    autograd::queue_callback([&] {
      events.push_back("first");
      autograd::queue_callback([&] { events.push_back("queued by a callback"); });
    });
    autograd::queue_callback([&] { events.push_back("second"); });
  });
  b.register_post_accumulate_grad_hook([&](Tensor&) { events.push_back("b"); });
  // a's gradient is complete before b's: b sits deeper in the graph.
  sum(a * 2.0 + exp(b) * 3.0).backward();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[2], "first");
  EXPECT_EQ(events[3], "second");
  EXPECT_EQ(events[4], "queued by a callback");
  EXPECT_TRUE((events[0] == "a" && events[1] == "b") || (events[0] == "b" && events[1] == "a"));
}

TEST(Engine, QueueCallbackOutsideBackwardIsAnError) {
  EXPECT_THROW(autograd::queue_callback([] {}), ValueError);
  Tensor a = f64({1}, {1}).set_requires_grad();
  a.register_post_accumulate_grad_hook([](Tensor&) {
    EXPECT_THROW(autograd::queue_callback(nullptr), ValueError);
  });
  sum(a).backward();
}

TEST(Engine, CallbacksOfAFailedPassAreDropped) {
  Tensor a = f64({1}, {1}).set_requires_grad();
  Tensor b = f64({1}, {1}).set_requires_grad();
  bool ran = false;
  a.register_post_accumulate_grad_hook([&](Tensor&) {
    autograd::queue_callback([&] { ran = true; });
    throw ValueError("hook failed");
  });
  EXPECT_THROW(sum(a + b).backward(), ValueError);
  EXPECT_FALSE(ran);
  // The next pass starts clean.
  Tensor c = f64({1}, {1}).set_requires_grad();
  bool ran_c = false;
  c.register_post_accumulate_grad_hook([&](Tensor&) { autograd::queue_callback([&] { ran_c = true; }); });
  sum(c).backward();
  EXPECT_TRUE(ran_c);
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace ddp
