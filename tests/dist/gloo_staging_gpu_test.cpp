// Gloo with CUDA tensors produced on a non-default stream (label gpu): the
// host staging (Note [Host staging]) must copy a tensor
// out only after the work queued on the caller's current stream has made it,
// and hand the result back so that later work on that stream sees it. Two
// ranks as threads of this process, sharing the one GPU, each on its own
// side stream that is kept busy by matrix products before the tensor's value
// is written: a staging copy that ran on another stream, or without waiting,
// would send the tensor's old contents.
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "ddp/config.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "store_test_util.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

namespace ddp::dist::test {
namespace {

constexpr std::chrono::milliseconds kWait{60'000};

#if DDP_HAVE_GLOO

// Rank r: allreduce (sum) and broadcast of tensors written on a busy side
// stream; returns what the side stream sees afterwards, as host vectors.
std::vector<std::vector<float>> run_rank(std::shared_ptr<Store> store, int rank) {
  cuda::set_device(0);
  auto pg = ProcessGroupGloo::create(store, rank, 2);
  cuda::Stream side = cuda::Stream::create(0);
  std::vector<std::vector<float>> seen;
  {
    cuda::StreamGuard on_side(side);
    const TensorOptions f32 = TensorOptions(kFloat32).device(Device::cuda(0));
    Tensor busy = randn({2048, 2048}, f32);
    for (DType dt : {kFloat32, kBFloat16}) {
      Tensor t = Tensor::zeros({100000}, TensorOptions(dt).device(Device::cuda(0)));
      for (int i = 0; i < 20; ++i) busy = matmul(busy, busy) * (1.0 / 90.0);
      t.fill_(double(rank + 1));  // queued behind the products
      pg->allreduce({t})->wait(kWait);
      seen.push_back((t * 2.0).to(kFloat32).cpu().to_vector<float>());  // 2 * (1 + 2)
    }
    Tensor b = Tensor::zeros({4096}, f32);
    for (int i = 0; i < 20; ++i) busy = matmul(busy, busy) * (1.0 / 90.0);
    b.fill_(rank == 1 ? 42.0 : -1.0);
    pg->broadcast({b}, 1)->wait(kWait);
    seen.push_back((b + 1.0).cpu().to_vector<float>());  // 43 everywhere
  }
  side.synchronize();
  side.destroy();
  return seen;
}

TEST(GlooStagingGpu, TensorsFromANonDefaultStream) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  auto server = std::make_shared<TCPStore>(server_options(std::chrono::seconds(30)));
  auto client = std::make_shared<TCPStore>(client_options(server->port(), std::chrono::seconds(30)));
  auto f0 = std::async(std::launch::async, run_rank, server, 0);
  auto f1 = std::async(std::launch::async, run_rank, client, 1);
  for (auto* f : {&f0, &f1}) {
    const std::vector<std::vector<float>> seen = f->get();
    ASSERT_EQ(seen.size(), 3u);
    for (size_t k = 0; k < 2; ++k)
      for (size_t i = 0; i < seen[k].size(); ++i) ASSERT_EQ(seen[k][i], 6.0f) << "allreduce " << k << " at " << i;
    for (size_t i = 0; i < seen[2].size(); ++i) ASSERT_EQ(seen[2][i], 43.0f) << "broadcast at " << i;
  }
}

#else

TEST(GlooStagingGpu, TensorsFromANonDefaultStream) { GTEST_SKIP() << "built without Gloo"; }

#endif

}  // namespace
}  // namespace ddp::dist::test
