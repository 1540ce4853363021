#pragma once
// Argument checks shared by the nn functional ops (internal): each raises the
// ddp::Error subclass that fits, naming the op, the argument and the tensor.

#include "ddp/core/error.h"
#include "ddp/tensor/tensor.h"

namespace ddp::nn::functional::detail {

inline void check_defined(const char* op, const Tensor& t, const char* arg) {
  DDP_CHECK(t.defined(), "{}: {} is undefined", op, arg);
}

// Defined and of a floating dtype.
inline void check_floating(const char* op, const Tensor& t, const char* arg) {
  check_defined(op, t, arg);
  DDP_CHECK_T(DTypeError, is_floating(t.dtype()),
              "{}: {} must be floating (f32, f64, f16, bf16), got {}", op, arg, t.describe());
}

// `t` (when defined) has x's dtype and device.
inline void check_like(const char* op, const Tensor& t, const char* arg, const Tensor& x) {
  if (!t.defined()) return;
  DDP_CHECK_T(DTypeError, t.dtype() == x.dtype(), "{}: {} is {} but the input is {}", op, arg,
              t.describe(), x.describe());
  DDP_CHECK_T(DeviceError, t.device() == x.device(), "{}: {} is {} but the input is {}", op, arg,
              t.describe(), x.describe());
}

}  // namespace ddp::nn::functional::detail
