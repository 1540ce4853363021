#pragma once
// Reducer: the part of DistributedDataParallel that averages gradients
// across ranks while backward still runs (the twin of torch's reducer).
//
// Note [Gradient buckets]
// Parameters are grouped into buckets: in reverse registration order (the
// order in which backward usually produces their gradients), separately per
// device and dtype, the first bucket of each kind capped at 1 MiB (so the
// first allreduce starts early; at bucket_cap_mb when that is smaller) and
// the others at bucket_cap_mb. Each bucket
// is one flat buffer, and each parameter's .grad is a view into it, so the
// gradients exist once and a bucket is communicated without packing.
//
// Note [Launch order]
// A post-accumulate hook on every parameter marks its gradient ready. When
// the last gradient of a bucket is ready the bucket is ready, and ready
// buckets are launched strictly in bucket order: bucket i+1 waits for bucket
// i even if it was ready first. Collectives match by order, so every rank
// must launch the same buckets in the same order, whatever the order in
// which its own gradients arrived. At the end of backward (an autograd
// callback) the reducer waits for every bucket in that order; if any
// bucket's communication failed, backward raises that error and every .grad
// is cleared first (Note [Bucket errors] in reducer.cpp).
//
// Note [Rebuilding buckets]
// Registration order is only a guess at gradient order. During the first
// synchronised backward the reducer records the order in which gradients
// became ready; at the next forward rank 0 broadcasts its order and every
// rank rebuilds its buckets from it (once), copying the current gradients
// into the new buffers.
//
// Note [Unused parameters]
// A parameter that takes no part in this iteration's loss never fires its
// hook, so its bucket would never be ready and the job would hang. With
// find_unused_parameters, the forward's outputs are traced back through the
// graph; parameters not reached are marked ready at once, contributing
// their current .grad (zeros if none), and at the end of backward any
// parameter still missing is marked ready too. A small allreduce of "used"
// flags then tells every rank which parameters no rank used: those keep an
// undefined .grad (if they had none), as in a single process, so the
// optimizer skips them the same way. Without the option, the end of backward
// waits for the buckets already launched and the next forward raises an
// error naming the parameters that got no gradient.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/dist/process_group.h"
#include "ddp/parallel/comm_hooks.h"
#include "ddp/tensor/tensor.h"

namespace ddp::parallel {

// The bucket each parameter goes into, from the order the parameters are
// expected to become ready (indices into `params`). Buckets are split per
// (device, dtype) and capped in bytes: caps[0] for the first bucket of each
// kind, caps.back() for the rest. The result lists, per bucket, parameter
// indices in `order`'s order; buckets are sorted by their first parameter's
// position in `order`.
std::vector<std::vector<size_t>> assign_buckets(const Tensors& params,
                                                const std::vector<size_t>& order,
                                                const std::vector<size_t>& caps);

// When one bucket's events happened in the last synchronised backward.
struct BucketTiming {
  using Clock = std::chrono::steady_clock;
  int index = 0;
  size_t bytes = 0;
  Clock::time_point ready;     // its last gradient was ready
  Clock::time_point launched;  // its hook was called
  Clock::time_point done;      // its communication completed
};

struct ReducerOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  bool find_unused_parameters = false;
  bool rebuild_buckets = true;  // Note [Rebuilding buckets]
};

class Reducer {
 public:
  // params: the model's trainable parameters in registration order, with
  // their names (for messages). Registers a post-accumulate hook on each;
  // the destructor removes them.
  Reducer(Tensors params, std::vector<std::string> names,
          std::shared_ptr<dist::ProcessGroup> group, ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // At the start of every forward in training mode: raises the error of an
  // unfinished previous iteration (Note [Unused parameters]) and rebuilds the
  // buckets once when due (a collective: every rank calls it).
  void prepare_for_forward();
  // After a forward whose backward must be synchronised: arms the hooks for
  // one backward pass. outputs: the forward's outputs, traced for unused
  // parameters when find_unused_parameters is on.
  void prepare_for_backward(const Tensors& outputs);

  void register_comm_hook(CommHook hook);

  // ---- introspection (tests, benchmarks) -----------------------------------
  size_t num_buckets() const { return buckets_.size(); }
  // Parameter indices of each bucket, in launch order.
  std::vector<std::vector<size_t>> bucket_assignment() const;
  const std::vector<BucketTiming>& last_timeline() const { return timeline_; }
  bool buckets_rebuilt() const { return rebuilt_; }

 private:
  struct Bucket;
  void build_buckets(const std::vector<size_t>& order);
  void mark_ready(size_t param, bool from_hook);
  void launch_ready_buckets();
  void finalize_backward();
  void reduce_used_flags();
  void discard_gradients();
  Tensor control_tensor(const Tensor& host) const;
  void check_previous_iteration();
  void rebuild_from_rank0_order();
  std::vector<size_t> unready_params() const;
  void wait_launched_quietly();

  Tensors params_;
  std::vector<std::string> names_;
  std::shared_ptr<dist::ProcessGroup> group_;
  ReducerOptions options_;
  CommHook hook_;
  std::vector<int> hook_handles_;

  std::vector<std::unique_ptr<Bucket>> buckets_;
  struct Locator { size_t bucket = 0, slot = 0; };
  std::vector<Locator> locate_;  // by parameter

  // ---- per backward pass ----
  bool armed_ = false;            // prepare_for_backward ran; hooks count
  bool callback_queued_ = false;
  bool backward_done_ = false;    // a synchronised backward finished since the last forward
  std::vector<char> ready_;       // by parameter
  std::vector<char> used_;        // by parameter: got a gradient (or had one)
  size_t next_launch_ = 0;        // the next bucket to launch
  std::vector<BucketTiming> timeline_;
  int64_t launched_iterations_ = 0;  // tags the buckets' collectives (flight recorder)
  std::string unfinished_error_;  // raised by the next prepare_for_forward

  // ---- Note [Rebuilding buckets] ----
  bool rebuilt_ = false;
  bool rebuild_due_ = false;
  std::vector<size_t> ready_order_;
};

}  // namespace ddp::parallel
