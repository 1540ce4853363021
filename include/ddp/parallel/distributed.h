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
#include "ddp/optim/optimizer.h"
#include "ddp/parallel/bucket_tuner.h"
#include "ddp/parallel/comm_hooks.h"
#include "ddp/parallel/join.h"
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
  // the start of each synchronised forward in training mode (not inside
  // no_sync), all buffers in one coalesced broadcast.
  bool broadcast_buffers = true;
  // Rebuild the buckets once, in the order gradients became ready in the
  // first iteration (Note [Rebuilding buckets]; skipped under
  // find_unused_parameters unless static_graph).
  bool rebuild_buckets = true;
  // The set of parameters used, and the order of their gradients, is the
  // same in every iteration (Note [Static graph]): unused parameters are
  // found once, in the first iteration, without a graph walk.
  bool static_graph = false;
  // Each .grad is a view into its bucket: no copies between .grad and the
  // buckets (Note [Gradient as bucket view]). Leave it on, and prefer
  // zero_grad(set_to_none = false) with it: a step then copies no gradient.
  bool gradient_as_bucket_view = true;
  // Automatic bucket sizes (Note [Exposed communication model] in
  // bucket_tuner.h): after auto_bucket_iterations synchronised backward
  // passes (plus one of warm-up), time a few allreduces, let rank 0 choose
  // the buckets that hide the most communication behind the measured
  // backward, and rebuild once. bucket_cap_mb applies until then. With
  // overlap_step the choice covers the overlapped schedule too: buckets,
  // priority buckets, chunk size and issue ratio (Note [Overlapped step
  // model]). The choice and the predicted exposed time are logged (info).
  bool auto_bucket_size = false;
  int auto_bucket_iterations = 5;
  // The group comes from a parallel::ElasticGroup (ddp/parallel/elastic.h),
  // which has made every replica's state equal and checks joiners' models
  // itself: construction communicates nothing (a joiner builds its DDP
  // alone, while the others go on), and reset_group() follows membership
  // changes.
  bool fault_tolerant = false;
};

// What does not depend on the module's forward signature.
class DistributedDataParallelBase : public Joinable {
 public:
  DistributedDataParallelBase(std::shared_ptr<nn::Module> module,
                              std::shared_ptr<dist::ProcessGroup> group, DDPOptions options);
  virtual ~DistributedDataParallelBase();
  DistributedDataParallelBase(const DistributedDataParallelBase&) = delete;
  DistributedDataParallelBase& operator=(const DistributedDataParallelBase&) = delete;

  dist::ProcessGroup& group() { return *group_; }
  Reducer& reducer() { return *reducer_; }
  // The automatic bucket sizer; null unless options().auto_bucket_size.
  const BucketAutoTuner* bucket_tuner() const { return tuner_.get(); }
  const DDPOptions& options() const { return options_; }

  // Replaces the default averaging allreduce (comm_hooks.h). Call it before
  // the first backward, with the same hook on every rank. Not with
  // overlap_step (ValueError).
  void register_comm_hook(CommHook hook) {
    refuse_with_overlap("register_comm_hook");
    reducer_->register_comm_hook(hook);
    comm_hook_ = std::move(hook);
  }

  // Moves DDP to another group, between iterations: after an elastic
  // membership change (ddp/parallel/elastic.h: call it from on_change). The
  // reducer starts afresh on `group`, as at construction (its buckets are
  // rebuilt after the first iteration, the automatic sizer starts over), so
  // that survivors and a joiner, whose DDP is new, do the same collectives;
  // an unfinished iteration (a backward that failed) is dropped, .grad
  // cleared. Nothing is communicated: the ranks of `group` must already hold
  // equal parameters and buffers (the ElasticGroup sends them to a joiner).
  // The comm hook is registered again; a hook that keeps state of the old
  // group (PowerSGD) must be registered anew by the caller instead: pass
  // keep_comm_hook = false. Not inside a Join scope.
  void reset_group(std::shared_ptr<dist::ProcessGroup> group, bool keep_comm_hook = true);

  // Runs fn at the start of every forward (training or evaluation), before
  // DDP's own work; hooks run in registration order. ZeRO-1 waits there for
  // the parameters it all-gathers (ddp/parallel/zero.h).
  void register_forward_pre_hook(std::function<void()> fn) {
    forward_pre_hooks_.push_back(std::move(fn));
  }
  bool has_forward_pre_hooks() const { return !forward_pre_hooks_.empty(); }
  // Runs fn at the end of every forward (training or evaluation), after the
  // module's forward and before DDP arms the reducer for the backward; in
  // registration order. ZeRO-1 with overlap_with_forward finishes there the
  // all-gathers no layer waited for (Note [ZeRO-1 overlapped with the
  // forward] in ddp/parallel/zero.h).
  void register_forward_post_hook(std::function<void()> fn) {
    forward_post_hooks_.push_back(std::move(fn));
  }

  // ---- Note [Overlapped step] (reducer.h; docs/ddp.md) -----------------------
  // Applies `optimizer`'s steps one bucket at a time, each just before the
  // next forward runs the first layer that owns a parameter of it, so that
  // backward returns without waiting for the gradients' communication and
  // the next forward overlaps what is still in flight:
  //   ddp.overlap_step(opt, /*priority_buckets=*/4);
  //   for (...) { loss(ddp(x), y).backward(); opt.step(); opt.zero_grad(); }
  // opt.step() and opt.zero_grad() record what to do (Note [Deferred
  // optimizer steps]); every element gets the update plain DDP gives it.
  // The last priority_buckets buckets of backward (the first layers') are
  // launched at its end, first layers first. Every optimizer parameter
  // must be a trainable parameter of the module. Call it before the first
  // forward, on every rank alike. With auto_bucket_size the tuner chooses
  // the buckets, priority_buckets and chunks itself once it has measured
  // (Note [Overlapped step model] in bucket_tuner.h); until then every
  // forward waits for the last step. ValueError: called twice, a comm hook
  // (PowerSGD, ZeRO-1) registered, fault_tolerant on,
  // a parameter of the optimizer outside the module, priority_buckets < 1,
  // a chunk_mb below 0 or an issue_ratio outside (0, 1], or the optimizer's
  // steps already deferred by another DDP. chunks (Note [Overlap chunks] in
  // reducer.h): each bucket sent as allreduces of at most chunk_mb, so that
  // the first layers' chunks overtake those not yet issued:
  //   ddp.overlap_step(opt, 3, {.chunk_mb = 4, .issue_ratio = 0.9});
  void overlap_step(optim::Optimizer& optimizer, int priority_buckets = 1,
                    OverlapChunks chunks = {});
  bool overlaps_step() const { return overlap_ != nullptr; }
  // Completes what the overlapped step left: waits for the last backward's
  // buckets (its .grad are then final) and applies a recorded step and
  // zero_grad. Call it before reading gradients (clip_grad_norm_) or
  // parameters outside a forward (evaluation through another path,
  // model->state_dict(), a checkpoint); the optimizer's state_dict() and
  // amp::GradScaler call it themselves. A no-op without overlap_step.
  void synchronize_step();

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

  // ---- Note [Join], Note [Joinable] (join.h) ---------------------------------
  // Shadows one iteration of the ranks that still have inputs: the buffer
  // broadcast (from `buffer_root`), a due bucket rebuild, and the gradient
  // buckets with zeros. `syncing`: whether their iteration synchronises.
  void join_shadow_iteration(bool syncing, bool rebuild, int buffer_root) override;
  // After all ranks joined: every rank takes the parameters and buffers of
  // `root` (the last rank to join, whose model saw every step).
  void join_final_sync(int root) override;
  // Set by a join scope around the training loop (nullptr outside one).
  void set_join_context(Join* join) override;
  // When the body of a join scope returned: its last iteration is complete.
  void join_close_iteration() override;
  dist::ProcessGroup& join_process_group() override { return group(); }
  Device join_device() const override { return device(); }
  // Refused while the bucket sizer is still choosing or with a forward
  // pre-hook (ZeRO-1): their collectives are not among those Join shadows.
  std::string join_refusal() const override;
  // The device of the first parameter (the CPU without parameters).
  Device device() const { return model_device(); }

  // Note [Bucket plans in checkpoints]
  // The buckets in use after a rebuild (Note [Rebuilding buckets]) or the
  // automatic sizer decide what PowerSGD compresses together and, at three
  // ranks or more, in which order a collective sums each element; so a run
  // resumed bit for bit needs them. bucket_plan_state() gives
  // "buckets.params" (parameter indices, launch order), "buckets.sizes"
  // (parameters per bucket), "buckets.rebuilt" and "buckets.tuned" (1 when
  // the rebuild, or the sizer's choice, has happened: after a load neither
  // happens again) and the sizer's measured link ("tuner.alpha_s",
  // "tuner.beta_s_per_byte", "tuner.predicted_exposed_s"), and with
  // overlap_step the schedule it chose ("tuner.overlap.priority_buckets",
  // "tuner.overlap.chunk_mb", "tuner.overlap.issue_ratio"). A checkpoint
  // taken before the sizer chose resumes with the sizer starting over.
  // load_bucket_plan_state() checks the plan (every trainable parameter
  // exactly once; ValueError naming the problem, nothing changed) and
  // installs it; call it between iterations, e.g. in a checkpoint load
  // before the first forward. A DDP that never changes its buckets
  // (rebuild_buckets off and no auto_bucket_size, as ZeRO-1 needs) refuses
  // a plan other than its own.
  TensorDict bucket_plan_state() const;
  void load_bucket_plan_state(const TensorDict& state);

 protected:
  // Around the module's forward: buffers, a due bucket rebuild, and arming
  // the reducer for the backward that follows.
  void pre_forward();
  void post_forward(const Tensors& outputs);

 private:
  struct OverlapState;  // Note [Overlapped step]: overlap_step.cpp
  void refuse_with_overlap(const char* what) const;
  void overlap_apply_bucket(size_t bucket);
  void overlap_apply_all();
  void overlap_record_step();
  void overlap_record_zero_grad(bool set_to_none);
  void overlap_detach();
  void overlap_follow_join(bool in_join);

  void verify_same_model_on_all_ranks();
  std::unique_ptr<Reducer> make_reducer(std::shared_ptr<dist::ProcessGroup> group) const;
  Tensors tuner_params() const;  // the trainable parameters
  Device model_device() const;
  void broadcast_from(const Tensors& tensors, int root);

  std::shared_ptr<nn::Module> module_base_;
  std::shared_ptr<dist::ProcessGroup> group_;
  DDPOptions options_;
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<BucketAutoTuner> tuner_;  // options_.auto_bucket_size
  CommHook comm_hook_;                      // re-registered by reset_group
  Tensors buffers_;
  std::vector<std::function<void()>> forward_pre_hooks_;
  std::vector<std::function<void()>> forward_post_hooks_;
  std::shared_ptr<OverlapState> overlap_;  // shared_ptr: the type is private to overlap_step.cpp
  bool sync_ = true;
  Join* join_ = nullptr;
  // Note [Join]: SyncBatchNorm's collectives in this rank's iteration.
  std::vector<JoinCollective> join_log_building_, join_log_last_;
  bool join_log_open_ = false;
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

  // The module's own forward, with DDP's work around it; through the
  // module's call operator where it has one, so that its forward hooks run
  // (Note [Forward hooks]).
  template <class... Args>
  auto forward(Args&&... args) {
    pre_forward();
    auto out = [&] {
      if constexpr (requires { (*module_)(std::forward<Args>(args)...); })
        return (*module_)(std::forward<Args>(args)...);
      else
        return module_->forward(std::forward<Args>(args)...);
    }();
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
