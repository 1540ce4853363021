// Deferred device errors (Note [Deferred device errors] in
// src/tensor/device_error_cuda.cpp): an out-of-range index on CUDA does not
// stop the host; the next synchronisation raises IndexError naming the op,
// the value and its position, once, and the device keeps working. With
// DDP_CUDA_DEBUG_SYNC=1 (tools/gpu_check.sh runs the GPU tests that way too)
// every kernel op waits, so the op itself raises. Skipped without a GPU.

#include <cmath>
#include <functional>

#include "ddp/nn/functional/embedding.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/tensor/cuda.h"
#include "nn/nn_test_util.h"
#include "tensor/kernel_registry.h"

namespace ddp::test {
namespace {

namespace F = nn::functional;

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda(0)); }
Tensor i64(const std::vector<int64_t>& v) {
  return Tensor::from_vector(v, {int64_t(v.size())}, TensorOptions(DType::i64));
}
bool debug_sync() { return detail::cuda_debug_sync(); }

// `op` queues a bad index; `sync` is the synchronisation that must report it.
void expect_deferred(const std::function<void()>& op, const std::function<void()>& sync,
                     const std::string& message) {
  if (debug_sync()) {
    EXPECT_DDP_ERROR(op(), IndexError, message);
    return;
  }
  ASSERT_NO_THROW(op());  // no host check, no wait
  EXPECT_DDP_ERROR(sync(), IndexError, message);
}

TEST(DeferredDeviceErrorGpu, EmbeddingIndexRaisesAtTheNextCopyToHost) {
  SKIP_WITHOUT_GPU();
  Tensor w = on_gpu(arange(20, TensorOptions(DType::f32)).reshape({5, 4}));
  Tensor out;
  expect_deferred(
      [&] {
        out = F::embedding(on_gpu(i64({1, 4, 7, 0})), w);
      },
      [&] { out.cpu(); }, "embedding: index 7 at position 2 is out of range [0, 5)");
  EXPECT_THAT(last_error_message(), ::testing::HasSubstr("cuda:0"));
  // Raised once: the record is clear again, and the device works.
  EXPECT_NO_THROW(cuda::synchronize(0));
  Tensor good = F::embedding(on_gpu(i64({4, 0})), w).cpu();
  EXPECT_EQ(values(good), (std::vector<double>{16, 17, 18, 19, 0, 1, 2, 3}));
}

TEST(DeferredDeviceErrorGpu, EverySynchronisationPointReports) {
  SKIP_WITHOUT_GPU();
  Tensor w = on_gpu(Tensor::zeros({5, 4}));
  Tensor bad = on_gpu(i64({0, -3}));
  const std::string msg = "embedding: index -3 at position 1 is out of range [0, 5)";
  auto lookup = [&] { F::embedding(bad, w); };
  expect_deferred(
      lookup, [] { cuda::synchronize(0); }, msg);
  expect_deferred(
      lookup, [] { cuda::current_stream(0).synchronize(); }, msg);
  expect_deferred(
      lookup,
      [] {
        cuda::Event ev;
        ev.record(cuda::current_stream(0));
        ev.synchronize();
      },
      msg);
  Tensor out;
  expect_deferred([&] { out = F::embedding(bad, w); }, [&] { sum(out).item<double>(); }, msg);
  EXPECT_NO_THROW(cuda::synchronize(0));
}

TEST(DeferredDeviceErrorGpu, OnlyTheFirstErrorIsKept) {
  SKIP_WITHOUT_GPU();
  Tensor w = on_gpu(Tensor::zeros({5, 4}));
  if (debug_sync()) {  // each op raises its own
    EXPECT_DDP_ERROR(F::embedding(on_gpu(i64({9})), w), IndexError, "index 9 at position 0");
    EXPECT_DDP_ERROR(F::embedding(on_gpu(i64({0, 0, 11})), w), IndexError,
                     "index 11 at position 2");
    return;
  }
  F::embedding(on_gpu(i64({9})), w);
  F::embedding(on_gpu(i64({0, 0, 11})), w);
  EXPECT_DDP_ERROR(cuda::synchronize(0), IndexError, "index 9 at position 0");
  EXPECT_NO_THROW(cuda::synchronize(0));
  // A new error after the report is recorded again.
  F::embedding(on_gpu(i64({0, 12})), w);
  EXPECT_DDP_ERROR(cuda::synchronize(0), IndexError, "index 12 at position 1");
}

TEST(DeferredDeviceErrorGpu, EmbeddingBackwardSkipsAndReportsBadRows) {
  SKIP_WITHOUT_GPU();
  Tensor w = on_gpu(Tensor::zeros({3, 2})).set_requires_grad();
  Tensor out;
  expect_deferred(
      [&] {
        out = F::embedding(on_gpu(i64({2, 3, 2})), w);
      },
      [] { cuda::synchronize(0); }, "embedding: index 3 at position 1");
  if (debug_sync()) return;  // the forward raised: there is no output to differentiate
  expect_deferred(
      [&] {
        out.backward(on_gpu(Tensor::ones({3, 2})));
      },
      [] { cuda::synchronize(0); }, "embedding (backward): index 3 at position 1");
  // The good positions were summed; the bad one skipped.
  EXPECT_EQ(values(w.grad().cpu()), (std::vector<double>{0, 0, 0, 0, 2, 2}));
}

TEST(DeferredDeviceErrorGpu, CrossEntropyTargetRaisesAtItem) {
  SKIP_WITHOUT_GPU();
  Tensor x = on_gpu(Tensor::zeros({3, 4}));
  Tensor loss;
  expect_deferred(
      [&] {
        loss = F::cross_entropy(x, on_gpu(i64({1, -100, 4})));
      },
      [&] { loss.item<double>(); }, "cross_entropy: index 4 at position 2 is out of range [0, 4)");
  // ignore_index is not an error; the stream is usable.
  EXPECT_NEAR(F::cross_entropy(x, on_gpu(i64({1, -100, 3}))).item<double>(), std::log(4.0), 1e-6);
}

}  // namespace
}  // namespace ddp::test
