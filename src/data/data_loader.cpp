// DataLoader (data_loader.h). See Note [Loader pipeline] and Note [Loader
// device copies].

#include "ddp/data/data_loader.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "ddp/core/logging.h"
#include "ddp/tensor/cuda.h"
#include "tensor/pinned_allocator.h"

namespace ddp::data {

namespace {

struct Parked {
  Batch batch;
  std::exception_ptr error;
};

// Batches in a pass over n indices.
int64_t batch_count(int64_t n, int64_t batch_size, bool drop_last) {
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}

Shape with_batch(int64_t b, const Shape& s) {
  Shape out{b};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

}  // namespace

// Note [Batch buffer reuse]
// Batch buffers go back to a small pool when the last tensor using them dies,
// and the next batch of the same size takes one from there. A fresh buffer of
// an ImageNet-sized batch (64 x 3 x 224 x 224 f32 = 38 MB) comes from mmap
// and costs a page fault per 4 KiB on first touch, which made filling it
// several times slower than computing its pixels. The pool outlives the
// loader for as long as a batch does (the deleter holds a weak reference and
// frees the buffer itself once the pool is gone), and keeps at most
// max_free buffers, so memory stays bounded by the prefetch depth.
class DataLoader::BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  explicit BufferPool(size_t max_free) : max_free_(max_free) {}
  ~BufferPool() {
    for (auto [p, n] : free_) std::free(p);
  }

  Storage get(size_t nbytes) {
    {
      std::lock_guard<std::mutex> g(mu_);
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].second == nbytes) {
          void* p = free_[i].first;
          free_.erase(free_.begin() + ptrdiff_t(i));
          return wrap(p, nbytes);
        }
    }
    void* p = std::aligned_alloc(64, (std::max<size_t>(nbytes, 1) + 63) / 64 * 64);
    if (!p) DDP_THROW(Error, "DataLoader: cannot allocate a {}-byte batch buffer", nbytes);
    return wrap(p, nbytes);
  }

 private:
  Storage wrap(void* p, size_t nbytes) {
    std::weak_ptr<BufferPool> pool = weak_from_this();
    return Storage(p, nbytes, Device::cpu(), [pool, nbytes](void* q) {
      if (auto alive = pool.lock())
        alive->put(q, nbytes);
      else
        std::free(q);
    });
  }
  void put(void* p, size_t nbytes) {
    std::lock_guard<std::mutex> g(mu_);
    if (free_.size() < max_free_)
      free_.emplace_back(p, nbytes);
    else
      std::free(p);
  }

  std::mutex mu_;
  std::vector<std::pair<void*, size_t>> free_;
  size_t max_free_;
};

// One pass over an epoch. See Note [Loader pipeline].
struct DataLoader::Pass {
  std::vector<int64_t> indices;
  int64_t epoch = 0;
  int64_t num_batches = 0;
  int64_t capacity = 1;  // batches claimed but not yet consumed, at most

  std::mutex mu;
  std::condition_variable work_cv;          // workers: room to claim, or stop
  std::condition_variable done_cv;          // consumer: the next batch is parked
  int64_t next_claim = 0;                   // guarded by mu
  int64_t next_yield = 0;                   // guarded by mu
  std::vector<std::optional<Parked>> ring;  // batch b in ring[b % capacity]
  std::atomic<bool> stop{false};
  bool finished = false;  // consumer side only
  std::vector<std::thread> threads;
};

struct DataLoader::DeviceCopier {
  cuda::Stream stream;
  cuda::Event ready;
  ~DeviceCopier() {
    try {
      // Work still queued on the stream completes; the handle is released then.
      stream.destroy();
    } catch (const std::exception& e) {
      DDP_LOG_WARNING("DataLoader: destroying the copy stream failed: {}", e.what());
    }
  }
};

DataLoader::DataLoader(DatasetPtr dataset, LoaderOptions opts, std::shared_ptr<Sampler> sampler,
                       std::vector<TransformPtr> transforms)
    : dataset_(std::move(dataset)),
      opts_(opts),
      sampler_(std::move(sampler)),
      transforms_(std::move(transforms)) {
  DDP_CHECK(dataset_ != nullptr, "DataLoader: the dataset is null");
  DDP_CHECK(opts_.batch_size >= 1, "DataLoader: batch_size {} < 1", opts_.batch_size);
  DDP_CHECK(opts_.num_workers >= 0, "DataLoader: num_workers {} < 0", opts_.num_workers);
  DDP_CHECK(opts_.prefetch_factor >= 1, "DataLoader: prefetch_factor {} < 1",
            opts_.prefetch_factor);
  if (!sampler_) {
    if (opts_.shuffle)
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), opts_.seed);
    else
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  const ExampleSpec& spec = dataset_->spec();
  input_shape_ = spec.input_shape;
  if (!transforms_.empty()) {
    DDP_CHECK_T(DTypeError, spec.input_dtype == DType::f32,
                "DataLoader: transforms need f32 inputs, but {} gives {}", dataset_->describe(),
                spec.describe());
    for (const TransformPtr& t : transforms_) {
      DDP_CHECK(t != nullptr, "DataLoader: a transform is null");
      stage_shapes_.push_back(input_shape_);
      input_shape_ = t->output_shape(input_shape_);
    }
  }
  pinned_ = opts_.pin_memory || opts_.device.is_cuda();
  if (pinned_ && !cuda::is_available())
    DDP_THROW(DeviceError, "DataLoader: {} needs a usable GPU: {}",
              opts_.device.is_cuda() ? "device " + opts_.device.str() : std::string("pin_memory"),
              cuda::unavailable_reason());
  if (opts_.device.is_cuda())
    DDP_CHECK_T(DeviceError, opts_.device.index < cuda::device_count(),
                "DataLoader: device {} does not exist ({} GPUs)", opts_.device.str(),
                cuda::device_count());
  // Input and target buffers of every batch in flight, plus the one the
  // consumer holds and the one it just dropped. See Note [Batch buffer reuse].
  pool_ = std::make_shared<BufferPool>(
      2 * size_t(opts_.prefetch_factor * std::max(1, opts_.num_workers) + 2));
  if (pinned_) pin_device_ = opts_.device.is_cuda() ? opts_.device.index : cuda::current_device();
}

DataLoader::~DataLoader() { stop_pass(); }

void DataLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  sampler_->set_epoch(epoch);
}

int64_t DataLoader::size() const {
  return batch_count(sampler_->size(), opts_.batch_size, opts_.drop_last);
}

void DataLoader::stop_pass() noexcept {
  if (!pass_) return;
  {
    std::lock_guard<std::mutex> g(pass_->mu);
    pass_->stop.store(true);
  }
  pass_->work_cv.notify_all();
  for (std::thread& t : pass_->threads)
    if (t.joinable()) t.join();
  pass_.reset();
}

void DataLoader::start() {
  stop_pass();
  auto p = std::make_unique<Pass>();
  p->indices = sampler_->indices();
  p->epoch = epoch_;
  p->num_batches = batch_count(int64_t(p->indices.size()), opts_.batch_size, opts_.drop_last);
  p->capacity = int64_t(opts_.prefetch_factor) * std::max(1, opts_.num_workers);
  p->ring.resize(size_t(p->capacity));
  pass_ = std::move(p);
  Pass* pass = pass_.get();
  for (int w = 0; w < opts_.num_workers; ++w) {
    pass->threads.emplace_back([this, pass] {
      // Pinned buffers are allocated in the CUDA context of the thread's
      // current device: make it the loader's, so that a rank using cuda:3
      // does not also open a context (and its memory) on cuda:0.
      if (pinned_) {
        try {
          cuda::set_device(pin_device_);
        } catch (const std::exception& e) {
          DDP_LOG_WARNING("DataLoader worker: cannot select cuda:{}: {}", pin_device_, e.what());
        }
      }
      for (;;) {
        int64_t k;
        {
          std::unique_lock<std::mutex> lk(pass->mu);
          pass->work_cv.wait(lk, [&] {
            return pass->stop.load() || pass->next_claim >= pass->num_batches ||
                   pass->next_claim < pass->next_yield + pass->capacity;
          });
          if (pass->stop.load() || pass->next_claim >= pass->num_batches) return;
          k = pass->next_claim++;
        }
        Parked r;
        try {
          r.batch = build(*pass, k, &pass->stop);
        } catch (...) {
          r.error = std::current_exception();
        }
        {
          std::lock_guard<std::mutex> g(pass->mu);
          pass->ring[size_t(k % pass->capacity)] = std::move(r);
        }
        pass->done_cv.notify_all();
      }
    });
  }
}

std::optional<Batch> DataLoader::next() {
  Pass* p = pass_.get();
  if (!p || p->finished) return std::nullopt;
  Batch batch;
  if (opts_.num_workers == 0) {
    const int64_t k = p->next_yield;
    if (k >= p->num_batches) {
      p->finished = true;
      return std::nullopt;
    }
    try {
      batch = build(*p, k, nullptr);
    } catch (...) {
      p->finished = true;
      throw;
    }
    ++p->next_yield;
  } else {
    Parked r;
    {
      std::unique_lock<std::mutex> lk(p->mu);
      if (p->next_yield >= p->num_batches) {
        p->finished = true;
        return std::nullopt;
      }
      auto& slot = p->ring[size_t(p->next_yield % p->capacity)];
      p->done_cv.wait(lk, [&] { return slot.has_value(); });
      r = std::move(*slot);
      slot.reset();
      ++p->next_yield;
    }
    p->work_cv.notify_all();  // room for one more claim
    if (r.error) {
      stop_pass();  // the pass ends at the failed batch
      std::rethrow_exception(r.error);
    }
    batch = std::move(r.batch);
  }
  if (opts_.device.is_cuda()) return to_device(std::move(batch));
  return batch;
}

LoaderStats DataLoader::stats() const {
  return {built_batches_.load(), built_examples_.load(), double(build_ns_.load()) * 1e-9};
}

Batch DataLoader::build(const Pass& pass, int64_t k, const std::atomic<bool>* stop) const {
  const auto started = std::chrono::steady_clock::now();
  const std::vector<int64_t>& indices = pass.indices;
  const int64_t first = k * opts_.batch_size;
  const int64_t count = std::min<int64_t>(opts_.batch_size, int64_t(indices.size()) - first);
  const ExampleSpec& spec = dataset_->spec();
  const Shape in_shape = with_batch(count, input_shape_);
  auto alloc = [&](const Shape& shape, DType dtype) {
    // Pinned buffers have their own cache (Note [Pinned staging buffers]).
    const size_t nbytes = size_t(shape_numel(shape)) * element_size(dtype);
    Storage storage = pinned_ ? pinned_allocate(std::max<size_t>(nbytes, 1)) : pool_->get(nbytes);
    return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
  };
  Batch b;
  b.indices.assign(indices.begin() + first, indices.begin() + first + count);
  b.input = alloc(in_shape, spec.input_dtype);
  if (spec.has_target) b.target = alloc(with_batch(count, spec.target_shape), spec.target_dtype);
  auto* in = static_cast<std::byte*>(b.input.data_ptr());
  auto* tg = spec.has_target ? static_cast<std::byte*>(b.target.data_ptr()) : nullptr;
  const size_t row = size_t(shape_numel(input_shape_)) * element_size(spec.input_dtype);
  const size_t trow = spec.target_bytes();

  // Transforms ping-pong between two scratch rows and write the last stage
  // straight into the batch (Note [Reading into the batch]).
  std::vector<float> scratch[2];
  if (!transforms_.empty()) {
    size_t most = size_t(shape_numel(spec.input_shape));
    for (const Shape& s : stage_shapes_) most = std::max(most, size_t(shape_numel(s)));
    scratch[0].resize(most);
    scratch[1].resize(most);
  }
  for (int64_t k = 0; k < count; ++k) {
    if (stop && stop->load(std::memory_order_relaxed)) return {};
    const int64_t index = b.indices[size_t(k)];
    void* dst = in + size_t(k) * row;
    void* tdst = tg ? tg + size_t(k) * trow : nullptr;
    SampleRng rng(opts_.seed, pass.epoch, index);
    if (transforms_.empty()) {
      dataset_->read(index, dst, tdst, rng);
      continue;
    }
    dataset_->read(index, scratch[0].data(), tdst, rng);
    const float* src = scratch[0].data();
    for (size_t t = 0; t < transforms_.size(); ++t) {
      float* out =
          t + 1 == transforms_.size() ? static_cast<float*>(dst) : scratch[(t + 1) % 2].data();
      transforms_[t]->apply(src, stage_shapes_[t], out, rng);
      src = out;
    }
  }
  built_batches_.fetch_add(1, std::memory_order_relaxed);
  built_examples_.fetch_add(count, std::memory_order_relaxed);
  build_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - started)
                          .count(),
                      std::memory_order_relaxed);
  return b;
}

Batch DataLoader::to_device(Batch host) {
  const Device dev = opts_.device;
  if (!copier_) {
    copier_ = std::make_unique<DeviceCopier>();
    copier_->stream = cuda::Stream::create(dev.index);
  }
  const cuda::Stream compute = cuda::current_stream(dev.index);
  Batch out;
  out.indices = std::move(host.indices);
  {
    // Allocated and copied on the copy stream. See Note [Loader device copies].
    cuda::StreamGuard guard(copier_->stream);
    out.input = host.input.to(dev, /*non_blocking=*/true);
    if (host.target.defined()) out.target = host.target.to(dev, /*non_blocking=*/true);
  }
  copier_->ready.record(copier_->stream);
  copier_->ready.wait(compute);
  cuda::record_stream(out.input.storage().data(), compute);
  if (out.target.defined()) cuda::record_stream(out.target.storage().data(), compute);
  return out;
}

DataLoader::Iterator DataLoader::begin() {
  start();
  return Iterator(this);
}

}  // namespace ddp::data
