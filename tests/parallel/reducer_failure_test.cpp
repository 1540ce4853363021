// A communication failure never lets a step through (Note [Bucket errors]):
// over a fake backend whose collectives fail asynchronously (from another
// thread, after scribbling over the bucket, as an aborted NCCL collective
// leaves it), backward raises, every .grad is cleared so that an optimizer
// step changes nothing, and the next iteration on a healthy group works.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/tensor/ops.h"

using namespace ddp;
using namespace ddp::parallel;
using ::testing::HasSubstr;

namespace {

// A Work whose wait() only "orders streams" like nccl's: it never blocks
// and never raises; the error is only recorded (exception()).
class StreamOrderedWork : public dist::Work {
 public:
  using Work::Work;
  void wait(std::chrono::milliseconds) override {}
};

// A world of two (this rank and nobody) whose allreduce of the bucket
// `fail_bucket` (counted from 0 in each backward) fails: a background thread
// writes NaN into the tensor, then completes the Work with a DistNetworkError.
// Other allreduces complete at once unchanged. Control collectives (used
// flags) succeed.
class FailingGroup : public dist::ProcessGroup {
 public:
  enum class Mode { wait_raises, wait_returns };
  FailingGroup(int fail_bucket, Mode mode) : ProcessGroup(0, 2), fail_(fail_bucket), mode_(mode) {}
  ~FailingGroup() override {
    for (auto& t : threads_) t.join();
  }
  std::string backend_name() const override { return "failing"; }
  int allreduces = 0;
  bool healthy = false;

 protected:
  dist::WorkPtr do_allreduce(Tensors& t, dist::ReduceOp) override {
    const bool fail = !healthy && allreduces++ == fail_;
    if (!fail) return dist::completed_work("allreduce", t);
    dist::WorkPtr w = mode_ == Mode::wait_raises ? std::make_shared<dist::Work>("allreduce")
                                                 : std::make_shared<StreamOrderedWork>("allreduce");
    w->set_result(t);
    Tensor target = t[0];
    threads_.emplace_back([w, target]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      target.fill_(std::numeric_limits<double>::quiet_NaN());
      try {
        DDP_THROW(DistNetworkError, "allreduce (failing rank 0): peer rank 1 vanished");
      } catch (...) {
        w->mark_completed(std::current_exception());
      }
    });
    if (mode_ == Mode::wait_returns) {
      // An error the watchdog has already recorded by the end of backward.
      while (!w->is_completed()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return w;
  }
  dist::WorkPtr do_broadcast(Tensors& t, int) override { return dist::completed_work("broadcast", t); }
  dist::WorkPtr do_reduce(Tensors& t, int, dist::ReduceOp) override {
    return dist::completed_work("reduce", t);
  }
  dist::WorkPtr do_allgather(Tensors& o, const Tensor& in) override {
    for (Tensor& x : o) x.copy_(in);
    return dist::completed_work("allgather", o);
  }
  dist::WorkPtr do_reduce_scatter(const Tensor& out, Tensors&, dist::ReduceOp) override {
    return dist::completed_work("reduce_scatter", {out});
  }
  dist::WorkPtr do_all_to_all(const Tensor& out, const Tensor&) override {
    return dist::completed_work("all_to_all", {out});
  }
  dist::WorkPtr do_barrier() override { return dist::completed_work("barrier"); }
  dist::WorkPtr do_send(const Tensor&, int, int) override { return dist::completed_work("send"); }
  dist::WorkPtr do_recv(const Tensor&, int, int) override { return dist::completed_work("recv"); }

 private:
  int fail_;
  Mode mode_;
  std::vector<std::thread> threads_;
};

std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(11);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Linear>(4, 4)});
}

std::vector<std::vector<float>> values(const Tensors& ts) {
  std::vector<std::vector<float>> out;
  for (const Tensor& t : ts) out.push_back(t.to_vector<float>());
  return out;
}

struct Case {
  FailingGroup::Mode mode;
  bool find_unused;
  int fail_bucket;
};

class ReducerFailure : public ::testing::TestWithParam<Case> {};

TEST_P(ReducerFailure, BackwardRaisesAndNoStepConsumesTheBucket) {
  const Case c = GetParam();
  auto group = std::make_shared<FailingGroup>(c.fail_bucket, c.mode);
  auto model = mlp();
  // 1e-5 MiB: every parameter its own bucket (4 buckets).
  DistributedDataParallel<nn::Sequential> ddp_model(
      model, group, {.bucket_cap_mb = 1e-5, .find_unused_parameters = c.find_unused});
  ASSERT_EQ(ddp_model.reducer().num_buckets(), 4u);
  Tensors params = model->parameters();
  optim::SGD opt(params, 0.1, {.momentum = 0.9});
  const auto before = values(params);

  Tensor x = randn({3, 4});
  try {
    sum(ddp_model(x)).backward();
    FAIL() << "backward did not raise";
  } catch (const DistNetworkError& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer rank 1 vanished"));
  }
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_FALSE(params[i].grad().defined()) << "param " << i << " kept a gradient";
  opt.step();  // what a careless loop would do next: it must change nothing
  EXPECT_EQ(values(params), before);
  for (const auto& v : values(params))
    for (float f : v) EXPECT_FALSE(std::isnan(f));

  // The group recovers (a restarted peer, say): the next iteration trains.
  group->healthy = true;
  opt.zero_grad();
  sum(ddp_model(x)).backward();
  for (const Tensor& p : params) {
    ASSERT_TRUE(p.grad().defined());
    for (float f : p.grad().to_vector<float>()) EXPECT_FALSE(std::isnan(f));
  }
  opt.step();
  EXPECT_NE(values(params), before);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ReducerFailure,
    ::testing::Values(Case{FailingGroup::Mode::wait_raises, false, 0},
                      Case{FailingGroup::Mode::wait_raises, false, 3},
                      Case{FailingGroup::Mode::wait_returns, false, 1},
                      Case{FailingGroup::Mode::wait_raises, true, 2},
                      Case{FailingGroup::Mode::wait_returns, true, 0}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(info.param.mode == FailingGroup::Mode::wait_raises ? "WaitRaises"
                                                                            : "ErrorOnlyRecorded") +
             (info.param.find_unused ? "FindUnused" : "") + "Bucket" +
             std::to_string(info.param.fail_bucket);
    });

}  // namespace
