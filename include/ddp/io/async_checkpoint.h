#pragma once
// Checkpoints written in the background: training waits only for a copy of
// its state in host memory, not for the files.
//
//   io::AsyncCheckpointer saver;
//   ...
//   if (step % every == 0) saver.save(dir, ckpt, {.step = step});  // returns after the snapshot
//   ...
//   saver.wait();   // before exiting (the destructor waits too)
//
// Note [Asynchronous checkpoints]
// save() does two things. On the caller's thread, at the step boundary where
// it is called, it takes the snapshot: every section's state_dict() copied
// into host memory that nothing else references (device tensors through
// pinned buffers, one synchronisation for all of them), and the generator
// states. Then a background thread writes that snapshot exactly as
// save_checkpoint() writes a checkpoint (Note [Atomic checkpoints]: new
// files under the next generation's names, fsync'd, the manifest renamed
// over the old one), so a crash or a kill in the middle of a write leaves
// the previous checkpoint whole and loadable. At most one write is in
// flight: a save() while one is still writing first waits for it. The
// training may change the model, the optimizer and the generators as soon
// as save() returns.
//
// A write's error (a full disk, a rank that failed its part) is raised by
// the next save() or wait() on the thread that calls them, once; the
// destructor waits for the write and logs an error it cannot raise.
//
// With per-rank sections (Note [Per-rank checkpoint sections]) every rank
// calls save() at the same step, and the ranks' three rounds of agreement
// run on the writer threads, concurrently with training. So the exchange
// must not share a communicator with the training's collectives (two
// threads issuing collectives on one process group would interleave them
// differently on different ranks): use parallel::checkpoint_store_exchange,
// which goes through the job's store.

#include <condition_variable>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ddp/io/checkpoint.h"

namespace ddp::io {

class AsyncCheckpointer {
 public:
  AsyncCheckpointer();
  ~AsyncCheckpointer();  // waits for the write in flight
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Takes the snapshot of `checkpoint` now and writes it into `dir` in the
  // background, with save_checkpoint's options and checks (ValueError for
  // bad options, before anything is taken). Waits first for the previous
  // write and raises its error if it failed (this save then does not
  // happen). A section that throws while its state is taken stops this
  // save before anything is written.
  void save(const std::string& dir, const Checkpoint& checkpoint, const SaveOptions& options);

  // Waits for the write in flight (if any) and raises its error, once.
  void wait();

  // Whether a write is in flight.
  bool busy() const;

  // Seconds the last save() spent on the caller's thread (the training
  // stall: waiting for the previous write plus the snapshot), and the last
  // completed write's seconds on the writer thread.
  double last_stall_s() const;
  double last_write_s() const;

 private:
  struct Job;
  void run();
  void wait_locked(std::unique_lock<std::mutex>& lock);
  Tensor snapshot_of(const std::string& name, const Tensor& t, bool& device_copies);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<Job> job_;      // the write handed to the thread, until it is done
  std::exception_ptr error_;      // the last write's failure, until raised
  bool stop_ = false;
  double last_stall_s_ = 0, last_write_s_ = 0;
  std::map<std::string, Tensor> buffers_;  // Note [Snapshot buffers] (the saving thread's)
  std::thread thread_;            // last: started after the members above
};

}  // namespace ddp::io
