// SyncBatchNorm on CUDA (label gpu; skipped without a GPU), against
// BatchNorm2d on the CPU in f32 over the whole batch:
//   - a group of one rank (world size 1): module and functional, training
//     and eval, NCHW and NHWC, f32 and bf16 inputs;
//   - two ranks as threads of this process sharing the GPU, each with its
//     slice of the batch: outputs, input gradients and running statistics
//     equal the whole batch's, and the ranks' weight gradients sum to it.
// The group is a small in-process one (allreduce by sum through shared
// memory), so the CUDA side of sync_batch_norm is what is tested, not a
// backend (the NCCL tests cover those).
#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/dist/process_group.h"
#include "ddp/dist/work.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"

namespace ddp::test {
namespace {

using dist::ReduceOp;
using dist::WorkPtr;
using parallel::SyncBatchNorm;

// Ranks are threads; allreduce(sum) meets in a shared rendezvous and adds
// the ranks' tensors in rank order. Anything else is not needed here.
struct Rendezvous {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  uint64_t round = 0;
  std::vector<Tensors> inputs;
  Tensors sum;
};

class ThreadsGroup : public dist::ProcessGroup {
 public:
  ThreadsGroup(int rank, int size, std::shared_ptr<Rendezvous> rv)
      : ProcessGroup(rank, size), rv_(std::move(rv)) {}
  std::string backend_name() const override { return "threads"; }

 protected:
  WorkPtr do_allreduce(Tensors& tensors, ReduceOp op) override {
    EXPECT_EQ(op, ReduceOp::sum);
    if (size() > 1) meet(tensors);
    return dist::completed_work("allreduce", tensors);
  }
  WorkPtr do_broadcast(Tensors&, int) override { return unsupported(); }
  WorkPtr do_reduce(Tensors&, int, ReduceOp) override { return unsupported(); }
  WorkPtr do_allgather(Tensors&, const Tensor&) override { return unsupported(); }
  WorkPtr do_reduce_scatter(const Tensor&, Tensors&, ReduceOp) override { return unsupported(); }
  WorkPtr do_all_to_all(const Tensor&, const Tensor&) override { return unsupported(); }
  WorkPtr do_barrier() override { return unsupported(); }
  WorkPtr do_send(const Tensor&, int, int) override { return unsupported(); }
  WorkPtr do_recv(const Tensor&, int, int) override { return unsupported(); }

 private:
  static WorkPtr unsupported() { DDP_THROW(NotImplementedError, "ThreadsGroup: allreduce only"); }

  void meet(Tensors& tensors) {
    Rendezvous& rv = *rv_;
    std::unique_lock lock(rv.mu);
    const uint64_t round = rv.round;
    rv.inputs[size_t(rank())].clear();
    for (const Tensor& t : tensors) rv.inputs[size_t(rank())].push_back(t.clone());
    if (++rv.arrived == size()) {
      rv.sum = rv.inputs[0];
      for (size_t r = 1; r < rv.inputs.size(); ++r)
        for (size_t i = 0; i < rv.sum.size(); ++i) rv.sum[i] = rv.sum[i] + rv.inputs[r][i];
      cuda::synchronize();  // the sum is read from the other rank's thread
      rv.arrived = 0;
      ++rv.round;
      rv.cv.notify_all();
    } else {
      rv.cv.wait(lock, [&] { return rv.round != round; });
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(rv.sum[i]);
  }

  std::shared_ptr<Rendezvous> rv_;
};

std::vector<std::shared_ptr<ThreadsGroup>> threads_groups(int size) {
  auto rv = std::make_shared<Rendezvous>();
  rv->inputs.resize(size_t(size));
  std::vector<std::shared_ptr<ThreadsGroup>> groups;
  for (int r = 0; r < size; ++r) groups.push_back(std::make_shared<ThreadsGroup>(r, size, rv));
  return groups;
}

double rel(const Tensor& got, const Tensor& want) {
  return scaled_error(got.cpu().to(kFloat32), want, 1e-6);
}

// The same affine parameters in every module.
void set_affine(const std::vector<nn::BatchNorm2d*>& modules, int64_t c) {
  NoGradGuard no_grad;
  Tensor w = rand({c}) + 0.5, b = randn({c});
  for (nn::BatchNorm2d* m : modules) Tensor(m->weight).copy_(w), Tensor(m->bias).copy_(b);
}

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason()

TEST(SyncBatchNormGpu, WorldOfOneIsBatchNormOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t c = 6;
  for (auto [dt, tol] : {std::pair{kFloat32, 1e-4}, std::pair{kBFloat16, 3e-2}}) {
    for (bool nhwc : {false, true}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (nhwc ? " nhwc" : " nchw"));
      manual_seed(50);
      auto group = threads_groups(1)[0];
      nn::BatchNorm2d ref(c);
      SyncBatchNorm bn(c, group);
      set_affine({&ref, &bn}, c);
      bn.to(Device::cuda(), dt);
      Tensor x = randn({5, c, 4, 3}) * 2 + 1, dy = randn({5, c, 4, 3});
      Tensor xr = x.detach().set_requires_grad();
      sum(ref.forward(xr) * dy).backward();
      Tensor yr = ref.forward(x);  // a second step: both running statistics move twice

      Tensor xg = x.to(Device::cuda(), dt), dyg = dy.to(Device::cuda(), dt);
      if (nhwc) xg = nn::functional::to_channels_last(xg), dyg = nn::functional::to_channels_last(dyg);
      xg = xg.detach().set_requires_grad();
      Tensor yg = bn.forward(xg);
      sum(yg * dyg).backward();
      Tensor yg2 = bn.forward(xg.detach());
      EXPECT_LE(rel(yg2, yr), tol);
      EXPECT_LE(rel(xg.grad(), xr.grad()), 2 * tol);
      EXPECT_LE(rel(bn.weight.grad(), ref.weight.grad()), 2 * tol);
      EXPECT_LE(rel(bn.bias.grad(), ref.bias.grad()), 2 * tol);
      EXPECT_LE(rel(bn.running_mean, ref.running_mean), tol);
      EXPECT_LE(rel(bn.running_var, ref.running_var), tol);
      // The functional form with batch statistics, on the same group.
      Tensor yf = parallel::sync_batch_norm(xg.detach(), Tensor(), Tensor(), bn.weight, bn.bias, 0.1,
                                            1e-5, group);
      Tensor yf_ref = nn::BatchNorm2d(c).forward(x) * ref.weight.detach().view({1, c, 1, 1}) +
                      ref.bias.detach().view({1, c, 1, 1});
      EXPECT_LE(rel(yf, yf_ref), tol);
      bn.eval(), ref.eval();
      EXPECT_LE(rel(bn.forward(xg.detach()), ref.forward(x)), tol);
    }
  }
}

TEST(SyncBatchNormGpu, TwoRanksMatchTheWholeBatchOnTheCpu) {
  SKIP_WITHOUT_GPU();
  const int64_t c = 5;
  const int64_t starts[] = {0, 3}, sizes[] = {3, 5};  // uneven slices of a batch of 8
  manual_seed(51);
  auto groups = threads_groups(2);
  nn::BatchNorm2d ref(c);
  SyncBatchNorm bn0(c, groups[0]), bn1(c, groups[1]);
  set_affine({&ref, &bn0, &bn1}, c);
  SyncBatchNorm* mine[] = {&bn0, &bn1};
  for (SyncBatchNorm* m : mine) m->to(Device::cuda());
  Tensor x = (randn({8, c, 4, 4}) * 3 + 2).detach().set_requires_grad(), dy = randn({8, c, 4, 4});
  Tensor y = ref.forward(x);
  sum(y * dy).backward();

  Tensor ys[2], dxs[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      Tensor xr = x.detach().narrow(0, starts[r], sizes[r]).cuda().detach().set_requires_grad();
      ys[r] = mine[r]->forward(xr);
      sum(ys[r] * dy.narrow(0, starts[r], sizes[r]).cuda()).backward();
      dxs[r] = xr.grad();
      cuda::synchronize();
    });
  for (auto& t : ranks) t.join();
  Tensor dw = Tensor::zeros({c}), db = Tensor::zeros({c});
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(r);
    EXPECT_LE(rel(ys[r], y.detach().narrow(0, starts[r], sizes[r])), 1e-4);
    EXPECT_LE(rel(dxs[r], x.grad().narrow(0, starts[r], sizes[r])), 1e-4);
    EXPECT_LE(rel(mine[r]->running_mean, ref.running_mean), 1e-5);
    EXPECT_LE(rel(mine[r]->running_var, ref.running_var), 1e-5);
    dw = dw + mine[r]->weight.grad().cpu();
    db = db + mine[r]->bias.grad().cpu();
  }
  EXPECT_LE(rel(dw, ref.weight.grad()), 1e-4);
  EXPECT_LE(rel(db, ref.bias.grad()), 1e-4);
}

}  // namespace
}  // namespace ddp::test
