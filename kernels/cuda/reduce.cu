// Row reductions on CUDA: in [rows, cols] contiguous -> out [rows].
//
// Note [CUDA row reductions]
// One block per row (blocks loop over rows when there are more than the grid
// holds); the block's width is the smallest power of two >= cols, between 32
// and 256, so narrow rows do not idle 256 threads. Each thread folds a strided
// slice of the row, then a shared-memory tree combines the partials. Sums
// accumulate in float (f16/bf16/f32), double (f64) or wrapping int64
// (integers and bool, out i64). max/min/argmax/argmin fold (value, index)
// pairs: the larger (smaller) value wins, a NaN beats any number, and ties
// (two NaNs included) keep the lower index, so the result is the first
// extreme, like torch and the CPU kernel. max/min then store the input
// element at that index, so even a NaN's payload matches the CPU's.

#include "cuda/common.cuh"
#include "cuda/launchers.h"

namespace ddp::cuda_kernels {

// A (value, column) pair; col < 0 marks "no element yet".
template <class A>
struct Extreme {
  A v;
  int64_t col;
};

template <bool IsMax, class A>
__device__ __forceinline__ Extreme<A> better(Extreme<A> a, Extreme<A> b) {
  if (a.col < 0) return b;
  if (b.col < 0) return a;
  const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
  if (a_nan != b_nan) return a_nan ? a : b;
  if (!a_nan) {
    if (IsMax ? a.v > b.v : a.v < b.v) return a;
    if (IsMax ? b.v > a.v : b.v < a.v) return b;
  }
  return a.col <= b.col ? a : b;
}

template <class T>
static __global__ void sum_float_rows_kernel(const T* in, T* out, int64_t rows, int64_t cols) {
  using A = compute_t<T>;
  __shared__ A sm[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + r * cols;
    A acc = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) acc += load(row[j]);
    acc = block_all_reduce(acc, sm, [](A x, A y) { return x + y; });
    if (threadIdx.x == 0) out[r] = store<T>(acc);
  }
}

// Integers and bool: exact wrapping sum into int64 (computed unsigned).
template <class T>
static __global__ void sum_int_rows_kernel(const T* in, int64_t* out, int64_t rows, int64_t cols) {
  __shared__ uint64_t sm[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + r * cols;
    uint64_t acc = 0;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) acc += uint64_t(int64_t(row[j]));
    acc = block_all_reduce(acc, sm, [](uint64_t x, uint64_t y) { return x + y; });
    if (threadIdx.x == 0) out[r] = int64_t(acc);
  }
}

// max/min (Arg = false: out T) and argmax/argmin (Arg = true: out int64).
template <class T, bool IsMax, bool Arg>
static __global__ void extreme_rows_kernel(const T* in, void* out, int64_t rows, int64_t cols) {
  using A = compute_t<T>;
  __shared__ Extreme<A> sm[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + r * cols;
    Extreme<A> best{A(0), -1};
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      best = better<IsMax>(best, Extreme<A>{load(row[j]), j});
    best = block_all_reduce(best, sm, [](Extreme<A> x, Extreme<A> y) { return better<IsMax>(x, y); });
    if (threadIdx.x == 0) {
      if constexpr (Arg)
        static_cast<int64_t*>(out)[r] = best.col;
      else
        static_cast<T*>(out)[r] = row[best.col];
    }
  }
}

struct RowLaunch {
  int64_t rows, cols;
  unsigned blocks, threads;
};

static RowLaunch row_launch(const Tensor& in) {
  RowLaunch l;
  l.rows = in.shape()[0];
  l.cols = in.shape()[1];
  l.blocks = unsigned(std::min<int64_t>(l.rows, 65536));
  unsigned t = 32;
  while (t < unsigned(kThreads) && int64_t(t) < l.cols) t *= 2;
  l.threads = t;
  return l;
}

template <bool IsMax, bool Arg>
static void launch_extreme(const char* name, const Tensor& in, const Tensor& out,
                           cuda::Stream stream) {
  const RowLaunch l = row_launch(in);
  dispatch_all(in.dtype(), name, [&]<class T>() {
    extreme_rows_kernel<T, IsMax, Arg>
        <<<l.blocks, l.threads, 0, native(stream)>>>(ptr<const T>(in), out.data_ptr(), l.rows, l.cols);
    DDP_CUDA_CHECK_LAUNCH("extreme_rows_kernel");
  });
}

void reduce_rows(ReduceOp op, const Tensor& in, const Tensor& out, cuda::Stream stream) {
  if (in.shape()[0] == 0) return;
  if (in.shape()[1] == 0) {  // only sum gets here (cols >= 1 for the others): zeros
    DDP_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), native(stream)));
    return;
  }
  switch (op) {
    case ReduceOp::sum: {
      const RowLaunch l = row_launch(in);
      dispatch_all(in.dtype(), "sum", [&]<class T>() {
        if constexpr (is_half_like<T> || std::is_floating_point_v<T>) {
          sum_float_rows_kernel<T>
              <<<l.blocks, l.threads, 0, native(stream)>>>(ptr<const T>(in), ptr<T>(out), l.rows, l.cols);
        } else {
          sum_int_rows_kernel<T><<<l.blocks, l.threads, 0, native(stream)>>>(
              ptr<const T>(in), ptr<int64_t>(out), l.rows, l.cols);
        }
        DDP_CUDA_CHECK_LAUNCH("sum_rows_kernel");
      });
      return;
    }
    case ReduceOp::max:
      launch_extreme<true, false>("max", in, out, stream);
      return;
    case ReduceOp::min:
      launch_extreme<false, false>("min", in, out, stream);
      return;
    case ReduceOp::argmax:
      launch_extreme<true, true>("argmax", in, out, stream);
      return;
    case ReduceOp::argmin:
      launch_extreme<false, true>("argmin", in, out, stream);
      return;
  }
  DDP_THROW(NotImplementedError, "reduce_rows: unknown op {} on CUDA", int(op));
}

}  // namespace ddp::cuda_kernels
