#pragma once
// CUDA runtime services with no CUDA headers in sight, so user code that
// includes libddp needs no CUDA include path. In a build without CUDA, or on a
// machine without a usable GPU (no device, or an insufficient driver),
// is_available() is false, device_count() is 0 and everything else that
// needs a GPU raises DeviceError: "no device" means CPU only, never a crash.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp::cuda {

bool is_compiled();    // built with DDP_WITH_CUDA
bool is_available();   // compiled, and at least one usable device
int device_count();    // 0 when unavailable
// Why CUDA is unavailable ("built without CUDA", "cudaErrorInsufficientDriver: ..."), or "".
std::string unavailable_reason();
int current_device();
void set_device(int index);
void synchronize(int device = -1);  // -1: the current device
std::string device_name(int index);

// A CUDA stream handle (cudaStream_t under the hood). Stream() is the
// default (legacy) stream.
class Stream {
 public:
  Stream() = default;
  static Stream create(int device = -1, bool high_priority = false);  // owned by caller: destroy()
  void destroy();
  void synchronize() const;
  void* handle() const { return handle_; }
  int device() const { return device_; }
  bool operator==(const Stream& o) const { return handle_ == o.handle_ && device_ == o.device_; }

  Stream(void* handle, int device) : handle_(handle), device_(device) {}

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

// The stream that kernels on this thread and device are queued on.
Stream current_stream(int device = -1);
void set_current_stream(const Stream& s);
// RAII: sets the current stream for the scope, restores the previous one.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

// Events order work between streams without device-wide syncs.
class Event {
 public:
  Event();  // created lazily on first record
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  void record(const Stream& s);
  void wait(const Stream& s) const;  // s waits for this event (cudaStreamWaitEvent)
  bool query() const;                // completed?
  void synchronize() const;
  float elapsed_ms(const Event& end) const;  // needs timing-enabled events

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

// ---- caching allocator ---------------------------------------------------
struct MemoryStats {
  size_t allocated_bytes = 0;       // handed out to tensors now
  size_t reserved_bytes = 0;        // obtained from cudaMalloc and kept
  size_t peak_allocated_bytes = 0;
  size_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;          // allocate() calls served
  uint64_t num_cuda_mallocs = 0;    // of which needed a cudaMalloc
  uint64_t num_ooms = 0;
};
MemoryStats memory_stats(int device = -1);
void reset_peak_memory_stats(int device = -1);
std::string memory_summary(int device = -1);  // human-readable table
void empty_cache();  // returns unused cached blocks to the driver
// Marks that a block in use by `stream` may only be reused once the work now
// queued there has finished (like torch's record_stream). ptr must be the
// start of a block (Storage::data()), not a pointer into a view; otherwise
// ValueError.
void record_stream(void* ptr, const Stream& stream);

}  // namespace ddp::cuda
