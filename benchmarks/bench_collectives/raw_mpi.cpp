// Built only when DDP_HAVE_MPI (benchmarks/bench_collectives/CMakeLists.txt).
#include "raw_mpi.h"

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <limits>

#include "ddp/core/error.h"

namespace bench {

using ddp::DType;
using ddp::Tensor;
using ddp::dist::ReduceOp;

namespace {

// As the mpi backend: elementwise operations go in chunks of at most this.
constexpr int64_t kMaxChunk = int64_t(1) << 30;

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
  DDP_THROW(MpiError, "bench_collectives raw baseline: {} failed: {}", call,
            std::string(buf, size_t(len)));
}

MPI_Datatype mpi_type(DType d) {
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
    default:
      return MPI_FLOAT;  // f16/bf16 travel as f32
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::product:
      return MPI_PROD;
  }
  return MPI_SUM;
}

bool half(DType d) { return d == DType::f16 || d == DType::bf16; }
std::byte* ptr(const Tensor& t) { return static_cast<std::byte*>(t.data_ptr()); }

}  // namespace

struct RawMpiBaseline::Impl {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};

RawMpiBaseline::RawMpiBaseline() : impl_(std::make_unique<Impl>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  DDP_CHECK_T(MpiError, initialized, "bench_collectives raw baseline: MPI is not initialised");
  check(MPI_Comm_dup(MPI_COMM_WORLD, &impl_->comm), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(impl_->comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(impl_->comm, &impl_->rank);
  MPI_Comm_size(impl_->comm, &impl_->size);
}

RawMpiBaseline::~RawMpiBaseline() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
}

std::string RawMpiBaseline::library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "MPI (unknown version)";
  std::string v(buf, size_t(len));
  return v.substr(0, std::min(v.find(','), v.find('\n')));
}

double RawMpiBaseline::time(Buffers& b, ReduceOp op, int root, int warmup, int iters) {
  MPI_Comm comm = impl_->comm;
  const int rank = impl_->rank, n = impl_->size;
  const int64_t chunk = b.count / n;
  const size_t esize = ddp::element_size(b.dtype);
  if ((b.coll == Collective::allgather || b.coll == Collective::all_to_all) &&
      chunk * int64_t(esize) > INT_MAX)
    return std::numeric_limits<double>::quiet_NaN();
  if (b.coll == Collective::reduce_scatter && chunk > INT_MAX)
    return std::numeric_limits<double>::quiet_NaN();

  // The f32 wire buffers of f16/bf16 reductions (see raw_mpi.h).
  const bool reduces = uses_reduce_op(b.coll);
  const DType wire = reduces && half(b.dtype) ? DType::f32 : b.dtype;
  Tensor in = wire == b.dtype ? b.in : Tensor::zeros(b.in.shape(), ddp::TensorOptions(wire));
  Tensor out = !b.out.defined() || wire == b.dtype
                   ? b.out
                   : Tensor::zeros(b.out.shape(), ddp::TensorOptions(wire));
  const MPI_Datatype type = mpi_type(wire);
  const MPI_Op mop = mpi_op(op);
  const size_t wsize = ddp::element_size(wire);

  auto once = [&] {
    switch (b.coll) {
      case Collective::allreduce:
      case Collective::reduce:
        for (int64_t off = 0; off < b.count; off += kMaxChunk) {
          int c = int(std::min(kMaxChunk, b.count - off));
          std::byte* p = ptr(in) + off * int64_t(wsize);
          if (b.coll == Collective::allreduce)
            check(MPI_Allreduce(MPI_IN_PLACE, p, c, type, mop, comm), "MPI_Allreduce");
          else if (rank == root)
            check(MPI_Reduce(MPI_IN_PLACE, p, c, type, mop, root, comm), "MPI_Reduce");
          else
            check(MPI_Reduce(p, nullptr, c, type, mop, root, comm), "MPI_Reduce");
        }
        break;
      case Collective::broadcast: {
        const int64_t nbytes = b.bytes();
        for (int64_t off = 0; off < nbytes; off += kMaxChunk)
          check(MPI_Bcast(ptr(in) + off, int(std::min(kMaxChunk, nbytes - off)), MPI_BYTE, root,
                          comm),
                "MPI_Bcast");
        break;
      }
      case Collective::allgather: {
        int c = int(chunk * int64_t(esize));
        if (c == 0) break;
        check(MPI_Allgather(ptr(in), c, MPI_BYTE, ptr(out), c, MPI_BYTE, comm), "MPI_Allgather");
        break;
      }
      case Collective::reduce_scatter:
        if (chunk == 0) break;
        check(MPI_Reduce_scatter_block(ptr(in), ptr(out), int(chunk), type, mop, comm),
              "MPI_Reduce_scatter_block");
        break;
      case Collective::all_to_all: {
        int c = int(chunk * int64_t(esize));
        if (c == 0) break;
        check(MPI_Alltoall(ptr(in), c, MPI_BYTE, ptr(out), c, MPI_BYTE, comm), "MPI_Alltoall");
        break;
      }
    }
  };

  for (int i = 0; i < warmup; ++i) once();
  check(MPI_Barrier(comm), "MPI_Barrier");
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) once();
  auto t1 = std::chrono::steady_clock::now();
  double t = std::chrono::duration<double>(t1 - t0).count() / iters;
  check(MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm), "MPI_Allreduce");
  return t;
}

}  // namespace bench
