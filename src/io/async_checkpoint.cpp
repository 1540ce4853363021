// Checkpoints written in the background (async_checkpoint.h, Note
// [Asynchronous checkpoints]).

#include "ddp/io/async_checkpoint.h"

#include <chrono>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/cuda.h"
#include "tensor/pinned_allocator.h"

namespace ddp::io {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Whether `buffer` can take a copy of t as it is: a host tensor of t's
// shape and dtype, contiguous (the logical order a checkpoint stores).
bool fits(const Tensor& buffer, const Tensor& t) {
  return buffer.defined() && buffer.shape() == t.shape() && buffer.dtype() == t.dtype() &&
         buffer.is_contiguous();
}

}  // namespace

// What the writer thread writes: a Checkpoint whose sections give the
// snapshot's tensors, and the generators' states as they were.
struct AsyncCheckpointer::Job {
  std::string dir;
  SaveOptions options;
  Checkpoint snapshot{false};
  std::vector<std::unique_ptr<Generator>> generators;
};

AsyncCheckpointer::AsyncCheckpointer() : thread_([this] { run(); }) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return job_ == nullptr; });
  stop_ = true;
  cv_.notify_all();
  lock.unlock();
  thread_.join();
  if (error_) {
    try {
      std::rethrow_exception(error_);
    } catch (const std::exception& e) {
      DDP_LOG_ERROR("AsyncCheckpointer: the last checkpoint write failed and nobody waited for it: {}",
                    e.what());
    }
  }
}

void AsyncCheckpointer::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || job_ != nullptr; });
    if (job_ == nullptr) return;  // stop_ with nothing to write
    Job& job = *job_;
    lock.unlock();
    const auto start = Clock::now();
    std::exception_ptr failed;
    try {
      save_checkpoint(job.dir, job.snapshot, job.options);
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    last_write_s_ = seconds_since(start);
    if (failed) error_ = failed;
    job_.reset();
    cv_.notify_all();
  }
}

void AsyncCheckpointer::wait_locked(std::unique_lock<std::mutex>& lock) {
  cv_.wait(lock, [this] { return job_ == nullptr; });
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void AsyncCheckpointer::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  wait_locked(lock);
}

bool AsyncCheckpointer::busy() const {
  std::lock_guard<std::mutex> lock(mu_);
  return job_ != nullptr;
}

double AsyncCheckpointer::last_stall_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_stall_s_;
}

double AsyncCheckpointer::last_write_s() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_write_s_;
}

// Note [Snapshot buffers]
// The host copies of one save are kept and filled again by the next (the
// previous write has finished by then, and the Job that referenced them is
// gone), so a run pays for the first snapshot's allocation and page faults
// once: on a fresh 195 MiB ResNet-50 snapshot those were most of its time. A
// tensor whose shape or dtype changed gets a new buffer. Device tensors go
// through pinned buffers with asynchronous copies; save() synchronises once
// after all of them.
Tensor AsyncCheckpointer::snapshot_of(const std::string& name, const Tensor& t,
                                      bool& device_copies) {
  if (!t.defined()) return t;
  Tensor& buffer = buffers_[name];
  if (!fits(buffer, t)) {
    if (t.device().is_cpu()) {
      buffer = Tensor::empty(t.shape(), TensorOptions(t.dtype()));
    } else {
      const size_t nbytes = size_t(t.numel()) * element_size(t.dtype());
      buffer = Tensor::from_storage(pinned_allocate(std::max<size_t>(nbytes, 1)), t.shape(),
                                    contiguous_strides(t.shape()), 0, t.dtype());
    }
  }
  const bool on_device = !t.device().is_cpu();
  buffer.copy_(t.detach(), /*non_blocking=*/on_device);
  device_copies = device_copies || on_device;
  return buffer;
}

void AsyncCheckpointer::save(const std::string& dir, const Checkpoint& checkpoint,
                             const SaveOptions& options) {
  const auto start = Clock::now();
  DDP_CHECK(options.rank >= 0, "AsyncCheckpointer.save: rank must be >= 0, got {}", options.rank);
  DDP_CHECK(options.epoch >= 0 && options.step >= 0,
            "AsyncCheckpointer.save: epoch and step must be >= 0, got epoch {} and step {}",
            options.epoch, options.step);
  DDP_CHECK(!dir.empty(), "AsyncCheckpointer.save: the directory name is empty");
  {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock);  // at most one write in flight; its error stops this save
  }
  const bool per_rank = checkpoint.has_per_rank_sections();
  if (options.rank != 0 && !per_rank) return;  // Note [Checkpoints under DDP]: nothing to write

  // The snapshot, on this thread (Note [Asynchronous checkpoints]).
  auto job = std::make_unique<Job>();
  job->dir = dir;
  job->options = options;
  bool device_copies = false;
  for (const Checkpoint::Section& s : checkpoint.sections()) {
    auto dict = std::make_shared<TensorDict>();
    if (options.rank == 0 || s.per_rank()) {
      TensorDict taken;
      try {
        taken = s.save();
      } catch (const Error& e) {
        DDP_THROW(Error, "AsyncCheckpointer.save '{}': section '{}' failed to give its state; "
                         "nothing was written: {}",
                  dir, s.name, e.what());
      }
      for (const auto& [key, t] : taken) dict->insert(key, snapshot_of(s.name + "/" + key, t, device_copies));
    }
    auto give = [dict] { return *dict; };
    auto never = [name = s.name](const auto&) {
      DDP_THROW(Error, "AsyncCheckpointer: the snapshot of section '{}' cannot be loaded", name);
    };
    if (s.per_rank())
      job->snapshot.add_per_rank(s.name, give, never, never);
    else
      job->snapshot.add(s.name, give, never);
  }
  if (device_copies) cuda::synchronize();
  for (const auto& [name, gen] : checkpoint.generators()) {
    job->generators.push_back(std::make_unique<Generator>(gen->seed()));
    job->generators.back()->set_state(gen->seed(), gen->offset());
    job->snapshot.add_generator(name, *job->generators.back());
  }

  std::lock_guard<std::mutex> lock(mu_);
  job_ = std::move(job);
  last_stall_s_ = seconds_since(start);
  cv_.notify_all();
}

}  // namespace ddp::io
