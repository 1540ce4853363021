#pragma once
// FlightRecorder: the last N collectives of a process group, always on.
//
// Note [Flight recorder]
// A hang or a mismatch between ranks is diagnosed from what each rank last
// issued, not from the collective that finally timed out. So every
// ProcessGroup records each collective as it is issued (in its non-virtual
// public methods, where every backend passes: Note [Collective argument
// checks]) into a fixed ring of slots: sequence number, op, dtype, element
// count, shapes, the tag of the calling thread (CollectiveTag below), and the
// enqueue/start/end times and state, which the collective's Work reports as
// it runs and completes. The slots are allocated once; recording reuses their
// buffers, so the steady state allocates nothing and costs well under a
// microsecond (benchmarks/bench_flight_recorder, docs/benchmarks.md).
//
// The ring is dumped as JSON by dump_json(), to a file by dump_to_file() (a
// timed-out Work and a failed gloo group do this themselves and name the file
// in their error), and for every live group on SIGUSR1
// (install_sigusr1_dump(); the handler only writes a byte to a pipe, a thread
// does the dump). Environment: DDP_FLIGHT_RECORDER_SIZE (entries per group,
// default 2000, 0 turns recording off), DDP_FLIGHT_RECORDER_DIR (where dumps
// go, default the temp directory). See docs/dist.md "Flight recorder".

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/tensor/tensor.h"

namespace ddp::dist {

// Labels the collectives the current thread issues while it lives, e.g.
//   dist::CollectiveTag tag("ddp bucket 3 of 7, iteration 41");
//   group.allreduce({bucket});   // recorded with that tag
// Scopes nest; the innermost wins, and the outer one is back when it ends.
class CollectiveTag {
 public:
  explicit CollectiveTag(std::string tag);
  ~CollectiveTag();
  CollectiveTag(const CollectiveTag&) = delete;
  CollectiveTag& operator=(const CollectiveTag&) = delete;
  // The current thread's innermost tag; empty when none.
  static const std::string& current();

 private:
  std::string tag_;
  const CollectiveTag* outer_;
};

enum class CollectiveState { queued, started, completed, failed, timed_out };
const char* collective_state_name(CollectiveState s);

// One recorded collective (a copy, as entries() returns them).
struct CollectiveRecord {
  uint64_t seq = 0;  // 1, 2, ... per group, in issue order
  std::string op;
  DType dtype = DType::f32;
  int64_t numel = 0;  // elements over all tensors of the call
  std::vector<Shape> shapes;
  std::string tag;
  std::chrono::system_clock::time_point enqueued{}, started{}, ended{};
  CollectiveState state = CollectiveState::queued;
  std::string error;  // first line of the error, when failed or timed out
};

class FlightRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 2000;
  // DDP_FLIGHT_RECORDER_SIZE: a non-negative integer; unset or empty: 2000.
  // ValueError naming the variable otherwise.
  static size_t capacity_from_env();
  // DDP_FLIGHT_RECORDER_DIR, or the temp directory (TMPDIR, else /tmp).
  static std::string dump_dir_from_env();

  // capacity 0: records nothing (every call returns at once).
  FlightRecorder(size_t capacity, int rank, int size, std::string backend);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  bool enabled() const { return !slots_.empty(); }
  // The backend named in dumps (ProcessGroup sets it once it is built).
  void set_backend(std::string backend);
  size_t capacity() const { return slots_.size(); }

  // Records a collective issued now with the current CollectiveTag; returns
  // its sequence number (0 when off). tensors may be empty (barrier).
  uint64_t record(const char* op, const Tensors& tensors);
  uint64_t record(const char* op, const Tensor& tensor);
  // Reported by the collective's Work. A seq already overwritten is ignored.
  void mark_started(uint64_t seq);
  void mark_finished(uint64_t seq, CollectiveState state, const std::string& error = {});

  // The entries still in the ring, oldest first.
  std::vector<CollectiveRecord> entries() const;
  uint64_t last_seq() const;
  // {"version":1,"rank":..,"size":..,"backend":..,"reason":..,"entries":[...]}
  std::string dump_json(const std::string& reason = "") const;
  // Writes dump_json(reason) to <dir>/ddp_flight_recorder_<backend>_rank<r>_<pid>_<n>.json
  // and returns the path; "" (and a logged warning) when it cannot be written
  // or recording is off. dir "": dump_dir_from_env().
  std::string dump_to_file(const std::string& reason, const std::string& dir = "") const;
  // "allreduce #42 (ddp bucket 8 of 9, iteration 3)": where this rank is, the
  // oldest collective not finished, else the last one ("... done, nothing
  // issued since"), else "no collective yet". For the desync report.
  std::string position() const;

 private:
  struct Slot {
    uint64_t seq = 0;
    const char* op = "";
    DType dtype = DType::f32;
    int64_t numel = 0;
    std::vector<int64_t> dims;      // every shape's sizes, concatenated
    std::vector<uint32_t> ranks;    // each shape's number of dims
    std::string tag;
    std::chrono::steady_clock::time_point enqueued{}, started{}, ended{};
    CollectiveState state = CollectiveState::queued;
    std::string error;
  };
  Slot* slot_of(uint64_t seq);  // under mu_; null when overwritten or unknown
  CollectiveRecord copy(const Slot& s) const;

  mutable std::mutex mu_;
  std::vector<Slot> slots_;
  uint64_t next_seq_ = 1;
  int rank_, size_;
  std::string backend_;
};

// Installs (once per process) a SIGUSR1 handler that makes every live
// recorder dump itself to DDP_FLIGHT_RECORDER_DIR. Only when SIGUSR1 still
// has its default action (an application's own handler is left alone).
// Called by every ProcessGroup's constructor.
void install_sigusr1_dump();

}  // namespace ddp::dist
