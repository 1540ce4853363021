// SyncBatchNorm on CUDA (label gpu; skipped without a GPU), against
// BatchNorm2d on the CPU in f32 over the whole batch:
//   - a group of one rank (world size 1): module and functional, training
//     and eval, NCHW and NHWC, f32 and bf16 inputs;
//   - two ranks as threads of this process sharing the GPU, each with its
//     slice of the batch: outputs, input gradients and running statistics
//     equal the whole batch's, and the ranks' weight gradients sum to it.
// The group is the small in-process one of thread_group.h (allreduce by sum
// through shared memory), so the CUDA side of sync_batch_norm is what is tested, not a
// backend (the NCCL tests cover those).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/nn/functional/conv.h"
#include "ddp/parallel/sync_batch_norm.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "nn/scaled_error.h"
#include "parallel/thread_group.h"

namespace ddp::test {
namespace {

using parallel::SyncBatchNorm;

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
      auto group = thread_groups(1)[0];
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
  auto groups = thread_groups(2);
  nn::BatchNorm2d ref(c);
  SyncBatchNorm bn0(c, groups[0]), bn1(c, groups[1]);
  set_affine({&ref, &bn0, &bn1}, c);
  SyncBatchNorm* mine[] = {&bn0, &bn1};
  for (SyncBatchNorm* m : mine) m->to(Device::cuda());
  Tensor x = (randn({8, c, 4, 4}) * 3 + 2).detach().set_requires_grad(), dy = randn({8, c, 4, 4});
  Tensor y = ref.forward(x);
  sum(y * dy).backward();

  Tensor ys[2], dxs[2];
  on_every_rank(2, [&](int r) {
    Tensor xr = x.detach().narrow(0, starts[r], sizes[r]).cuda().detach().set_requires_grad();
    ys[r] = mine[r]->forward(xr);
    sum(ys[r] * dy.narrow(0, starts[r], sizes[r]).cuda()).backward();
    dxs[r] = xr.grad();
    cuda::synchronize();
  });
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
