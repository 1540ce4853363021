#pragma once
// Note [Kernel registry]
// Every op that is not elementwise finds its kernels in one registry keyed by
// (op, device type). An op's kernel is declared once, with its signature, in
// the one list kernels/kernel_list.h (DDP_DECLARE_KERNEL); each backend
// registers its implementation in its own file (DDP_REGISTER_KERNEL), next to
// the code it wraps: kernels/cpu/<op>.cpp for the CPU, kernels/cuda/<op>.cu or
// a library wrapper (kernels/cuda/<op>_cuda.cpp: cuDNN, cuBLASLt) for CUDA. A
// build without CUDA compiles no CUDA file, so it simply has no CUDA
// registrations: there are no stand-in files, and asking for a kernel a device
// lacks raises NotImplementedError naming the op and the device.
//
// The frontends (src/ops, src/nn/functional, src/optim, src/amp) check
// arguments, allocate outputs and record autograd, then call
// kernels::call<op>(device, args...). A registered kernel receives tensors on
// one device and makes that device current itself (CUDA registrations use
// OnDevice from kernels/cuda/on_device.h); it never validates user input.
//
// Slots are constant-initialised arrays of function pointers, filled by
// static registrars when libddp is loaded, so a lookup is one load and a
// null check, and registration order cannot matter.
//
// With DDP_CUDA_DEBUG_SYNC=1 every CUDA kernel call is followed by a device
// synchronisation and an error check that names the op (see after_kernel), so
// an asynchronous fault surfaces in the op that caused it.

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/core/device.h"

namespace ddp::kernels {

// Where a kernel op's registered functions live; Op is a tag made by
// DDP_DECLARE_KERNEL. Constant-initialised, so registrars may run in any order.
template <class Op>
struct KernelSlots {
  static inline constinit typename Op::Fn fns[kNumDeviceTypes] = {};
};

// One registration, for listing and for tests.
struct KernelEntry {
  std::string op;
  DeviceType device;
};
// Every (op, device) registered in this build, in registration order.
const std::vector<KernelEntry>& registered_kernels();

namespace detail {
[[noreturn]] void throw_missing_kernel(const char* op, DeviceType device);
void note_registration(const char* op, DeviceType device, bool duplicate);
// With DDP_CUDA_DEBUG_SYNC=1 and a CUDA device: synchronises it and raises
// CudaError naming `op` when the kernel faulted. Otherwise does nothing.
void after_kernel(const char* op, const Device& device);
}  // namespace detail
}  // namespace ddp::kernels

namespace ddp::detail {
// Whether DDP_CUDA_DEBUG_SYNC=1 (read once); DDP_CUDA_CHECK_LAUNCH uses it too.
bool cuda_debug_sync();
}  // namespace ddp::detail

namespace ddp::kernels {

template <class Op>
bool has_kernel(DeviceType device) {
  return KernelSlots<Op>::fns[int(device)] != nullptr;
}

template <class Op>
typename Op::Fn find_kernel(DeviceType device) {
  typename Op::Fn fn = KernelSlots<Op>::fns[int(device)];
  if (fn == nullptr) detail::throw_missing_kernel(Op::name, device);
  return fn;
}

// Runs Op's kernel for `device` with `args`.
template <class Op, class... Args>
decltype(auto) call(const Device& device, Args&&... args) {
  typename Op::Fn fn = find_kernel<Op>(device.type);
  if constexpr (std::is_void_v<std::invoke_result_t<typename Op::Fn, Args...>>) {
    fn(std::forward<Args>(args)...);
    detail::after_kernel(Op::name, device);
  } else {
    auto result = fn(std::forward<Args>(args)...);
    detail::after_kernel(Op::name, device);
    return result;
  }
}

template <class Op>
struct Registrar {
  Registrar(DeviceType device, typename Op::Fn fn) {
    detail::note_registration(Op::name, device, KernelSlots<Op>::fns[int(device)] != nullptr);
    KernelSlots<Op>::fns[int(device)] = fn;
  }
};

}  // namespace ddp::kernels

// DDP_DECLARE_KERNEL(name, return_type, (parameters)): the tag type
// ddp::kernels::name, whose Fn is a pointer to return_type(parameters).
// Used only in kernels/kernel_list.h.
#define DDP_DECLARE_KERNEL(name_, ret_, params_) \
  struct name_ {                                 \
    using Fn = ret_(*) params_;                  \
    static constexpr const char* name = #name_;  \
  };

#define DDP_KERNEL_CONCAT_(a, b) a##b
#define DDP_KERNEL_CONCAT(a, b) DDP_KERNEL_CONCAT_(a, b)

// DDP_REGISTER_KERNEL(name, CPU|CUDA, function): at namespace scope in the
// backend's own file. `function` may be a captureless lambda.
#define DDP_REGISTER_KERNEL(name_, device_, fn_)                                     \
  static const ::ddp::kernels::Registrar<::ddp::kernels::name_> DDP_KERNEL_CONCAT( \
      ddp_kernel_registrar_, __LINE__){::ddp::DeviceType::device_, fn_};
