// CPU kernels split over the OpenMP team (Note [CPU parallel loops],
// Note [CPU flat operands], Note [Parallel max_pool2d]): parallel_for covers
// its range once and rethrows errors; element-wise ops and max_pool2d give
// the same bits on one thread and on two, and the right values, for sizes
// large enough to be split, on contiguous, channels-last and non-dense views.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/parallel.h"
#include "ddp/core/error.h"
#include "ddp/core/threads.h"
#include "ddp/nn/functional/activation.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/nn/functional/pooling.h"
#include "ddp/tensor/ops.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

// Sets the thread count for one scope.
class ThreadsScope {
 public:
  explicit ThreadsScope(int n) : before_(get_num_threads()) { set_num_threads(n); }
  ~ThreadsScope() { set_num_threads(before_); }

 private:
  int before_;
};

bool openmp_loaded() { return dlsym(RTLD_DEFAULT, "GOMP_parallel") != nullptr; }

TEST(ParallelFor, CoversTheRangeOnceOnTwoThreads) {
  ThreadsScope threads(2);
  constexpr int64_t n = 100003;
  std::vector<std::atomic<int>> seen(n);
  std::mutex mu;
  std::set<std::thread::id> ids;
  parallel_for(n, 1000, [&](int64_t begin, int64_t end) {
    {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    }
    for (int64_t i = begin; i < end; ++i) seen[i]++;
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i].load(), 1) << "index " << i;
  if (openmp_loaded()) {
    EXPECT_EQ(parallel_threads(n, 1000), 2);
    EXPECT_EQ(ids.size(), 2u) << "the loop did not reach the second thread";
  }
}

TEST(ParallelFor, SmallRangesOneThreadAndNestingStayOnTheCaller) {
  ThreadsScope threads(2);
  EXPECT_EQ(parallel_threads(1999, 1000), 1);  // fewer than 2 * grain items
  int calls = 0;
  parallel_for(10, 1000, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
  });
  EXPECT_EQ(calls, 1);
  parallel_for(0, 1, [&](int64_t, int64_t) { ++calls; });
  parallel_for(-5, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 1) << "an empty range called fn";
  {
    ThreadsScope one(1);
    EXPECT_EQ(parallel_threads(1 << 20, 1), 1);
  }
  // Inside a parallel region a nested loop runs whole on its caller.
  std::atomic<int> nested_threads{0};
  parallel_for(4000, 1000,
               [&](int64_t, int64_t) { nested_threads.fetch_add(parallel_threads(1 << 20, 1)); });
  if (openmp_loaded()) EXPECT_EQ(nested_threads.load(), 2);
}

TEST(ParallelFor, EnvironmentSwitchKeepsLoopsOnTheCaller) {
  ThreadsScope threads(2);
  ASSERT_EQ(setenv("DDP_CPU_PARALLEL_KERNELS", "0", 1), 0);
  EXPECT_EQ(parallel_threads(1 << 20, 1000), 1);
  std::set<std::thread::id> ids;
  parallel_for(1 << 20, 1000, [&](int64_t, int64_t) { ids.insert(std::this_thread::get_id()); });
  EXPECT_EQ(ids, std::set<std::thread::id>{std::this_thread::get_id()});
  ASSERT_EQ(setenv("DDP_CPU_PARALLEL_KERNELS", "maybe", 1), 0);
  EXPECT_THROW(parallel_threads(1 << 20, 1000), ValueError);
  ASSERT_EQ(unsetenv("DDP_CPU_PARALLEL_KERNELS"), 0);
  if (openmp_loaded()) EXPECT_EQ(parallel_threads(1 << 20, 1000), 2);
}

TEST(ParallelFor, RethrowsAnErrorFromAnyThread) {
  ThreadsScope threads(2);
  constexpr int64_t n = 10000;
  for (int64_t bad : {int64_t(0), n - 1}) {
    std::atomic<int64_t> done{0};
    EXPECT_THROW(parallel_for(n, 100,
                              [&](int64_t begin, int64_t end) {
                                if (begin <= bad && bad < end)
                                  DDP_THROW(ValueError, "item {} is bad", bad);
                                done += end - begin;
                              }),
                 ValueError);
    EXPECT_LT(done.load(), n);
  }
  // The team is usable again afterwards.
  std::atomic<int64_t> total{0};
  parallel_for(n, 100, [&](int64_t begin, int64_t end) { total += end - begin; });
  EXPECT_EQ(total.load(), n);
}

std::vector<float> floats(const Tensor& t) {
  return t.to(kFloat32).contiguous().to_vector<float>();
}

// Runs make() on one thread and on two; the results must match bit for bit.
template <class Make>
void expect_same_on_one_and_two_threads(Make make, const char* what) {
  std::vector<float> one, two;
  {
    ThreadsScope t(1);
    one = floats(make());
  }
  {
    ThreadsScope t(2);
    two = floats(make());
  }
  ASSERT_EQ(one.size(), two.size()) << what;
  for (size_t i = 0; i < one.size(); ++i)
    ASSERT_EQ(std::memcmp(&one[i], &two[i], sizeof(float)), 0) << what << " at " << i;
}

TEST(ParallelElementwise, MatchesOneThreadAndTheScalarLoop) {
  Generator gen(21);
  const Shape shape{4, 32, 40, 40};  // 204,800 elements: split over two threads
  Tensor a = randn(shape, {}, &gen), b = randn(shape, {}, &gen);
  Tensor a_cl = F::to_channels_last(a), b_cl = F::to_channels_last(b);
  ASSERT_TRUE(F::is_channels_last(a_cl));
  const std::vector<float> va = floats(a), vb = floats(b);

  struct Case {
    const char* name;
    std::function<Tensor()> make;
    std::function<float(size_t)> expected;
  };
  const std::vector<Case> cases = {
      {"add", [&] { return a + b; }, [&](size_t i) { return va[i] + vb[i]; }},
      {"add channels-last", [&] { return a_cl + b_cl; }, [&](size_t i) { return va[i] + vb[i]; }},
      {"mul by a scalar", [&] { return a_cl * 0.5; }, [&](size_t i) { return va[i] * 0.5f; }},
      {"relu", [&] { return F::relu(a_cl); }, [&](size_t i) { return std::max(va[i], 0.0f); }},
      // Mixed layouts and a transposed view are not flat: the strided walk.
      {"add NCHW + NHWC", [&] { return a + b_cl; }, [&](size_t i) { return va[i] + vb[i]; }},
      {"add transposed", [&] { return a.transpose(2, 3) + b.transpose(2, 3); },
       [&](size_t i) {
         // element i of the [4, 32, 40, 40] result is (n, c, w, h) of a and b
         const size_t w = (i / 40) % 40, h = i % 40, plane = i / 1600;
         const size_t j = plane * 1600 + h * 40 + w;
         return va[j] + vb[j];
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_same_on_one_and_two_threads(c.make, c.name);
    ThreadsScope t(2);
    const std::vector<float> got = floats(c.make());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], c.expected(i)) << "element " << i;
  }
  // The relu gradient goes through unary_backward's flat path.
  expect_same_on_one_and_two_threads(
      [&] {
        Tensor x = a_cl.detach().clone().set_requires_grad();
        F::relu(x).backward(b_cl);
        return x.grad();
      },
      "relu backward");
  ThreadsScope t(2);
  Tensor x = a_cl.detach().clone().set_requires_grad();
  F::relu(x).backward(b_cl);
  const std::vector<float> g = floats(x.grad());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], va[i] > 0 ? vb[i] : 0.0f) << i;
}

// An in-place op whose input is the output shifted by one element inside the
// same buffer is read in the serial order on any thread count.
TEST(ParallelElementwise, ShiftedOverlapKeepsTheSerialOrder) {
  constexpr int64_t n = 200000;
  auto run = [&] {
    Tensor buf = Tensor::ones({n + 1});
    Tensor out = buf.narrow(0, 1, n), in = buf.narrow(0, 0, n);
    out.add_(in);
    return buf;
  };
  expect_same_on_one_and_two_threads(run, "add_ of a shifted view");
}

TEST(ParallelElementwise, CopiesKeepEveryElement) {
  Generator gen(22);
  Tensor a = randn({8, 64, 30, 30}, {}, &gen);
  Tensor a_cl = F::to_channels_last(a);
  expect_same_on_one_and_two_threads([&] { return a_cl.clone(); }, "clone channels-last");
  expect_same_on_one_and_two_threads([&] { return a.to(kFloat64); }, "copy to f64");
  ThreadsScope t(2);
  EXPECT_EQ(floats(a_cl.clone()), floats(a));
}

TEST(ParallelMaxPool2d, SameBitsOnOneAndTwoThreadsBothLayouts) {
  Generator gen(23);
  Tensor x = randn({8, 16, 56, 56}, {}, &gen);
  Tensor dy_shape_probe = F::max_pool2d(x, 3, 2, 1);
  Tensor dy = randn(dy_shape_probe.shape(), {}, &gen);
  for (bool channels_last : {false, true}) {
    SCOPED_TRACE(channels_last ? "NHWC" : "NCHW");
    Tensor input = channels_last ? F::to_channels_last(x) : x;
    Tensor grad_out = channels_last ? F::to_channels_last(dy) : dy;
    auto forward = [&] { return F::max_pool2d(input, 3, 2, 1); };
    auto backward = [&] {
      Tensor xi = input.detach().clone().set_requires_grad();
      F::max_pool2d(xi, 3, 2, 1).backward(grad_out);
      return xi.grad();
    };
    expect_same_on_one_and_two_threads(forward, "forward");
    expect_same_on_one_and_two_threads(backward, "backward");
    // Every output is the maximum of its window, and the gradient keeps dy's sum.
    ThreadsScope t(2);
    const std::vector<float> y = floats(forward()), xv = floats(x);
    for (int64_t p = 0; p < 8 * 16; p += 37)
      for (int64_t i = 0; i < 28; ++i)
        for (int64_t j = 0; j < 28; ++j) {
          float m = -INFINITY;
          for (int64_t r = 2 * i - 1; r <= 2 * i + 1; ++r)
            for (int64_t c = 2 * j - 1; c <= 2 * j + 1; ++c)
              if (r >= 0 && r < 56 && c >= 0 && c < 56) m = std::max(m, xv[p * 3136 + r * 56 + c]);
          ASSERT_EQ(y[p * 784 + i * 28 + j], m) << "plane " << p << " at " << i << "," << j;
        }
    EXPECT_NEAR(sum(backward()).item<double>(), sum(dy).item<double>(), 1e-2);
  }
}

}  // namespace
}  // namespace ddp::test
