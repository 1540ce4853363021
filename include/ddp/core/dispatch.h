#pragma once
// Runtime dtype -> compile-time type dispatch for kernels:
//
//   dispatch_all(t.dtype(), "relu", [&]<class T>() { relu_kernel<T>(...); });
//
// The op name goes into the DTypeError raised for an unsupported dtype.

#include "ddp/core/dtype.h"
#include "ddp/core/error.h"

namespace ddp {

template <class F> void dispatch_all(DType t, const char* op, F&& f) {
  switch (t) {
#define DDP_DISPATCH_CASE(name, type, str) \
  case DType::name: f.template operator()<type>(); return;
    DDP_FOR_EACH_DTYPE(DDP_DISPATCH_CASE)
#undef DDP_DISPATCH_CASE
  }
  DDP_THROW(DTypeError, "{}: unknown dtype {}", op, int(t));
}

// Floating types only (f32, f64, f16, bf16).
template <class F> void dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: f.template operator()<float>(); return;
    case DType::f64: f.template operator()<double>(); return;
    case DType::f16: f.template operator()<Half>(); return;
    case DType::bf16: f.template operator()<BFloat16>(); return;
    default: break;
  }
  DDP_THROW(DTypeError, "{}: expected a floating dtype (f32, f64, f16, bf16), got {}", op,
            dtype_name(t));
}

// Numeric types: everything except bool.
template <class F> void dispatch_numeric(DType t, const char* op, F&& f) {
  if (t == DType::bool_) DDP_THROW(DTypeError, "{}: bool tensors are not supported", op);
  dispatch_all(t, op, std::forward<F>(f));
}

// Index types (i32, i64).
template <class F> void dispatch_index(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::i32: f.template operator()<int32_t>(); return;
    case DType::i64: f.template operator()<int64_t>(); return;
    default: break;
  }
  DDP_THROW(DTypeError, "{}: expected an index dtype (i32 or i64), got {}", op, dtype_name(t));
}

}  // namespace ddp
