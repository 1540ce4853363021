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
// is one flat buffer, and each parameter's .grad is a view into it (Note
// [Gradient as bucket view]), so the gradients exist once and a bucket is
// communicated without packing. A view has its parameter's own dense
// layout (a channels-last weight gets a channels-last .grad), so autograd
// and the optimizer never re-lay a gradient out, and the allreduce sums the
// block as it lies: every rank has the same layouts (DDP checks them at
// construction; Note [Dense tensors in collectives]). A parameter that is
// not dense (a strided view) is refused.
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
// into the new buffers. Under find_unused_parameters the order differs
// between ranks and iterations (unused parameters go ready at the first
// hook), so, as in PyTorch, the rebuild is skipped there unless the graph is
// static. rebuild_buckets(assignment) installs any assignment the caller
// chooses (the same on every rank), e.g. from last_grad_ready_times().
//
// Note [Unused parameters]
// A parameter that takes no part in this iteration's loss never fires its
// hook, so its bucket would never be ready and the job would hang. With
// find_unused_parameters, the forward's outputs are traced back through the
// graph and the parameters not reached are remembered; they are marked
// ready when the first gradient hook of the backward fires, never inside
// forward (a bucket launched in forward would overtake, on this rank only,
// any collective the program issues between forward and backward: a logged
// loss, SyncBatchNorm, a second model on the group). At the end of backward
// any parameter still missing is marked ready too. Each contributes its
// current .grad (zeros if none). A small allreduce of "used" flags then
// tells every rank which parameters no rank used: those keep their .grad
// exactly as it was (undefined if they had none; their local value, not an
// average, if they had one), as in a single process, so the optimizer skips
// them the same way. Without the option, the end of backward waits for the
// buckets already launched and the next forward raises an error naming the
// parameters that got no gradient.
//
// Note [Static graph]
// With static_graph the set of used parameters is the same every iteration.
// The first synchronised backward learns it without a graph walk: at its
// end the parameters that got no gradient are marked ready and remembered,
// and the used-flags allreduce runs once. Later iterations mark those
// parameters ready at the first hook, with no walk and no flags allreduce.
// A remembered parameter that does get a gradient is an error naming it.
//
// Note [Overlapped step]
// With overlap on (DistributedDataParallel::overlap_step), a synchronised
// backward does not wait for its buckets: the end-of-backward callback
// launches what is left and returns, and each bucket is finished (waited
// for, its errors checked, its .grad made the average) by finish_bucket()
// when the layer that owns its parameters is about to run in the next
// forward, where DDP applies the optimizer step to those parameters; the
// communication of the other buckets goes on behind that forward. Because
// the next forward needs the first layers first, and those are in the last
// buckets of backward, the last `priority_buckets` buckets are held back
// during backward and launched at its end in reverse order, first layers
// first: their collectives are not queued behind the earlier buckets'
// remaining traffic. The launch order depends only on the bucket plan, so
// it is the same on every rank (collectives match by order). What needs
// every bucket at the end of backward keeps the synchronous path for that
// backward: the used-flags allreduce (find_unused_parameters, and the first
// iteration of static_graph) and a Join scope (whose shadows launch in
// bucket order). A bucket that failed raises its error from finish_bucket,
// after every .grad was cleared (Note [Bucket errors]); buckets stepped
// before it stay stepped, so a failure can leave a step half-applied
// (overlap is not offered with fault_tolerant). Buckets can also go out in
// chunks that the first layers' chunks overtake: Note [Overlap chunks].
//
// Note [Overlap chunks]
// With a chunk size (OverlapChunks::chunk_mb > 0), an overlapped backward
// sends each bucket as several allreduces of at most chunk_mb each (flat
// slices of its buffer, in order), so that the buckets the next forward
// needs first are not queued behind whole buckets: a chunk not yet issued
// can be overtaken. Collectives match by order, and a backend runs them in
// the order they were issued, so the rule that issues chunks looks only at
// events whose sequence is the same on every rank, never at timing or
// completion: (1) a bucket released in bucket order (Note [Launch order];
// the held-back tail of Note [Overlapped step] is not released during
// backward) appends its chunks to a queue; after each release, chunks leave
// the queue's head while the bytes issued stay within issue_ratio times the
// bytes released so far (1: every chunk at once, as the plain order); the
// rule is applied per released bucket, so it does not matter how many
// buckets one rank happens to release in one call. (2) At the end of
// backward every chunk not yet issued goes out in the order the next
// forward needs it: bucket by bucket from the last bucket to the first
// (the first layers first, so the held-back tail leads and the backlog
// follows, its later buckets first), each bucket's chunks in order. The
// next forward's finish_bucket(b) waits for all of b's chunks. Chunks
// change only the order and the size of the collectives: every element is
// averaged by one allreduce of the same ranks' same values, so on a
// backend whose sum per element does not depend on where the element lies
// in the message (two ranks, or a rank-ordered sum) the result is bit for
// bit that of whole buckets; a ring allreduce at three or more ranks may
// add the ranks' values in another order (a difference in the last bits).
// A backward that takes the synchronous path (Note [Overlapped step]) sends
// whole buckets. last_chunk_launches() lists the chunks in issue order.
//
// Note [Gradient as bucket view]
// With gradient_as_bucket_view (the default) each .grad is a view into its
// bucket, so autograd accumulates straight into the bucket: with
// zero_grad(set_to_none = false) a step copies no gradient; with
// set_to_none = true each fresh gradient is copied in once (and .grad set
// to the view). Without it, .grad is a tensor of its own: copied into the
// bucket when ready and the average copied back after the communication
// (two copies per parameter and step). grad_copies() counts the copies.

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

// Note [Overlap chunks]: how an overlapped backward splits its buckets.
struct OverlapChunks {
  double chunk_mb = 0.0;     // >= 0; 0: whole buckets
  double issue_ratio = 1.0;  // in (0, 1]: bytes issued during backward per byte released
};

// One chunk as it was issued (Note [Overlap chunks]).
struct ChunkLaunch {
  int bucket = 0;       // the bucket's index (launch position)
  int chunk = 0;        // its position in the bucket
  int64_t offset = 0;   // elements of the bucket's buffer
  int64_t numel = 0;
  bool at_end = false;  // issued at the end of backward, in the next forward's order
  bool operator==(const ChunkLaunch&) const = default;
};

struct ReducerOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_cap_mb = 1.0;
  bool find_unused_parameters = false;
  bool rebuild_buckets = true;  // Note [Rebuilding buckets]
  // Note [Static graph]
  bool static_graph = false;
  // Note [Gradient as bucket view]
  bool gradient_as_bucket_view = true;
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

  // Note [Rebuilding buckets]: replaces the buckets with `assignment` (per
  // bucket, parameter indices; every trainable parameter exactly once; one
  // device and dtype per bucket), copying the current gradients into the new
  // buffers. Every rank must pass the same assignment; call it between
  // iterations (not while a backward runs). Raises ValueError for a bad one.
  void rebuild_buckets(const std::vector<std::vector<size_t>>& assignment);

  // ---- Note [Join] --------------------------------------------------------
  // A rank that ran out of inputs shadows one synchronised backward of the
  // others: every bucket goes out (in order, through the comm hook) with zero
  // gradients, and the used-flags allreduce with no flags set. Nothing is
  // written into this rank's .grad.
  void shadow_backward();
  // Shadows the bucket rebuild the other ranks do at this forward
  // (Note [Rebuilding buckets]; a collective).
  void shadow_rebuild();
  // Whether a synchronised backward ends with the used-flags allreduce.
  bool syncs_used_flags() const;
  bool rebuild_due() const { return rebuild_due_; }
  // Multiplies the averaged gradients of the next synchronised backwards
  // (join with divide_by_initial_world_size = false).
  void set_grad_scale(double scale) { grad_scale_ = scale; }
  // Launch the buckets at the end of backward instead of as they get ready,
  // so that the backward's collectives come in a fixed order (Note [Join]).
  void set_launch_at_end(bool on) { launch_at_end_ = on; }

  // ---- Note [Overlapped step] ------------------------------------------------
  // Between iterations. priority_buckets >= 1 (1: the plain launch order);
  // chunks: Note [Overlap chunks] (ValueError for a chunk_mb below 0 or an
  // issue_ratio outside (0, 1]).
  void set_overlap(bool on, int priority_buckets = 1, OverlapChunks chunks = {});
  static void check_overlap_chunks(const OverlapChunks& chunks, const char* who);
  const OverlapChunks& overlap_chunks() const { return chunks_; }
  int priority_buckets() const { return priority_buckets_; }
  bool overlap() const { return overlap_; }
  // Whether a synchronised backward left buckets to finish.
  bool overlap_pending() const { return overlap_pending_; }
  // Finishes bucket b of the last synchronised backward: waits for it and
  // makes its parameters' .grad the average. A no-op when nothing is
  // pending or b is finished. Raises the bucket's error (every .grad
  // cleared first).
  void finish_bucket(size_t b);
  void finish_all();
  // The bucket parameter i (an index into params) is in.
  size_t bucket_of(size_t i) const { return locate_.at(i).bucket; }
  const std::vector<size_t>& bucket_members(size_t b) const;

  // ---- introspection (tests, benchmarks) -----------------------------------
  size_t num_buckets() const { return buckets_.size(); }
  // Parameter indices of each bucket, in launch order.
  std::vector<std::vector<size_t>> bucket_assignment() const;
  const std::vector<BucketTiming>& last_timeline() const { return timeline_; }
  // Note [Overlap chunks]: the chunks of the last synchronised backward, in
  // the order they were issued; empty when its buckets went out whole.
  const std::vector<ChunkLaunch>& last_chunk_launches() const { return chunk_launches_; }
  bool buckets_rebuilt() const { return rebuilt_; }
  // Per parameter (index into params), the time since the start of the last
  // synchronised backward (its first hook) at which its gradient became ready;
  // -1 for a parameter that got no gradient (unused). Empty before the first
  // synchronised backward.
  std::vector<std::chrono::nanoseconds> last_grad_ready_times() const { return ready_times_; }
  // How many synchronised backwards finished (their buckets averaged).
  uint64_t synchronised_backwards() const { return synchronised_backwards_; }
  // How many gradient copies between .grad and the bucket buffers there were
  // (Note [Gradient as bucket view]); cumulative.
  uint64_t grad_copies() const { return grad_copies_; }
  // How many forwards traced their outputs for unused parameters.
  uint64_t graph_walks() const { return graph_walks_; }
  // Note [Static graph]: the parameters found unused in the first iteration.
  const std::vector<size_t>& static_unused() const { return static_unused_; }

 private:
  struct Bucket;
  void build_buckets(const std::vector<size_t>& order);
  void mark_ready(size_t param, bool from_hook);
  void launch_ready_buckets();
  void finalize_backward();
  std::vector<char> reduce_used_flags();
  void discard_gradients();
  Tensor control_tensor(const Tensor& host) const;
  void check_previous_iteration();
  void rebuild_from_rank0_order();
  std::vector<size_t> unready_params() const;
  bool wait_launched_quietly();  // true if a bucket failed
  void wait_launched_or_detach();
  void install_buckets(std::vector<std::vector<size_t>> assignment);
  void find_unused(const Tensors& outputs);
  void mark_unused_now();
  void copy_back_to_grads(const std::vector<char>& globally_used);
  void detach_failed_buffers();
  void launch_bucket(size_t b);
  size_t held_back() const;  // Note [Overlapped step]
  void launch_held_back();
  bool overlap_this_backward() const;
  void begin_overlap();
  void complete_overlap();
  void abandon_overlap(int failed_bucket);
  void copy_back_param(size_t i, bool globally_used);
  void plan_chunks(size_t b);  // Note [Overlap chunks]
  void release_chunks(size_t b);
  void issue_chunks_within_budget();
  void issue_chunk(size_t b, bool at_end);
  void issue_remaining_chunks();

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

  // ---- Note [Unused parameters]: found in forward, marked at the first hook ----
  std::vector<size_t> unused_pending_;
  std::vector<Tensor> saved_unused_grads_;  // by parameter: local .grad of an unused one
  // ---- Note [Static graph] ----
  bool static_known_ = false;
  std::vector<size_t> static_unused_;
  std::vector<char> static_global_used_;  // by parameter, from the first iteration
  // ---- introspection ----
  BucketTiming::Clock::time_point backward_start_;
  std::vector<BucketTiming::Clock::time_point> ready_at_;
  std::vector<std::chrono::nanoseconds> ready_times_;
  uint64_t grad_copies_ = 0;
  uint64_t synchronised_backwards_ = 0;
  uint64_t graph_walks_ = 0;
  double grad_scale_ = 1.0;
  bool launch_at_end_ = false;
  std::vector<Tensor> abandoned_;  // buffers a failed collective may still write
  // ---- Note [Overlapped step] ----
  bool overlap_ = false;
  int priority_buckets_ = 1;
  bool overlap_pending_ = false;
  size_t finished_buckets_ = 0;
  std::vector<char> overlap_used_;  // by parameter: globally used in that backward
  size_t launched_this_backward_ = 0;
  // ---- Note [Overlap chunks] ----
  OverlapChunks chunks_;
  bool chunked_ = false;             // this backward sends chunks
  std::vector<size_t> chunk_queue_;  // buckets whose chunks wait, in release order
  size_t chunk_queue_head_ = 0;
  uint64_t released_bytes_ = 0, issued_bytes_ = 0;
  std::vector<ChunkLaunch> chunk_launches_;
};

}  // namespace ddp::parallel
