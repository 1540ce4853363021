#pragma once
// Note [Loading CUDA when first used]
// A CUDA build of libddp is two libraries: libddp.so, which needs no CUDA
// library, and libddp_cuda.so beside it, which holds every CUDA kernel and
// library wrapper (files named *_cuda.cpp, kernels/cuda/*.cu, *_nccl.cpp,
// *_nvjpeg.cpp; Note [Source file names]) and links cudart, cuBLAS/cuBLASLt,
// cuDNN, NVRTC and NCCL. Those libraries cost a process about 200 MiB of
// resident memory as soon as they are mapped (their relocations and static
// initialisers touch their pages), which a CPU run of a CUDA build should not
// pay. So libddp.so reaches CUDA only through the CudaRuntime interface
// below, and opens libddp_cuda.so (dlopen, from the directory libddp.so was
// loaded from) the first time something needs it:
//  - cuda::is_available(), device_count(), unavailable_reason() first look
//    for the NVIDIA driver (libcuda.so.1) without opening anything else: no
//    driver, no GPU, and nothing is loaded. With a driver, libddp_cuda.so is
//    opened and cudart decides, as before (Note [CUDA availability]).
//  - Everything that needs a GPU (a CUDA tensor, a stream, an event) goes
//    through cuda_runtime(), which is the loaded library's runtime when the
//    driver is there and a stand-in otherwise that raises DeviceError with
//    the reason, exactly as a build without CUDA does.
//  - Registries that list what the build has (the kernel registry's
//    listing, the process-group backends when a name is not found) and the
//    runtime versions open the library without asking for a driver
//    (open_cuda_library, cuda_library_symbol in src/core/cuda_library.h): a
//    listing is a diagnostic, and nccl must be found by name to say why it
//    cannot run here.
// libddp_cuda.so hands its runtime over through one extern "C" function,
// ddp_cuda_runtime (src/tensor/runtime_cuda.cpp), and likewise the nvJPEG
// decoder and the runtime versions. As it opens, its static initialisers
// register its kernels, its Backend and the nccl process-group backend. It
// must not define any function libddp.so defines: its own calls to
// ddp::cuda::current_stream() and the like reach libddp.so's, which forward
// here. A program may also link libddp_cuda.so itself (the white-box tests
// do); opening it again then finds the copy already loaded.

#include <cstddef>
#include <string>

#include "ddp/tensor/cuda.h"
#include "ddp/tensor/storage.h"

namespace ddp::detail {

// What libddp.so asks of CUDA. Events and streams are passed as their raw
// handles; an event handle is non-null only once the loaded runtime
// recorded it, so calls on a null one never reach the runtime.
class CudaRuntime {
 public:
  virtual ~CudaRuntime() = default;

  // ddp/tensor/cuda.h
  virtual bool is_available() = 0;
  virtual int device_count() = 0;
  virtual std::string unavailable_reason() = 0;
  virtual int current_device() = 0;
  virtual void set_device(int index) = 0;
  virtual void synchronize(int device) = 0;
  virtual std::string device_name(int index) = 0;
  virtual cuda::Stream create_stream(int device, bool high_priority) = 0;
  virtual void destroy_stream(const cuda::Stream& stream) = 0;
  virtual void synchronize_stream(const cuda::Stream& stream) = 0;
  virtual cuda::Stream current_stream(int device) = 0;
  virtual void set_current_stream(const cuda::Stream& stream) = 0;
  virtual void restore_current_stream(const cuda::Stream& stream) noexcept = 0;  // StreamGuard
  virtual void destroy_event(void* event) noexcept = 0;
  // Records on `stream`, creating the event (or re-creating it on the
  // stream's device) and updating `event` and `device`.
  virtual void record_event(void*& event, int& device, const cuda::Stream& stream) = 0;
  virtual void wait_event(void* event, const cuda::Stream& stream) = 0;
  virtual bool query_event(void* event) = 0;
  virtual void synchronize_event(void* event, int device) = 0;
  virtual float elapsed_ms(void* start, void* end) = 0;
  virtual cuda::MemoryStats memory_stats(int device) = 0;
  virtual void reset_peak_memory_stats(int device) = 0;
  virtual std::string memory_summary(int device) = 0;
  virtual void empty_cache() = 0;
  virtual void record_stream(void* ptr, const cuda::Stream& stream) = 0;

  // tensor/pinned_allocator.h
  virtual Storage pinned_allocate(size_t nbytes) = 0;
};

// The runtime of this process: libddp_cuda.so's when the driver is present
// and the library opened, else a stand-in that names why not. Decided once.
CudaRuntime& cuda_runtime();

}  // namespace ddp::detail
