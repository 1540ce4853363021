#pragma once
// data::DataLoader: batches of a dataset in sampler order, built by worker
// threads ahead of the consumer, optionally delivered on a GPU (torch's
// DataLoader with pin_memory and a non_blocking .to(device)).
//
// Usage:
//   auto sampler = std::make_shared<data::DistributedSampler>(train->size(), world, rank,
//                                                             /*shuffle=*/true, seed);
//   data::DataLoader loader(train, {.batch_size = 64, .num_workers = 1, .device = dev},
//                           sampler, augment);
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.set_epoch(epoch);                  // reshuffles and redraws augmentations
//     for (const data::Batch& b : loader) step(b.input, b.target);
//   }
//
// Note [Loader pipeline]
// One pass (an epoch) cuts the sampler's indices into batches numbered 0..n-1.
// Workers claim batch numbers in increasing order, read each example straight
// into its row of the batch buffer (Note [Reading into the batch]), run the
// transforms there, and park the finished batch by number; the consumer takes
// batch k only once it is parked, so batches come out in sampler order
// whatever the threads' timing, and with the per-example random streams
// (Note [Per-example random streams]) their content is the same for any
// number of workers. At most prefetch_factor * max(1, num_workers) batches
// are claimed but not yet consumed, which bounds memory. With num_workers = 0
// the consumer builds each batch itself. An exception in a worker is parked
// in place of its batch and rethrown, unchanged, by the next() that reaches
// it; the pass then ends. Destroying the loader, or starting a new pass, stops
// and joins the workers of the old one, which check a stop flag between
// examples, so neither waits for more than one example per worker.
//
// Note [Loader device copies]
// For a CUDA device the workers fill pinned (page-locked) host batches, and
// next() copies each to the GPU with a non-blocking copy on the loader's own
// copy stream, records an event there and makes the caller's current stream
// wait on it (cudaStreamWaitEvent), so the copy overlaps the kernels already
// queued and no host thread blocks. The device buffers are allocated on the
// copy stream and marked used by the compute stream (record_stream), so the
// caching allocator does not hand them to the next copy while a step still
// reads them; the pinned buffers return to their cache only after their copy
// has finished. Worker threads make the loader's device current before they
// allocate pinned buffers, so a rank on cuda:3 opens no context on cuda:0.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/core/device.h"
#include "ddp/data/dataset.h"
#include "ddp/data/sampler.h"
#include "ddp/data/transforms.h"

namespace ddp::data {

struct LoaderOptions {
  int64_t batch_size = 1;
  // Without a sampler: RandomSampler(seed) when true, else SequentialSampler.
  bool shuffle = false;
  // Drops a last batch smaller than batch_size (else it comes out short).
  bool drop_last = false;
  // Worker threads; 0 builds batches in the thread that calls next().
  int num_workers = 0;
  // Batches claimed ahead of the consumer per worker (at least 1 in total).
  int prefetch_factor = 2;
  // Seeds the transforms' random streams (and the default RandomSampler).
  uint64_t seed = 0;
  // Where batches are delivered. See Note [Loader device copies].
  Device device = Device::cpu();
  // Host batches in pinned memory; needs a usable GPU. Implied by a CUDA
  // device; for a CPU device it gives pinned batches the caller copies.
  bool pin_memory = false;
};

// What the loader has built so far (all passes): the examples and batches,
// and the seconds the workers (or the consumer, without workers) spent
// building them, summed over the threads. images / build_seconds is what one
// thread delivers per second; times max(1, num_workers), the loader's
// capacity, to set beside the rate a trainer consumes.
struct LoaderStats {
  int64_t batches = 0, examples = 0;
  double build_seconds = 0;
};

struct Batch {
  Tensor input;   // [B, ...input_shape]
  Tensor target;  // [B, ...target_shape] (i64 [B] for class labels); undefined without targets
  std::vector<int64_t> indices;  // the dataset indices of the rows
  int64_t size() const { return int64_t(indices.size()); }
};

// Range-for over one pass of a loader (DataLoader, DeviceDecodeLoader):
// made by the loader's begin(), which starts the pass; each ++ takes
// loader.next(), and the iterator without a batch is the end.
template <class Loader>
class BatchIterator {
 public:
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  BatchIterator() = default;
  explicit BatchIterator(Loader* loader) : loader_(loader) { ++*this; }
  const Batch& operator*() const { return *batch_; }
  const Batch* operator->() const { return &*batch_; }
  BatchIterator& operator++() {
    batch_ = loader_->next();
    return *this;
  }
  void operator++(int) { ++*this; }
  bool operator==(const BatchIterator& o) const { return !batch_ && !o.batch_; }

 private:
  Loader* loader_ = nullptr;
  std::optional<Batch> batch_;
};

class DataLoader {
 public:
  // ValueError for batch_size < 1, num_workers < 0, prefetch_factor < 1, a
  // sampler yielding indices outside the dataset (found when reading);
  // ShapeError when the transforms cannot take the dataset's inputs;
  // DeviceError when a CUDA device or pinned memory is asked for without a
  // usable GPU.
  DataLoader(DatasetPtr dataset, LoaderOptions opts, std::shared_ptr<Sampler> sampler = nullptr,
             std::vector<TransformPtr> transforms = {});
  ~DataLoader();  // stops and joins the workers; never throws
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Selects the epoch for the next pass: the sampler's order and the
  // transforms' random streams (Note [Epoch shuffling]).
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  // Batches per pass (len(loader)).
  int64_t size() const;
  // Input shape of a batch row after the transforms.
  const Shape& input_shape() const { return input_shape_; }
  const Dataset& dataset() const { return *dataset_; }
  Sampler& sampler() { return *sampler_; }
  const LoaderOptions& options() const { return opts_; }
  LoaderStats stats() const;

  // Starts a pass over the current epoch, ending any pass still running.
  void start();
  // The next batch of the pass, or nullopt at its end (also before start()).
  // Rethrows an exception raised while building the batch.
  std::optional<Batch> next();

  // Range-for: begin() calls start().
  using Iterator = BatchIterator<DataLoader>;
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  struct Pass;
  struct DeviceCopier;
  class BufferPool;
  // Batch k of the pass; an empty batch when *stop turns true on the way.
  Batch build(const Pass& pass, int64_t k, const std::atomic<bool>* stop) const;
  Batch to_device(Batch host);
  void stop_pass() noexcept;

  DatasetPtr dataset_;
  LoaderOptions opts_;
  std::shared_ptr<Sampler> sampler_;
  std::vector<TransformPtr> transforms_;
  std::vector<Shape> stage_shapes_;  // the input shape of each transform
  Shape input_shape_;
  int64_t epoch_ = 0;
  bool pinned_ = false;
  int pin_device_ = 0;  // the device whose context the workers' pinned buffers use
  std::unique_ptr<Pass> pass_;
  std::unique_ptr<DeviceCopier> copier_;
  std::shared_ptr<BufferPool> pool_;  // See Note [Batch buffer reuse]
  // LoaderStats, written by the threads that build batches.
  mutable std::atomic<int64_t> built_batches_{0}, built_examples_{0}, build_ns_{0};
};

}  // namespace ddp::data
