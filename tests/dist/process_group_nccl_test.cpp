// The nccl backend where no GPU is needed (label dist): the timeout default
// and its environment variable, and creation on a machine without a usable
// GPU, which must raise DeviceError naming the backend rather than crash.
// The collectives are in process_group_nccl_gpu_test.cpp (label gpu).
#include "ddp/config.h"

#if DDP_HAVE_NCCL

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "ddp/core/error.h"
#include "ddp/dist/process_group_nccl.h"
#include "ddp/dist/tcp_store.h"
#include "ddp/tensor/cuda.h"
#include "dist/store_test_util.h"

namespace ddp::dist {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// A world of one on the CPU whose collectives do nothing: enough to
// bootstrap the NCCL id exchange without MPI or gloo.
class SoloGroup : public ProcessGroup {
 public:
  SoloGroup() : ProcessGroup(0, 1) {}
  std::string backend_name() const override { return "solo"; }
  int broadcasts = 0;

 protected:
  WorkPtr do_allreduce(Tensors& t, ReduceOp) override { return completed_work("allreduce", t); }
  WorkPtr do_broadcast(Tensors& t, int) override {
    ++broadcasts;
    return completed_work("broadcast", t);
  }
  WorkPtr do_reduce(Tensors& t, int, ReduceOp) override { return completed_work("reduce", t); }
  WorkPtr do_allgather(Tensors& o, const Tensor&) override {
    return completed_work("allgather", o);
  }
  WorkPtr do_reduce_scatter(const Tensor& o, Tensors&, ReduceOp) override {
    return completed_work("reduce_scatter", {o});
  }
  WorkPtr do_all_to_all(const Tensor& o, const Tensor&) override {
    return completed_work("all_to_all", {o});
  }
  WorkPtr do_barrier() override { return completed_work("barrier"); }
  WorkPtr do_send(const Tensor& t, int, int) override { return completed_work("send", {t}); }
  WorkPtr do_recv(const Tensor& t, int, int) override { return completed_work("recv", {t}); }
};

TEST(NcclTimeout, DefaultAndEnvOverride) {
  test::EnvGuard guard("DDP_NCCL_TIMEOUT_S");
  EXPECT_EQ(ProcessGroupNCCL::default_timeout(), std::chrono::milliseconds(600'000));
  ::setenv("DDP_NCCL_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(ProcessGroupNCCL::default_timeout(), std::chrono::milliseconds(2500));
  ::setenv("DDP_NCCL_TIMEOUT_S", "0.0001", 1);  // rounds up to 1 ms, never to "no limit"
  EXPECT_EQ(ProcessGroupNCCL::default_timeout(), std::chrono::milliseconds(1));
  for (const char* bad : {"abc", "-1", "0", "nan", "10s"}) {
    ::setenv("DDP_NCCL_TIMEOUT_S", bad, 1);
    EXPECT_THROW(ProcessGroupNCCL::default_timeout(), ValueError) << bad;
  }
  ::setenv("DDP_NCCL_TIMEOUT_S", "", 1);
  EXPECT_EQ(ProcessGroupNCCL::default_timeout(), std::chrono::milliseconds(600'000));
}

TEST(NcclWithoutGpu, CreateRaisesDeviceError) {
  if (cuda::is_available())
    GTEST_SKIP() << "a GPU is present; process_group_nccl_gpu_test covers it";
  TCPStore store(test::server_options(2s));
  try {
    ProcessGroupNCCL::create(store, 0, 1);
    FAIL() << "create succeeded without a GPU";
  } catch (const DeviceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ProcessGroupNCCL::create"));
    EXPECT_THAT(e.what(), HasSubstr("nccl rank 0"));
    EXPECT_THAT(e.what(), HasSubstr("needs a CUDA device"));
    EXPECT_THAT(e.what(), HasSubstr(cuda::unavailable_reason()));
  }
  // Nothing was published: rank 0 gave up before touching the store.
  EXPECT_FALSE(store.check({"ddp_nccl/nccl/1/unique_id"}));
}

TEST(NcclWithoutGpu, BootstrapCreateRaisesDeviceError) {
  if (cuda::is_available())
    GTEST_SKIP() << "a GPU is present; process_group_nccl_gpu_test covers it";
  SoloGroup solo;
  EXPECT_THROW(ProcessGroupNCCL::create(solo), DeviceError);
  EXPECT_EQ(solo.broadcasts, 0);
}

TEST(NcclWithoutGpu, BadRankIsRefusedFirst) {
  TCPStore store(test::server_options(2s));
  EXPECT_THROW(ProcessGroupNCCL::create(store, 1, 1), ValueError);
  EXPECT_THROW(ProcessGroupNCCL::create(store, -1, 2), ValueError);
  EXPECT_THROW(ProcessGroupNCCL::create(store, 0, 0), ValueError);
}

}  // namespace
}  // namespace ddp::dist

#endif  // DDP_HAVE_NCCL
