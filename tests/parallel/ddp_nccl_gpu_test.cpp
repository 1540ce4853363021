// DistributedDataParallel on the nccl backend (label gpu; skips without a
// GPU), world size 1: what the CPU-only machines cannot run. The default
// group of a GPU rank is "cpu:gloo,cuda:nccl" (Note [Routing by device]), so
// DDP's control collectives (model check, bucket order, used flags) take the
// CPU backend while the buckets take nccl; a bare "nccl" group works too,
// its control tensors placed on the GPU (control_device). At world size 1
// the average over ranks is the rank's own gradient, so three steps must
// match three steps of the plain model.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "ddp/config.h"
#include "ddp/dist/init.h"
#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/comm_hooks.h"
#include "ddp/parallel/distributed.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"

using namespace ddp;
using namespace ddp::parallel;

namespace {

// Two branches; with `skip_second` the second one takes no part in the
// loss, so its parameters are unused (find_unused_parameters).
class TwoBranch : public nn::Module {
 public:
  TwoBranch() : nn::Module("TwoBranch") {
    manual_seed(7);
    a = register_module("a", std::make_shared<nn::Linear>(8, 8));
    b = register_module("b", std::make_shared<nn::Linear>(8, 8));
    head = register_module("head", std::make_shared<nn::Linear>(8, 2));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = a->forward(x);
    if (!skip_second) h = add(h, b->forward(x));
    return head->forward(h);
  }
  bool skip_second = false;
  std::shared_ptr<nn::Linear> a, b, head;
};

class DdpNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
    if (!DDP_HAVE_NCCL) GTEST_SKIP() << "built without nccl";
  }
  static dist::World world(const std::string& backend = "") {
    dist::InitOptions o;
    o.rank = 0;
    o.world_size = 1;
    o.device = Device::cuda(0);
    o.backend = backend;
    return dist::init_process_group(o);
  }
  static Tensor input(int step) {
    manual_seed(100 + uint64_t(step));
    return randn({4, 8}).to(Device::cuda(0));
  }
  // Parameters after `steps` SGD steps, trained through `step_fn`'s model.
  template <class Forward>
  static std::vector<std::vector<float>> train(TwoBranch& m, Forward&& forward, int steps) {
    optim::SGD opt(m.parameters(), 0.1);
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      sum(forward(input(s))).backward();
      opt.step();
    }
    std::vector<std::vector<float>> out;
    for (const Tensor& p : m.parameters()) out.push_back(p.cpu().to_vector<float>());
    return out;
  }
  static void expect_near(const std::vector<std::vector<float>>& a,
                          const std::vector<std::vector<float>>& b, float tol) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].size(), b[i].size());
      for (size_t k = 0; k < a[i].size(); ++k) EXPECT_NEAR(a[i][k], b[i][k], tol) << i << "," << k;
    }
  }
  void run(const std::string& backend, bool find_unused, bool skip_second, CommHook hook,
           float tol) {
    auto plain = std::make_shared<TwoBranch>();
    plain->to(Device::cuda(0));
    plain->skip_second = skip_second;
    auto want = train(*plain, [&](const Tensor& x) { return plain->forward(x); }, 3);

    dist::World w = world(backend);
    auto model = std::make_shared<TwoBranch>();
    model->to(Device::cuda(0));
    model->skip_second = skip_second;
    DistributedDataParallel<TwoBranch> ddp_model(
        model, w.group, {.bucket_cap_mb = 1e-3, .find_unused_parameters = find_unused});
    if (hook) ddp_model.register_comm_hook(hook);
    auto got = train(*model, [&](const Tensor& x) { return ddp_model(x); }, 3);
    // The second forward rebuilt the buckets from rank 0's gradient order;
    // not under find_unused_parameters (Note [Rebuilding buckets]).
    EXPECT_EQ(ddp_model.reducer().buckets_rebuilt(), !find_unused);
    expect_near(got, want, tol);
  }
};

TEST_F(DdpNccl, TheDefaultGroupRoutesCudaToNcclAndCpuToGloo) {
  dist::World w = world();
  EXPECT_EQ(w.group->backend_name(), DDP_HAVE_GLOO ? "cpu:gloo,cuda:nccl" : "nccl");
}

TEST_F(DdpNccl, ThreeStepsWithoutFindUnused) { run("", false, false, nullptr, 1e-6f); }

TEST_F(DdpNccl, ThreeStepsWithFindUnused) { run("", true, false, nullptr, 1e-6f); }

TEST_F(DdpNccl, ThreeStepsWithAnUnusedBranch) { run("", true, true, nullptr, 1e-6f); }

TEST_F(DdpNccl, ThreeStepsOnABareNcclGroup) {
  run("nccl", false, false, nullptr, 1e-6f);
  run("nccl", true, true, nullptr, 1e-6f);
}

TEST_F(DdpNccl, BucketRebuildKeepsTheGradients) {
  dist::World w = world();
  auto model = std::make_shared<TwoBranch>();
  model->to(Device::cuda(0));
  DistributedDataParallel<TwoBranch> ddp_model(model, w.group, {.bucket_cap_mb = 1e-4});
  sum(ddp_model(input(0))).backward();
  EXPECT_FALSE(ddp_model.reducer().buckets_rebuilt());
  std::vector<std::vector<float>> before;
  for (const Tensor& p : model->parameters()) before.push_back(p.grad().cpu().to_vector<float>());
  (void)ddp_model(input(1));  // the rebuild: a broadcast of rank 0's order
  EXPECT_TRUE(ddp_model.reducer().buckets_rebuilt());
  std::vector<std::vector<float>> after;
  for (const Tensor& p : model->parameters()) after.push_back(p.grad().cpu().to_vector<float>());
  EXPECT_EQ(after, before);  // the gradients moved into the new buckets unchanged
}

TEST_F(DdpNccl, Fp16CompressionHook) { run("", false, false, fp16_compress_hook, 2e-3f); }

TEST_F(DdpNccl, Bf16CompressionHook) { run("", false, false, bf16_compress_hook, 2e-2f); }

}  // namespace
