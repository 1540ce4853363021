#pragma once
// The error hierarchy and the check macros. See Note [Error messages].
//
// Note [Error messages]
// Every error libddp raises is a ddp::Error subclass whose message reads
//   "<what went wrong, naming the op, shapes, dtypes, devices> (file.cpp:123)"
// so a user can tell from the message alone which call was wrong and why.
// Misuse (bad shapes, dtypes, devices, arguments) has its own subclasses so
// callers can catch them apart from failures of CUDA, cuBLAS, NCCL or MPI.

// fmt 9 under nvcc: nvcc cannot evaluate fmt's consteval format-string
// checks, and fmt turns constexpr off for nvcc in a way gcc then rejects. So
// under nvcc the strings are checked at run time and constexpr stays on (host
// compilers still check them at compile time).
#if defined(__CUDACC__)
#ifndef FMT_CONSTEVAL
#define FMT_CONSTEVAL
#endif
#ifndef FMT_USE_CONSTEXPR
#define FMT_USE_CONSTEXPR 1
#endif
#endif
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace ddp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

#define DDP_DECLARE_ERROR(Name, Base)                              \
  class Name : public Base {                                       \
   public:                                                         \
    explicit Name(const std::string& msg) : Base(msg) {}           \
  };

// Misuse by the caller.
DDP_DECLARE_ERROR(ValueError, Error)   // a bad argument value
DDP_DECLARE_ERROR(ShapeError, ValueError)
DDP_DECLARE_ERROR(DTypeError, ValueError)
DDP_DECLARE_ERROR(DeviceError, ValueError)
DDP_DECLARE_ERROR(IndexError, ValueError)
DDP_DECLARE_ERROR(NotImplementedError, Error)
// Failures of the libraries underneath.
DDP_DECLARE_ERROR(CudaError, Error)
DDP_DECLARE_ERROR(OutOfMemoryError, CudaError)
DDP_DECLARE_ERROR(CublasError, Error)
DDP_DECLARE_ERROR(CudnnError, Error)
DDP_DECLARE_ERROR(NcclError, Error)
DDP_DECLARE_ERROR(MpiError, Error)
DDP_DECLARE_ERROR(GlooError, Error)
// A peer process of a collective was lost or unreachable (like torch's
// DistNetworkError); the message names the lost ranks where known.
DDP_DECLARE_ERROR(DistNetworkError, Error)
DDP_DECLARE_ERROR(IoError, Error)
DDP_DECLARE_ERROR(TimeoutError, Error)
#undef DDP_DECLARE_ERROR

namespace detail {
// Strips the directory so messages say "tensor.cpp:42".
constexpr const char* base_name(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/' || *p == '\\') base = p + 1;
  return base;
}
template <class E> [[noreturn]] void throw_error(const char* file, int line, const std::string& msg) {
  throw E(fmt::format("{} ({}:{})", msg, base_name(file), line));
}
}  // namespace detail

}  // namespace ddp

// DDP_THROW(ShapeError, "matmul: {} vs {}", a, b)
#define DDP_THROW(ErrorType, ...) \
  ::ddp::detail::throw_error<::ddp::ErrorType>(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

// DDP_CHECK(cond, "fmt", args...) raises ValueError when cond is false.
#define DDP_CHECK(cond, ...)                 \
  do {                                       \
    if (!(cond)) DDP_THROW(ValueError, __VA_ARGS__); \
  } while (0)

// DDP_CHECK_T(ShapeError, cond, "fmt", args...) raises the given type.
#define DDP_CHECK_T(ErrorType, cond, ...)     \
  do {                                        \
    if (!(cond)) DDP_THROW(ErrorType, __VA_ARGS__); \
  } while (0)
