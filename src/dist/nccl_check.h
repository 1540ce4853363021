#pragma once
// The check macros for NCCL calls (internal: needs nccl.h, so only *_nccl.cpp
// files include it). DDP_NCCL_CHECK raises NcclError naming the operation and
// rank (the caller's context string), the call, NCCL's error name and string,
// NCCL's last error message, and file:line, following Note [Error messages].

#include <nccl.h>

#include <string>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::dist::detail {

inline const char* nccl_result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclResult?";
  }
}

// "ncclRemoteError: remote process exited or there was a network error
// (NCCL: <last error>)". comm may be null.
inline std::string nccl_error_text(ncclResult_t r, ncclComm_t comm) {
  std::string s = fmt::format("{}: {}", nccl_result_name(r), ncclGetErrorString(r));
  const char* last = ncclGetLastError(comm);
  if (last && *last) s += fmt::format(" (NCCL: {})", last);
  return s;
}

[[noreturn]] inline void throw_nccl(const char* file, int line, const std::string& context,
                                    const char* expr, ncclResult_t r, ncclComm_t comm) {
  ::ddp::detail::throw_error<NcclError>(
      file, line, fmt::format("{}: {} failed: {}", context, expr, nccl_error_text(r, comm)));
}

}  // namespace ddp::dist::detail

// DDP_NCCL_CHECK(context, comm, expr): context names the operation and rank
// ("allreduce #3 (nccl rank 0/2)"); comm (may be null) feeds ncclGetLastError.
// ncclInProgress is not an error: on a non-blocking communicator it means the
// call is still being processed, and the caller then polls
// ncclCommGetAsyncError (see Note [NCCL non-blocking communicators]).
#define DDP_NCCL_CHECK(context, comm, expr)                                                        \
  do {                                                                                             \
    ncclResult_t ddp_nccl_rc_ = (expr);                                                            \
    if (ddp_nccl_rc_ != ncclSuccess && ddp_nccl_rc_ != ncclInProgress)                             \
      ::ddp::dist::detail::throw_nccl(__FILE__, __LINE__, (context), #expr, ddp_nccl_rc_, (comm)); \
  } while (0)

// Logs instead of throwing: for destructors and the watchdog's clean-up.
#define DDP_NCCL_WARN(context, comm, expr)                                         \
  do {                                                                             \
    ncclResult_t ddp_nccl_rc_ = (expr);                                            \
    if (ddp_nccl_rc_ != ncclSuccess && ddp_nccl_rc_ != ncclInProgress)             \
      DDP_LOG_WARNING("{}: {} failed: {}", (context), #expr,                       \
                      ::ddp::dist::detail::nccl_error_text(ddp_nccl_rc_, (comm))); \
  } while (0)
