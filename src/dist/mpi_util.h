#pragma once
// The mpi backend's small MPI helpers: error checks, MPI types and ops of
// libddp's dtypes and reduce ops, MPI's int counts. Included only by files
// built with MPI (process_group_mpi.cpp).

// The C API only: the MPI-2 C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <climits>
#include <cstdint>
#include <string>

#include "ddp/core/error.h"
#include "ddp/dist/process_group.h"

namespace ddp::dist::detail {

[[noreturn]] inline void throw_mpi(const char* file, int line, int rc, const char* op, int rank) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  // MPI_Error_string of an unknown code is itself an error, fatal on
  // MPI_COMM_WORLD's default handler.
  if (rc < 0 || rc > MPI_ERR_LASTCODE || MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
  ::ddp::detail::throw_error<MpiError>(file, line,
                                       fmt::format("{} (mpi rank {}): MPI error {}: {}", op, rank,
                                                   rc, std::string(buf, size_t(len))));
}

// Raises MpiError naming op and rank when an MPI call fails (the group's
// communicator has MPI_ERRORS_RETURN).
#define DDP_MPI_CALL(op, rank, call)                                             \
  do {                                                                           \
    int ddp_mpi_rc_ = (call);                                                    \
    if (ddp_mpi_rc_ != MPI_SUCCESS)                                              \
      ::ddp::dist::detail::throw_mpi(__FILE__, __LINE__, ddp_mpi_rc_, op, rank); \
  } while (0)

inline MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::f16:
    case DType::bf16:
      return MPI_FLOAT;  // Note [Half precision on the wire]
    default:
      break;
  }
  DDP_THROW(DTypeError, "mpi: no MPI type for {}", dtype_name(d));
}

inline MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;  // avg: sum, then divide by size
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::product:
      return MPI_PROD;
  }
  return MPI_SUM;
}

// MPI counts are int: elementwise ops are split into chunks of at most this.
inline constexpr int64_t kMaxChunk = int64_t(1) << 30;

// Per-rank byte counts of allgather, reduce_scatter, all_to_all and p2p are
// MPI ints.
inline void check_int_count(const char* op, int rank, int64_t count, const Tensor& t) {
  DDP_CHECK(count <= INT_MAX, "{} (mpi rank {}): {} is too large for one MPI message ({} > {})", op,
            rank, t.describe(), count, INT_MAX);
}

}  // namespace ddp::dist::detail
