// Row reductions on the CPU: in [rows, cols] contiguous -> out [rows].

#include <type_traits>

#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu {

namespace {

// Note [CPU float sums]
// Floating rows are summed pairwise in the compute type: blocks of up to 128
// elements with 8 independent accumulators (vectorizable), combined as a
// binary tree. The rounding error then grows like log(n) instead of n, which
// keeps f32 sums of long rows close to the GPU's tree reduction without
// computing in double.
template <class T>
float_or_double_t_placeholder_never_used();  // (declaration removed below)

}  // namespace
}  // namespace ddp::cpu
