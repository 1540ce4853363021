#pragma once
// Splitting a CPU loop over the OpenMP runtime's threads (internal).
//
// Note [CPU parallel loops]
// oneDNN's convolutions run on the OpenMP runtime's team, but libddp's own
// element-wise and pooling kernels used to run on the calling thread only:
// with 2 threads, a resnet50 step (batch 8, 224x224) spent about a sixth
// of its wall time in those serial kernels while the second OpenMP thread
// spun idle (perf, docs/benchmarks.md "Profile"). parallel_for() hands a
// loop to the same team: libddp does not link OpenMP (Note [CPU threads]),
// so it looks up libgomp's entry point GOMP_parallel, which the GNU and
// LLVM runtimes both export, and runs the loop on the caller when no
// runtime is loaded, when only one thread is allowed (set_num_threads(1):
// one thread per rank in the multi-rank trainers, so no oversubscription),
// when it is already inside a parallel region, or when the range is too
// small to pay for waking the team (fewer than 2 * grain items), or when
// the environment sets DDP_CPU_PARALLEL_KERNELS=0 (oneDNN keeps its threads;
// for machines so oversubscribed that waiting for a second thread costs
// more than it saves, docs/benchmarks.md "Profile").
// Each thread gets one contiguous chunk, so kernels whose items are
// independent (every output element written by exactly one item) give
// bit-identical results for any thread count. An exception thrown by fn on
// any thread is rethrown on the caller after the team has finished.

#include <cstdint>
#include <functional>

namespace ddp {

// Calls fn(begin, end) on disjoint chunks that cover [0, n) exactly once.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

// How many threads parallel_for would use for n items with this grain (1
// when it would run on the caller).
int parallel_threads(int64_t n, int64_t grain);

}  // namespace ddp
