// ddp/tensor/cuda.h as libddp.so provides it: every call goes to the CUDA
// runtime of libddp_cuda.so, opened on first use, or to a stand-in that
// answers "no device" and raises DeviceError for anything that needs one
// (Note [Loading CUDA when first used] in src/tensor/cuda_runtime.h).

#include "tensor/cuda_runtime.h"

#include "core/cuda_library.h"
#include "ddp/config.h"
#include "ddp/core/error.h"
#include "tensor/pinned_allocator.h"

namespace ddp {

namespace detail {

namespace {

// No usable CUDA: no driver, libddp_cuda.so missing, or a build without
// CUDA. What needs a GPU raises DeviceError naming the reason; what does
// not (an event never recorded, emptying a cache that holds nothing)
// succeeds, as on a CUDA machine.
class Unavailable final : public CudaRuntime {
 public:
  explicit Unavailable(std::string reason) : reason_(std::move(reason)) {}

  bool is_available() override { return false; }
  int device_count() override { return 0; }
  std::string unavailable_reason() override { return reason_; }
  int current_device() override { none("current_device"); }
  void set_device(int) override { none("set_device"); }
  void synchronize(int) override { none("synchronize"); }
  std::string device_name(int) override { none("device_name"); }
  cuda::Stream create_stream(int, bool) override { none("Stream::create"); }
  void destroy_stream(const cuda::Stream&) override {}  // only the default stream exists
  void synchronize_stream(const cuda::Stream&) override { none("Stream::synchronize"); }
  cuda::Stream current_stream(int) override { none("current_stream"); }
  void set_current_stream(const cuda::Stream&) override { none("set_current_stream"); }
  void restore_current_stream(const cuda::Stream&) noexcept override {}
  void destroy_event(void*) noexcept override {}
  void record_event(void*&, int&, const cuda::Stream&) override { none("Event::record"); }
  void wait_event(void*, const cuda::Stream&) override {}
  bool query_event(void*) override { return true; }
  void synchronize_event(void*, int) override {}
  float elapsed_ms(void*, void*) override { none("Event::elapsed_ms"); }
  cuda::MemoryStats memory_stats(int) override { none("memory_stats"); }
  void reset_peak_memory_stats(int) override { none("reset_peak_memory_stats"); }
  std::string memory_summary(int) override { none("memory_summary"); }
  void empty_cache() override {}  // nothing is ever cached
  void record_stream(void*, const cuda::Stream&) override { none("record_stream"); }
  Storage pinned_allocate(size_t nbytes) override {
    if (nbytes == 0) return Storage(nullptr, 0, Device::cpu(), {});
    none("pinned_allocate");
  }

 private:
  [[noreturn]] void none(const char* what) const {
    DDP_THROW(DeviceError, "{}: no usable CUDA device: {}", what, reason_);
  }
  std::string reason_;
};

CudaRuntime* find_runtime() {
  std::string why;
  if (!cuda_driver_present(&why)) return new Unavailable(why);
  using Get = CudaRuntime* (*)();
  auto get = reinterpret_cast<Get>(cuda_library_symbol("ddp_cuda_runtime", &why));
  if (!get) return new Unavailable(why);
  return get();
}

}  // namespace

CudaRuntime& cuda_runtime() {
  static CudaRuntime* const runtime = find_runtime();  // never freed: used until exit
  return *runtime;
}

}  // namespace detail

Storage pinned_allocate(size_t nbytes) { return detail::cuda_runtime().pinned_allocate(nbytes); }

namespace cuda {

namespace {
detail::CudaRuntime& rt() { return detail::cuda_runtime(); }
}  // namespace

bool is_compiled() { return DDP_HAVE_CUDA; }
bool is_available() { return rt().is_available(); }
int device_count() { return rt().device_count(); }
std::string unavailable_reason() { return rt().unavailable_reason(); }
int current_device() { return rt().current_device(); }
void set_device(int index) { rt().set_device(index); }
void synchronize(int device) { rt().synchronize(device); }
std::string device_name(int index) { return rt().device_name(index); }

Stream Stream::create(int device, bool high_priority) {
  return rt().create_stream(device, high_priority);
}
void Stream::destroy() {
  if (!handle_) return;  // the default stream is never destroyed
  rt().destroy_stream(*this);
  handle_ = nullptr;
}
void Stream::synchronize() const { rt().synchronize_stream(*this); }
Stream current_stream(int device) { return rt().current_stream(device); }
void set_current_stream(const Stream& s) { rt().set_current_stream(s); }
StreamGuard::StreamGuard(const Stream& s) : prev_(current_stream(s.device())) {
  set_current_stream(s);
}
StreamGuard::~StreamGuard() { rt().restore_current_stream(prev_); }

// An event is created by its first record(), so one never recorded needs no
// runtime: it is complete, and waiting on it is a no-op.
Event::Event() = default;
Event::~Event() {
  if (handle_) rt().destroy_event(handle_);
}
Event::Event(Event&& o) noexcept : handle_(o.handle_), device_(o.device_) { o.handle_ = nullptr; }
Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (handle_) rt().destroy_event(handle_);
    handle_ = o.handle_;
    device_ = o.device_;
    o.handle_ = nullptr;
  }
  return *this;
}
void Event::record(const Stream& s) { rt().record_event(handle_, device_, s); }
void Event::wait(const Stream& s) const {
  if (handle_) rt().wait_event(handle_, s);
}
bool Event::query() const { return !handle_ || rt().query_event(handle_); }
void Event::synchronize() const {
  if (handle_) rt().synchronize_event(handle_, device_);
}
float Event::elapsed_ms(const Event& end) const { return rt().elapsed_ms(handle_, end.handle_); }

MemoryStats memory_stats(int device) { return rt().memory_stats(device); }
void reset_peak_memory_stats(int device) { rt().reset_peak_memory_stats(device); }
std::string memory_summary(int device) { return rt().memory_summary(device); }
void empty_cache() { rt().empty_cache(); }
void record_stream(void* ptr, const Stream& stream) { rt().record_stream(ptr, stream); }

}  // namespace cuda
}  // namespace ddp
