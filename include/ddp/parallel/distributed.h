#pragma once
// DistributedDataParallel: wraps a model so that backward leaves in every
// parameter's .grad the average of the gradients of all ranks, as if one
// process had run the whole global batch (torch.nn.parallel.
// DistributedDataParallel). The allreduce of each gradient bucket starts
// while backward still runs; see reducer.h.
//
//   auto world = dist::init_process_group();
//   auto model = nn::models::resnet50();
//   model->to(world.device);
//   parallel::DistributedDataParallel ddp_model(model, world.group);
//   optim::SGD opt(model->parameters(), 0.1, {.momentum = 0.9});
//   for (auto& [x, y] : loader) {
//     Tensor loss = nn::functional::cross_entropy(ddp_model(x), y);
//     opt.zero_grad();
//     loss.backward();   // returns with averaged gradients
//     opt.step();
//   }
//
// Construction is a collective: every rank must wrap the same model (same
// parameter names, shapes and dtypes, checked), and afterwards all ranks
// hold rank 0's parameters and buffers.

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/dist/process_group.h"
#include "ddp/nn/module.h"
#include "ddp/parallel/comm_hooks.h"
#include "ddp/parallel/reducer.h"

namespace ddp::parallel {

struct DDPOptions {
  // Bucket size in MiB; the first bucket is capped at 1 MiB
  // (Note [Gradient buckets]).
  double bucket_cap_mb = 25.0;
  // Trace each forward's outputs and treat parameters they do not reach as
  // ready (Note [Unused parameters]). Costs a graph walk and an allreduce of
  // one flag per parameter each iteration.
  bool find_unused_parameters = false;
  // Copy rank 0's buffers (BatchNorm running statistics) to every rank at
  // the start of each forward in training mode.
  bool broadcast_buffers = true;
  // Rebuild the buckets once, in the order gradients became ready in the
  // first iteration (Note [Rebuilding buckets]).
  bool rebuild_buckets = true;
};

// What does not depend on the module's forward signature.
class DistributedDataParallelBase {
 public:
  DistributedDataParallelBase(std::shared_ptr<nn::Module> module,
                              std::shared_ptr<dist::ProcessGroup> group, DDPOptions options);
  virtual ~DistributedDataParallelBase();
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  dist::ProcessGroup& group() { return *group_; }
  Reducer& reducer() { return *reducer_; }
  const DDPOptions& options() const { return options_; }

  // Replaces the default averaging allreduce (comm_hooks.h). Call it before
  // the first backward, with the same hook on every rank.
  void register_comm_hook(CommHook hook) { reducer_->register_comm_hook(std::move(hook)); }

  // Runs fn at the start of every forward (training or evaluation), before
  // DDP's own work; hooks run in registration order. ZeRO-1 waits there for
  // the parameters it all-gathers (ddp/parallel/zero.h).
  void register_forward_pre_hook(std::function<void()> fn) {
    forward_pre_hooks_.push_back(std::move(fn));
  }

  // Gradient accumulation: backward passes whose forward ran inside the
  // scope only accumulate into .grad locally; the first backward after it
  // (its forward outside the scope) averages the accumulated sum.
  //   { auto guard = ddp_model.no_sync(); for (micro-batches but the last) {...} }
  // Note: it is the forward that must run inside the scope, as in PyTorch:
  // that is where DDP decides whether the coming backward synchronises.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallelBase& ddp) : ddp_(ddp), prev_(ddp.sync_) {
      ddp.sync_ = false;
    }
    ~NoSyncGuard() { ddp_.sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallelBase& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  bool require_backward_grad_sync() const { return sync_; }

 protected:
  // Around the module's forward: buffers, a due bucket rebuild, and arming
  // the reducer for the backward that follows.
  void pre_forward();
  void post_forward(const Tensors& outputs);

 private:
  void verify_same_model_on_all_ranks();
  // The device of the first parameter (the CPU without parameters).
  Device model_device() const;
  void broadcast_from_rank0(const Tensors& tensors);

  std::shared_ptr<nn::Module> module_base_;
  std::shared_ptr<dist::ProcessGroup> group_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
  Tensors buffers_;
  std::vector<std::function<void()>> forward_pre_hooks_;
  bool sync_ = true;
};

// The tensors in a forward's result, for the unused-parameter trace: a
// Tensor, Tensors, or a pair/tuple of those.
inline void collect_outputs(const Tensor& t, Tensors& out) { out.push_back(t); }
inline void collect_outputs(const Tensors& ts, Tensors& out) {
  out.insert(out.end(), ts.begin(), ts.end());
}
template <class... T>
void collect_outputs(const std::tuple<T...>& t, Tensors& out) {
  std::apply([&](const auto&... x) { (collect_outputs(x, out), ...); }, t);
}
template <class A, class B>
void collect_outputs(const std::pair<A, B>& p, Tensors& out) {
  collect_outputs(p.first, out);
  collect_outputs(p.second, out);
}

template <class M>
class DistributedDataParallel : public DistributedDataParallelBase {
 public:
  DistributedDataParallel(std::shared_ptr<M> module, std::shared_ptr<dist::ProcessGroup> group,
                          DDPOptions options = {})
      : DistributedDataParallelBase(module, std::move(group), options), module_(module) {}

  M& module() { return *module_; }
  const std::shared_ptr<M>& module_ptr() const { return module_; }

  // The module's own forward, with DDP's work around it.
  template <class... Args>
  auto forward(Args&&... args) {
    pre_forward();
    auto out = module_->forward(std::forward<Args>(args)...);
    Tensors outputs;
    collect_outputs(out, outputs);
    post_forward(outputs);
    return out;
  }
  template <class... Args>
  auto operator()(Args&&... args) {
    return forward(std::forward<Args>(args)...);
  }

 private:
  std::shared_ptr<M> module_;
};

}  // namespace ddp::parallel
