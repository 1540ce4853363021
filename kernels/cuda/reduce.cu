// Reductions on CUDA: rows (in [rows, cols] contiguous -> out [rows]) and
// columns (in [rows, cols] contiguous -> out [cols]), each in one pass or,
// when one pass would leave the GPU idle, two.
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
//
// Note [CUDA two-pass reductions]
// A few long rows (sum of a whole tensor: one row of numel elements) would
// get one block each and leave all but a few SMs idle. Then each row is cut
// into `splits` chunks of at least kChunk elements; pass 1 runs a block per
// (chunk, row) and writes the chunk's accumulator (float, double, uint64 or a
// (value, index) pair) to a scratch buffer from the caching allocator, and
// pass 2 runs a block per row that combines the row's partials in a fixed
// tree and stores the result. There are no atomics: the split count depends
// only on the shape, and every combination happens in a fixed order, so a
// sum is bitwise the same on every run and every GPU. The column kernels
// split long columns the same way.
//
// Note [CUDA column reductions]
// Reducing the outer dim of [rows, cols] (a bias gradient: sum over the
// batch; a BatchNorm statistic of an NHWC tensor: sum over N*H*W per channel)
// used to transpose the input into a contiguous copy first. The column
// kernel reads it as it lies: a block of 32 x 8 threads owns 32 neighbouring
// columns; each warp reads 32 consecutive elements of one row (one coalesced
// transaction), and each thread folds every 8th row of its column in
// registers; a shared-memory tree over the 8 then gives the column's result.
// Few, long columns split their rows over blockIdx.y (Note [CUDA two-pass
// reductions]), and pass 2 is the same column kernel over the [splits, cols]
// partials.

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

// Reducers: what a kernel folds and stores. fold takes an element and its
// index along the reduced dim; combine merges two accumulators (associative,
// applied in a fixed order); finish makes the output from the accumulator and
// the reduced slice (its first element and the stride between elements).
template <class T>
struct SumFloat {
  using In = T;
  using Acc = compute_t<T>;
  using Out = T;
  static __device__ __forceinline__ Acc identity() { return Acc(0); }
  static __device__ __forceinline__ Acc fold(Acc a, T v, int64_t) { return a + load(v); }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ Out finish(Acc a, const T*, int64_t) { return store<T>(a); }
};

// Integers and bool: exact wrapping sum into int64 (computed unsigned).
template <class T>
struct SumInt {
  using In = T;
  using Acc = uint64_t;
  using Out = int64_t;
  static __device__ __forceinline__ Acc identity() { return 0; }
  static __device__ __forceinline__ Acc fold(Acc a, T v, int64_t) {
    return a + uint64_t(int64_t(v));
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return a + b; }
  static __device__ __forceinline__ Out finish(Acc a, const T*, int64_t) { return int64_t(a); }
};

// max/min (Arg = false: out T) and argmax/argmin (Arg = true: out int64).
template <class T, bool IsMax, bool Arg>
struct ExtremeOf {
  using In = T;
  using Acc = Extreme<compute_t<T>>;
  using Out = std::conditional_t<Arg, int64_t, T>;
  static __device__ __forceinline__ Acc identity() { return Acc{compute_t<T>(0), -1}; }
  static __device__ __forceinline__ Acc fold(Acc a, T v, int64_t j) {
    return better<IsMax>(a, Acc{load(v), j});
  }
  static __device__ __forceinline__ Acc combine(Acc a, Acc b) { return better<IsMax>(a, b); }
  static __device__ __forceinline__ Out finish(Acc a, const T* slice, int64_t step) {
    if constexpr (Arg)
      return a.col;
    else
      return slice[a.col * step];
  }
};

// ---- rows

// Pass 1 (or the only pass): block (s, r) folds columns [s*chunk, (s+1)*chunk)
// of row r. With `partials` null (splits == 1) it stores the row's result.
template <class R>
static __global__ void rows_kernel(const typename R::In* in, typename R::Acc* partials,
                                   typename R::Out* out, int64_t rows, int64_t cols,
                                   int64_t chunk) {
  using Acc = typename R::Acc;
  __shared__ Acc sm[kThreads];
  const int64_t begin = int64_t(blockIdx.x) * chunk;
  const int64_t end = std::min(cols, begin + chunk);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const typename R::In* row = in + r * cols;
    Acc acc = R::identity();
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) acc = R::fold(acc, row[j], j);
    acc = block_all_reduce(acc, sm, [](Acc x, Acc y) { return R::combine(x, y); });
    if (threadIdx.x == 0) {
      if (partials)
        partials[r * gridDim.x + blockIdx.x] = acc;
      else
        out[r] = R::finish(acc, row, 1);
    }
  }
}

// Pass 2: block r combines row r's `splits` partials.
template <class R>
static __global__ void rows_finish_kernel(const typename R::In* in,
                                          const typename R::Acc* partials, typename R::Out* out,
                                          int64_t rows, int64_t cols, int64_t splits) {
  using Acc = typename R::Acc;
  __shared__ Acc sm[kThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    Acc acc = R::identity();
    for (int64_t s = threadIdx.x; s < splits; s += blockDim.x)
      acc = R::combine(acc, partials[r * splits + s]);
    acc = block_all_reduce(acc, sm, [](Acc x, Acc y) { return R::combine(x, y); });
    if (threadIdx.x == 0) out[r] = R::finish(acc, in + r * cols, 1);
  }
}

// ---- columns (Note [CUDA column reductions])

inline constexpr int kColTile = 32;                     // columns per block (threadIdx.x)
inline constexpr int kColLanes = kThreads / kColTile;   // rows folded in parallel (threadIdx.y)

// Folds rows [begin, end) of column c; Partial: the input is pass 1's
// [splits, cols] accumulators (combine) instead of elements (fold).
template <class R, bool Partial>
__device__ __forceinline__ typename R::Acc fold_column(const void* src, int64_t cols, int64_t c,
                                                       int64_t begin, int64_t end) {
  typename R::Acc acc = R::identity();
  for (int64_t i = begin + threadIdx.y; i < end; i += kColLanes) {
    if constexpr (Partial)
      acc = R::combine(acc, static_cast<const typename R::Acc*>(src)[i * cols + c]);
    else
      acc = R::fold(acc, static_cast<const typename R::In*>(src)[i * cols + c], i);
  }
  return acc;
}

// Block (x, s): columns [32x, 32x + 32), rows [s*chunk, (s+1)*chunk) of
// `src` ([n, cols]). Writes partials[s, c], or, with partials null, out[c].
template <class R, bool Partial>
static __global__ void cols_kernel(const void* src, const typename R::In* in,
                                   typename R::Acc* partials, typename R::Out* out, int64_t n,
                                   int64_t cols, int64_t chunk) {
  using Acc = typename R::Acc;
  __shared__ Acc sm[kColLanes][kColTile];
  const int64_t c = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  const int64_t begin = int64_t(blockIdx.y) * chunk;
  const int64_t end = std::min(n, begin + chunk);
  Acc acc = c < cols ? fold_column<R, Partial>(src, cols, c, begin, end) : R::identity();
  sm[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int s = kColLanes / 2; s > 0; s >>= 1) {
    if (threadIdx.y < s)
      sm[threadIdx.y][threadIdx.x] = R::combine(sm[threadIdx.y][threadIdx.x],
                                                sm[threadIdx.y + s][threadIdx.x]);
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) {
    if (partials)
      partials[int64_t(blockIdx.y) * cols + c] = sm[0][threadIdx.x];
    else
      out[c] = R::finish(sm[0][threadIdx.x], in + c, cols);
  }
}

// ---- launch geometry (shape only, so results do not depend on the GPU)

inline constexpr int64_t kChunk = 16384;        // fewest elements of a pass-1 row chunk
inline constexpr int64_t kColChunk = 256;       // fewest rows of a pass-1 column chunk
inline constexpr int64_t kTargetBlocks = 2048;  // enough to fill any current GPU

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scratch for pass 1 (Note [CUDA two-pass reductions]). It comes from the
// current stream's pool, so freeing it right after the launches is safe when
// the kernels run there (always, through CudaBackend).
static Tensor scratch(const Tensor& like, int64_t bytes) {
  return Tensor::empty({bytes}, TensorOptions().dtype(DType::u8).device(like.device()));
}

// Called after the launches: on another stream, the scratch's reuse waits
// for the work queued there so far.
static void release_after(const Tensor& buf, cuda::Stream stream) {
  if (!(stream == cuda::current_stream(buf.device().index)))
    cuda::record_stream(buf.data_ptr(), stream);
}

template <class R>
static void launch_rows(const Tensor& in, const Tensor& out, cuda::Stream stream) {
  const cudaStream_t s = native(stream);
  const int64_t rows = in.shape()[0], cols = in.shape()[1];
  unsigned threads = 32;
  while (threads < unsigned(kThreads) && int64_t(threads) < cols) threads *= 2;
  const auto* ip = ptr<const typename R::In>(in);
  auto* op = ptr<typename R::Out>(out);
  int64_t splits = 1;
  if (rows < kTargetBlocks)
    splits = std::clamp<int64_t>(std::min(cols / kChunk, kTargetBlocks / rows), 1, 65535);
  if (splits == 1) {
    const dim3 grid(1, unsigned(std::min<int64_t>(rows, 65535)));
    rows_kernel<R><<<grid, threads, 0, s>>>(ip, nullptr, op, rows, cols, cols);
    DDP_CUDA_CHECK_LAUNCH("rows_kernel");
    return;
  }
  const int64_t chunk = ceil_div(cols, splits);
  splits = ceil_div(cols, chunk);
  Tensor buf = scratch(in, rows * splits * int64_t(sizeof(typename R::Acc)));
  auto* partials = static_cast<typename R::Acc*>(buf.data_ptr());
  rows_kernel<R><<<dim3(unsigned(splits), unsigned(rows)), kThreads, 0, s>>>(ip, partials, op, rows,
                                                                            cols, chunk);
  DDP_CUDA_CHECK_LAUNCH("rows_kernel");
  rows_finish_kernel<R><<<unsigned(rows), kThreads, 0, s>>>(ip, partials, op, rows, cols, splits);
  DDP_CUDA_CHECK_LAUNCH("rows_finish_kernel");
  release_after(buf, stream);
}

template <class R>
static void launch_cols(const Tensor& in, const Tensor& out, cuda::Stream stream) {
  const cudaStream_t s = native(stream);
  const int64_t rows = in.shape()[0], cols = in.shape()[1];
  const int64_t tiles = ceil_div(cols, kColTile);
  DDP_CHECK(tiles <= INT32_MAX, "reduce_cols: {} columns are too many for one grid", cols);
  const dim3 block(kColTile, kColLanes);
  const auto* ip = ptr<const typename R::In>(in);
  auto* op = ptr<typename R::Out>(out);
  const int64_t splits = std::clamp<int64_t>(
      std::min(rows / kColChunk, std::max<int64_t>(1, kTargetBlocks / tiles)), 1, 65535);
  if (splits == 1) {
    cols_kernel<R, false>
        <<<dim3(unsigned(tiles), 1), block, 0, s>>>(ip, ip, nullptr, op, rows, cols, rows);
    DDP_CUDA_CHECK_LAUNCH("cols_kernel");
    return;
  }
  const int64_t chunk = ceil_div(rows, splits);
  const int64_t used = ceil_div(rows, chunk);
  Tensor buf = scratch(in, used * cols * int64_t(sizeof(typename R::Acc)));
  auto* partials = static_cast<typename R::Acc*>(buf.data_ptr());
  cols_kernel<R, false>
      <<<dim3(unsigned(tiles), unsigned(used)), block, 0, s>>>(ip, ip, partials, op, rows, cols, chunk);
  DDP_CUDA_CHECK_LAUNCH("cols_kernel");
  cols_kernel<R, true>
      <<<dim3(unsigned(tiles), 1), block, 0, s>>>(partials, ip, nullptr, op, used, cols, used);
  DDP_CUDA_CHECK_LAUNCH("cols_kernel");
  release_after(buf, stream);
}

template <bool Columns, class R>
static void launch(const Tensor& in, const Tensor& out, cuda::Stream stream) {
  if constexpr (Columns)
    launch_cols<R>(in, out, stream);
  else
    launch_rows<R>(in, out, stream);
}

template <bool Columns>
static void reduce(const char* what, ReductionOp op, const Tensor& in, const Tensor& out,
                   cuda::Stream stream) {
  switch (op) {
    case ReductionOp::sum:
      dispatch_all(in.dtype(), "sum", [&]<class T>() {
        if constexpr (is_half_like<T> || std::is_floating_point_v<T>)
          launch<Columns, SumFloat<T>>(in, out, stream);
        else
          launch<Columns, SumInt<T>>(in, out, stream);
      });
      return;
    case ReductionOp::max:
      dispatch_all(in.dtype(), "max", [&]<class T>() {
        launch<Columns, ExtremeOf<T, true, false>>(in, out, stream);
      });
      return;
    case ReductionOp::min:
      dispatch_all(in.dtype(), "min", [&]<class T>() {
        launch<Columns, ExtremeOf<T, false, false>>(in, out, stream);
      });
      return;
    case ReductionOp::argmax:
      dispatch_all(in.dtype(), "argmax", [&]<class T>() {
        launch<Columns, ExtremeOf<T, true, true>>(in, out, stream);
      });
      return;
    case ReductionOp::argmin:
      dispatch_all(in.dtype(), "argmin", [&]<class T>() {
        launch<Columns, ExtremeOf<T, false, true>>(in, out, stream);
      });
      return;
  }
  DDP_THROW(NotImplementedError, "{}: unknown op {} on CUDA", what, int(op));
}

void reduce_rows(ReductionOp op, const Tensor& in, const Tensor& out, cuda::Stream stream) {
  if (in.shape()[0] == 0) return;
  if (in.shape()[1] == 0) {  // only sum gets here (cols >= 1 for the others): zeros
    DDP_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), native(stream)));
    return;
  }
  reduce<false>("reduce_rows", op, in, out, stream);
}

void reduce_cols(ReductionOp op, const Tensor& in, const Tensor& out, cuda::Stream stream) {
  if (in.shape()[1] == 0) return;
  if (in.shape()[0] == 0) {  // only sum gets here (rows >= 1 for the others): zeros
    DDP_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), native(stream)));
    return;
  }
  reduce<true>("reduce_cols", op, in, out, stream);
}

}  // namespace ddp::cuda_kernels
