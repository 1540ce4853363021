#pragma once
// The collectives of the host backends (mpi, gloo), written once.
//
// Note [Host collective sequence]
// Every collective of a host backend is the same sequence: stage the
// tensors (Note [Host staging]), queue a task on the group's worker (Note
// [One worker per group]), and there pack same-dtype tensors into one wire
// buffer (Note [Half precision on the wire]), call the library, divide for
// avg, unpack, and copy CUDA results back (unstage). HostProcessGroup
// (include/ddp/dist/host_process_group.h, host_process_group.cpp) runs that
// sequence for every collective; a backend derives from it and supplies only
// the library calls, as a HostTransport whose methods run on its worker and
// move raw host buffers. So staging, packing, aliasing and in-place rules
// live in one place.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "ddp/dist/process_group.h"

namespace ddp::dist::detail {

class HostTransport {
 public:
  virtual ~HostTransport() = default;
  virtual int transport_rank() const = 0;
  virtual int transport_size() const = 0;
  // Queues fn on the worker; its Work completes when fn returns (fn's
  // exception fails it). result: the tensors that hold the result.
  virtual WorkPtr submit(const char* op, Tensors result, std::function<void()> fn) = 0;
  // On the caller's thread, before staging: refuse a per-rank count (bytes
  // or elements, whatever the library counts) it cannot pass (MPI's ints).
  virtual void check_count(const char* op, int64_t count, const Tensor& t) {}

  // ---- on the worker; buffers are host memory ----------------------------
  // In place on n elements of a wire dtype (f32, f64, i32, i64, u8): an
  // allreduce when root < 0, else a reduce to root (non-root buffers are
  // then unspecified). avg arrives as sum; the caller divides.
  virtual void reduce(const char* op, DType wire, void* data, int64_t n, ReduceOp rop,
                      int root) = 0;
  virtual void broadcast(const char* op, void* data, size_t nbytes, int root) = 0;
  // Gathers nbytes from every rank into out (size * nbytes). in == nullptr:
  // this rank's contribution already sits in its slot of out.
  virtual void allgather(const char* op, const void* in, void* out, size_t nbytes) = 0;
  // in: size chunks of n wire elements; out: the reduction of chunk rank().
  // in_is_scratch: in is a private copy the transport may overwrite. in and
  // out never overlap.
  virtual void reduce_scatter(const char* op, DType wire, void* in, bool in_is_scratch, void* out,
                              int64_t n, ReduceOp rop) = 0;
  // Chunk r of in (chunk bytes each) goes to rank r; out's chunk r comes from
  // rank r. in == nullptr: in place on out.
  virtual void all_to_all(const char* op, const void* in, void* out, size_t chunk) = 0;
  virtual void barrier() = 0;
};

// The collectives themselves are HostProcessGroup's (host_process_group.h).

}  // namespace ddp::dist::detail
