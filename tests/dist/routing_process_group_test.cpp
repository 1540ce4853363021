// Process groups that route by device (Note [Routing by device]), the
// backend registry (Note [Backend registry]) and backend strings of
// init_process_group, and DDP_ASYNC_ERROR_HANDLING. In one process; the
// multi-rank runs are tests/dist/collectives (cpu:gloo, cpu:mpi).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ddp/config.h"
#include "ddp/core/error.h"
#include "ddp/dist/backend_registry.h"
#include "ddp/dist/init.h"
#include "ddp/dist/routing_process_group.h"
#include "ddp/tensor/cuda.h"
#include "dist/store_test_util.h"

namespace ddp::dist {
namespace {

using ::testing::HasSubstr;
using test::EnvGuard;

// A world of `size` that records the name of every collective it ran and
// completes it at once. takes_cuda: whether it claims CUDA tensors.
class TracingGroup : public ProcessGroup {
 public:
  TracingGroup(std::string name, int rank = 0, int size = 1, bool cpu = true, bool cuda = false)
      : ProcessGroup(rank, size), name_(std::move(name)), cpu_(cpu), cuda_(cuda) {}
  std::string backend_name() const override { return name_; }
  BackendCaps caps() const override {
    BackendCaps c;
    c.cpu_tensors = cpu_;
    c.cuda_tensors = cuda_;
    c.stage_cuda_through_host = false;
    return c;
  }
  std::vector<std::string> ops;

 protected:
  WorkPtr done(const char* op, Tensors t = {}) {
    ops.push_back(op);
    return completed_work(op, std::move(t));
  }
  WorkPtr do_allreduce(Tensors& t, ReduceOp) override { return done("allreduce", t); }
  WorkPtr do_broadcast(Tensors& t, int) override { return done("broadcast", t); }
  WorkPtr do_reduce(Tensors& t, int, ReduceOp) override { return done("reduce", t); }
  WorkPtr do_allgather(Tensors& o, const Tensor&) override { return done("allgather", o); }
  WorkPtr do_reduce_scatter(const Tensor& o, Tensors&, ReduceOp) override {
    return done("reduce_scatter", {o});
  }
  WorkPtr do_all_to_all(const Tensor& o, const Tensor&) override { return done("all_to_all", {o}); }
  WorkPtr do_barrier() override { return done("barrier"); }
  WorkPtr do_send(const Tensor& t, int, int) override { return done("send", {t}); }
  WorkPtr do_recv(const Tensor& t, int, int) override { return done("recv", {t}); }

 private:
  std::string name_;
  bool cpu_, cuda_;
};

struct TwoBackends {
  std::shared_ptr<TracingGroup> cpu = std::make_shared<TracingGroup>("hostly", 0, 2);
  std::shared_ptr<TracingGroup> gpu = std::make_shared<TracingGroup>("gpuly", 0, 2, false, true);
  RoutingProcessGroup group{{{DeviceType::CPU, cpu}, {DeviceType::CUDA, gpu}}};
};

TEST(RoutingProcessGroup, CpuTensorsGoToTheCpuBackend) {
  TwoBackends b;
  EXPECT_EQ(b.group.backend_name(), "cpu:hostly,cuda:gpuly");
  EXPECT_EQ(b.group.rank(), 0);
  EXPECT_EQ(b.group.size(), 2);
  Tensor t = Tensor::ones({4});
  Tensors two = {Tensor::ones({4}), Tensor::ones({4})};
  b.group.allreduce({t})->wait();
  b.group.broadcast({t}, 1)->wait();
  b.group.reduce({t}, 0)->wait();
  b.group.allgather(two, t)->wait();
  b.group.reduce_scatter(t, two)->wait();
  b.group.all_to_all(Tensor::ones({4}), Tensor::ones({4}))->wait();
  b.group.send(t, 1)->wait();
  b.group.recv(t, 1)->wait();
  b.group.barrier()->wait();  // a host barrier: the CPU backend
  EXPECT_EQ(b.cpu->ops, (std::vector<std::string>{"allreduce", "broadcast", "reduce", "allgather",
                                                   "reduce_scatter", "all_to_all", "send", "recv",
                                                   "barrier"}));
  EXPECT_TRUE(b.gpu->ops.empty());
  EXPECT_TRUE(b.group.caps().cpu_tensors);
  EXPECT_TRUE(b.group.caps().cuda_tensors);
  EXPECT_EQ(b.group.backend(DeviceType::CUDA), b.gpu);
}

TEST(RoutingProcessGroup, CudaTensorsGoToTheCudaBackend) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  TwoBackends b;
  Tensor t = Tensor::ones({4}, TensorOptions().device(Device::cuda(0)));
  b.group.allreduce({t})->wait();
  b.group.broadcast({t}, 0)->wait();
  EXPECT_EQ(b.gpu->ops, (std::vector<std::string>{"allreduce", "broadcast"}));
  EXPECT_TRUE(b.cpu->ops.empty());
}

TEST(RoutingProcessGroup, ACudaTensorWithoutACudaBackendNamesTheDeviceAndTheBackends) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  auto cpu = std::make_shared<TracingGroup>("hostly");
  RoutingProcessGroup group({{DeviceType::CPU, cpu}});
  Tensor t = Tensor::ones({4}, TensorOptions().device(Device::cuda(0)));
  try {
    group.allreduce({t});
    FAIL() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no backend for cuda tensors"));
    EXPECT_THAT(e.what(), HasSubstr("cuda:0"));
    EXPECT_THAT(e.what(), HasSubstr("its backends: cpu:hostly"));
  }
  EXPECT_TRUE(cpu->ops.empty());
}

TEST(RoutingProcessGroup, ACpuTensorWithoutACpuBackendNamesTheDeviceAndTheBackends) {
  auto gpu = std::make_shared<TracingGroup>("gpuly", 0, 1, false, true);
  RoutingProcessGroup group({{DeviceType::CUDA, gpu}});
  EXPECT_FALSE(group.caps().cpu_tensors);
  for (auto call : {+[](ProcessGroup& g) { g.allreduce({Tensor::ones({2})}); },
                    +[](ProcessGroup& g) { g.broadcast({Tensor::ones({2})}, 0); },
                    +[](ProcessGroup& g) { g.allgather({Tensor::ones({2})}, Tensor::ones({2})); }}) {
    try {
      call(group);
      ADD_FAILURE() << "no error";
    } catch (const DeviceError& e) {
      EXPECT_THAT(e.what(), HasSubstr("no backend for cpu tensors"));
      EXPECT_THAT(e.what(), HasSubstr("its backends: cuda:gpuly"));
      EXPECT_THAT(e.what(), HasSubstr("cpu"));
    }
  }
  EXPECT_TRUE(gpu->ops.empty());
  // With no CPU backend the barrier goes to the CUDA one.
  group.barrier()->wait();
  EXPECT_EQ(gpu->ops, std::vector<std::string>{"barrier"});
}

TEST(RoutingProcessGroup, TimeoutReachesEveryBackend) {
  TwoBackends b;
  b.group.set_timeout(std::chrono::milliseconds(1234));
  EXPECT_EQ(b.group.timeout().count(), 1234);
  EXPECT_EQ(b.cpu->timeout().count(), 1234);
  EXPECT_EQ(b.gpu->timeout().count(), 1234);
}

TEST(RoutingProcessGroup, BadConstruction) {
  auto a = std::make_shared<TracingGroup>("a", 0, 2);
  auto other_rank = std::make_shared<TracingGroup>("b", 1, 2);
  auto other_size = std::make_shared<TracingGroup>("c", 0, 3);
  using R = RoutingProcessGroup;
  EXPECT_THROW(R(std::vector<R::Route>{}), ValueError);
  EXPECT_THROW(R({{DeviceType::CPU, nullptr}}), ValueError);
  EXPECT_THROW(R({{DeviceType::CPU, a}, {DeviceType::CUDA, other_rank}}), ValueError);
  EXPECT_THROW(R({{DeviceType::CPU, a}, {DeviceType::CUDA, other_size}}), ValueError);
  EXPECT_THROW(R({{DeviceType::CPU, a}, {DeviceType::CPU, a}}), ValueError);
}

TEST(ControlDevice, CpuWhenTheGroupTakesCpuTensors) {
  TwoBackends b;
  EXPECT_EQ(control_device(b.group, Device::cuda(1)), Device::cpu());
  TracingGroup gpu_only("gpuly", 0, 1, false, true);
  EXPECT_EQ(control_device(gpu_only, Device::cuda(1)), Device::cuda(1));
}

// ---- the registry and init_process_group's backend strings ------------------

// A backend of CPU tensors registered by the test, like an application would.
const BackendRegistration kTracingBackend{BackendInfo{
    .name = "tracing_test",
    .devices = {DeviceType::CPU},
    .native_cuda = false,
    .preference = 1000,  // never a default
    .unusable = [](const BackendContext&) { return std::string(); },
    .create = [](const BackendContext& ctx) -> std::shared_ptr<ProcessGroup> {
      return std::make_shared<TracingGroup>("tracing_test", ctx.rank, ctx.size);
    },
}};

TEST(BackendRegistry, ListsTheBuildsBackendsAndOurs) {
  auto names = registered_backends();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(std::find(names.begin(), names.end(), "tracing_test"), names.end());
  EXPECT_EQ(find_backend("gloo") != nullptr, bool(DDP_HAVE_GLOO));
  EXPECT_EQ(find_backend("mpi") != nullptr, bool(DDP_HAVE_MPI));
  EXPECT_EQ(find_backend("nccl") != nullptr, bool(DDP_HAVE_NCCL));
  EXPECT_EQ(find_backend("nosuch"), nullptr);
  if (const BackendInfo* nccl = find_backend("nccl")) {
    EXPECT_TRUE(nccl->takes(DeviceType::CUDA));
    EXPECT_FALSE(nccl->takes(DeviceType::CPU));
  }
}

TEST(BackendRegistry, RefusesBadRegistrations) {
  BackendInfo dup = *find_backend("tracing_test");
  EXPECT_THROW(register_backend(dup), ValueError);
  BackendInfo bad = dup;
  bad.name = "a:b";
  EXPECT_THROW(register_backend(bad), ValueError);
  bad.name = "tracing_test_no_devices";
  bad.devices.clear();
  EXPECT_THROW(register_backend(bad), ValueError);
  EXPECT_EQ(find_backend("tracing_test_no_devices"), nullptr);
}

// A job of one, launched by nobody.
class InitBackendString : public ::testing::Test {
 protected:
  World init(const std::string& backend) {
    InitOptions o;
    o.backend = backend;
    o.device = Device::cpu();
    return init_process_group(o);
  }
  EnvGuard g1_{"RANK"}, g2_{"WORLD_SIZE"}, g3_{"OMPI_COMM_WORLD_RANK"}, g4_{"OMPI_COMM_WORLD_SIZE"},
      g5_{"SLURM_PROCID"}, g6_{"SLURM_NTASKS"}, g7_{"MASTER_ADDR"}, g8_{"MASTER_PORT"},
      g9_{"LOCAL_RANK"}, g10_{"LOCAL_WORLD_SIZE"};
};

TEST_F(InitBackendString, ARegisteredBackendByName) {
  World w = init("tracing_test");
  EXPECT_EQ(w.group->backend_name(), "tracing_test");
  Tensor t = Tensor::ones({3});
  w.group->allreduce({t})->wait();
  EXPECT_EQ(static_cast<TracingGroup&>(*w.group).ops, std::vector<std::string>{"allreduce"});
}

TEST_F(InitBackendString, OneBackendPerDeviceTypeRoutes) {
  if (!DDP_HAVE_GLOO) GTEST_SKIP() << "built without gloo";
  World w = init("cpu:tracing_test,cuda:gloo");
  EXPECT_EQ(w.group->backend_name(), "cpu:tracing_test,cuda:gloo");
  auto* routed = dynamic_cast<RoutingProcessGroup*>(w.group.get());
  ASSERT_NE(routed, nullptr);
  Tensor t = Tensor::ones({3});
  w.group->allreduce({t})->wait();
  w.group->barrier()->wait();
  EXPECT_EQ(static_cast<TracingGroup&>(*routed->backend(DeviceType::CPU)).ops,
            (std::vector<std::string>{"allreduce", "barrier"}));
  EXPECT_EQ(routed->backend(DeviceType::CUDA)->backend_name(), "gloo");
}

TEST_F(InitBackendString, CpuOnlyGroupHasNoCudaBackend) {
  if (!DDP_HAVE_GLOO) GTEST_SKIP() << "built without gloo";
  World w = init("cpu:gloo");
  EXPECT_EQ(w.group->backend_name(), "cpu:gloo");
  EXPECT_FALSE(w.group->caps().cuda_tensors);
  Tensor t = Tensor::full({2}, 3.0);
  w.group->allreduce({t}, ReduceOp::avg)->wait();
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{3.0f, 3.0f}));
  // Both device types to gloo is plain gloo.
  EXPECT_EQ(init("cuda:gloo,cpu:gloo").group->backend_name(), "gloo");
}

TEST_F(InitBackendString, BadStringsAreClearErrors) {
  auto expect_error = [&](const std::string& spec, const std::string& says) {
    try {
      init(spec);
      ADD_FAILURE() << spec << ": no error";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr(says)) << spec;
    }
  };
  expect_error("nosuch", "no backend 'nosuch'");
  expect_error("nosuch", "tracing_test");  // names what the build has
  expect_error("cpu:nosuch", "no backend 'nosuch'");
  expect_error("tpu:tracing_test", "unknown device type 'tpu'");
  expect_error("cpu:", "is not DEVICE:BACKEND");
  expect_error("cpu:tracing_test,", "is not DEVICE:BACKEND");
  expect_error("cpu:tracing_test,cpu:tracing_test", "cpu is named twice");
  try {
    init("cuda:tracing_test");
    ADD_FAILURE() << "no error";
  } catch (const DeviceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("tracing_test does not take cuda tensors"));
  }
  if (DDP_HAVE_NCCL) {
    EXPECT_THROW(init("cpu:nccl"), DeviceError);
    EXPECT_THROW(init("nccl"), DeviceError);  // a CPU rank
  }
}

// ---- DDP_ASYNC_ERROR_HANDLING ---------------------------------------------------

TEST(AsyncErrorHandling, FromEnvironment) {
  EnvGuard guard("DDP_ASYNC_ERROR_HANDLING");
  EXPECT_EQ(async_error_handling_from_env(), AsyncErrorHandling::raise);
  const std::pair<const char*, AsyncErrorHandling> cases[] = {
      {"0", AsyncErrorHandling::raise},         {"raise", AsyncErrorHandling::raise},
      {"", AsyncErrorHandling::raise},          {"1", AsyncErrorHandling::tear_down},
      {"tear_down", AsyncErrorHandling::tear_down}, {"teardown", AsyncErrorHandling::tear_down}};
  for (const auto& [value, expected] : cases) {
    ::setenv("DDP_ASYNC_ERROR_HANDLING", value, 1);
    EXPECT_EQ(async_error_handling_from_env(), expected) << value;
  }
  ::setenv("DDP_ASYNC_ERROR_HANDLING", "2", 1);
  try {
    async_error_handling_from_env();
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("DDP_ASYNC_ERROR_HANDLING='2'"));
  }
}

}  // namespace
}  // namespace ddp::dist
