#pragma once
// The collectives bench_collectives measures: their buffers for one size, how
// to launch them through a ProcessGroup, the bus-bandwidth factor, and the
// check of their results.
//
// Note [Benchmark sizes]
// As in nccl-tests, the size of a row is the bytes of the largest buffer of
// the collective, and algbw = size / time:
//   allreduce, broadcast, reduce   the buffer itself (in place);
//   allgather                      the output (each rank contributes size/n);
//   reduce_scatter                 the input (each rank receives size/n);
//   all_to_all                     the input (size/n to each rank).
// For the last three the element count is rounded down to a multiple of the
// world size, so the printed size can be a little below the requested one.
// busbw = algbw * factor, where the factor makes busbw comparable to the
// hardware's link bandwidth (nccl-tests' PERFORMANCE.md): 2(n-1)/n for
// allreduce, (n-1)/n for allgather, reduce_scatter and all_to_all, 1 for
// broadcast and reduce.

#include <cstdint>
#include <optional>
#include <string>

#include "ddp/core/dtype.h"
#include "ddp/dist/process_group.h"
#include "ddp/tensor/tensor.h"

namespace bench {

enum class Collective { allreduce, broadcast, reduce, allgather, reduce_scatter, all_to_all };

const char* collective_name(Collective c);
// "allreduce", "all_reduce", "all-reduce", "AllReduce", ... (case, '_' and
// '-' are ignored); nullopt for an unknown name.
std::optional<Collective> collective_from_name(const std::string& name);
bool uses_reduce_op(Collective c);  // allreduce, reduce, reduce_scatter
bool uses_root(Collective c);       // broadcast, reduce
double bus_factor(Collective c, int world_size);

// The tensors of one row (Note [Benchmark sizes]); built once per size so that
// the timed loop only launches collectives.
struct Buffers {
  Collective coll = Collective::allreduce;
  ddp::DType dtype = ddp::DType::f32;
  int64_t count = 0;  // elements of the row's size
  // allreduce/broadcast/reduce: the in-place buffer. allgather: the input
  // (count / n). reduce_scatter, all_to_all: the input (count).
  ddp::Tensor in;
  // allgather: the output (count); reduce_scatter: the output (count / n);
  // all_to_all: the output (count). Undefined otherwise.
  ddp::Tensor out;
  ddp::Tensors in_chunks;   // reduce_scatter: in split into n views
  ddp::Tensors out_chunks;  // allgather: out split into n views

  int64_t bytes() const { return count * int64_t(ddp::element_size(dtype)); }
};

// Zero-filled buffers for `requested_count` elements (rounded down for the
// per-rank collectives, Note [Benchmark sizes]).
Buffers make_buffers(Collective c, ddp::DType dtype, int64_t requested_count, int world_size);

// Starts the collective on the buffers.
ddp::dist::WorkPtr launch(ddp::dist::ProcessGroup& pg, Buffers& b, ddp::dist::ReduceOp op,
                          int root);

// Fills the inputs with this rank's check pattern (small integers, so every
// sum and product is exact; products use 1s and 2s only).
void fill_check_pattern(Buffers& b, int rank, ddp::dist::ReduceOp op);
// After one launch on fill_check_pattern's data: how many of this rank's
// result elements differ from the serial computation (exact for integers and
// min/max/sum/prod of these values; within one rounding of the dtype for avg).
int64_t count_wrong(const Buffers& b, int rank, int world_size, ddp::dist::ReduceOp op, int root);

}  // namespace bench
