// Embedding lookup and its gradient on CUDA (contract in
// kernels/kernel_list.h). Bad indices are not checked on the host: a kernel
// that meets one reports it to the device error record and skips it (Note
// [Deferred device errors] in src/tensor/device_error_cuda.cpp).
//   forward:  one thread per output element; the row index is read per
//             element (cached), a bad one writes zeros.
//   backward: deterministic, no float atomics (Note [Deterministic embedding
//             gradient] in kernels/cpu/embedding.cpp): the indices become
//             32-bit keys (a bad one becomes the key `num`, past every
//             row), a stable radix sort orders the positions by key, and
//             one block per run of equal keys sums that run's dy rows in
//             position order into its dweight row. Rows nobody looked up
//             are zeroed first.

#include <cub/device/device_radix_sort.cuh>

#include "cuda/common.cuh"
#include "cuda/device_error.cuh"
#include "kernel_list.h"
#include "tensor/device_error.h"

namespace ddp::cuda_kernels {

namespace {

template <class T, class I>
__global__ void embedding_forward_kernel(const T* __restrict__ w, const I* __restrict__ index,
                                         T* __restrict__ out, int64_t n, int64_t dim, int64_t num,
                                         DeviceErrorSlot rec) {
  DDP_KERNEL_LOOP(e, n * dim) {
    const int64_t i = e / dim, j = e - i * dim;
    const int64_t k = int64_t(index[i]);
    if (k < 0 || k >= num) {
      if (j == 0) report_index_error(rec, DeviceErrorOp::embedding, k, i, num);
      out[e] = store<T>(compute_t<T>(0));
    } else {
      out[e] = w[k * dim + j];
    }
  }
}

template <class I>
__global__ void embedding_keys_kernel(const I* __restrict__ index, int32_t* __restrict__ keys,
                                      int32_t* __restrict__ positions, int64_t n, int64_t num,
                                      DeviceErrorSlot rec) {
  DDP_KERNEL_LOOP(i, n) {
    const int64_t k = int64_t(index[i]);
    const bool bad = k < 0 || k >= num;
    if (bad) report_index_error(rec, DeviceErrorOp::embedding_backward, k, i, num);
    keys[i] = bad ? int32_t(num) : int32_t(k);
    positions[i] = int32_t(i);
  }
}

// Block b handles sorted slot b when it starts a run of equal keys.
template <class T>
__global__ void embedding_run_sum_kernel(const T* __restrict__ dy, const int32_t* __restrict__ keys,
                                         const int32_t* __restrict__ positions, T* __restrict__ dw,
                                         int64_t n, int64_t dim, int32_t num) {
  using C = compute_t<T>;
  for (int64_t s = blockIdx.x; s < n; s += gridDim.x) {
    const int32_t key = keys[s];
    if (key >= num || (s > 0 && keys[s - 1] == key)) continue;
    int64_t end = s + 1;
    while (end < n && keys[end] == key) ++end;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      C acc = 0;
      for (int64_t r = s; r < end; ++r) acc += load(dy[int64_t(positions[r]) * dim + j]);
      dw[int64_t(key) * dim + j] = store<T>(acc);
    }
  }
}

int key_bits(int64_t num) {  // keys are in [0, num]
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) <= num) ++bits;
  return bits;
}

void embedding_forward(const Tensor& weight, const Tensor& index, const Tensor& out,
                       cuda::Stream stream) {
  const int64_t n = index.numel(), num = weight.size(0), dim = weight.size(1);
  if (n == 0 || dim == 0) return;
  DeviceErrorSlot rec = detail::device_error_record(weight.device().index);
  dispatch_floating(weight.dtype(), "embedding", [&]<class T>() {
    dispatch_index(index.dtype(), "embedding", [&]<class I>() {
      embedding_forward_kernel<T, I><<<grid_for(n * dim), kThreads, 0, native(stream)>>>(
          ptr<const T>(weight), ptr<const I>(index), ptr<T>(out), n, dim, num, rec);
      DDP_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
    });
  });
}

void embedding_backward(const Tensor& dy, const Tensor& index, const Tensor& dweight,
                        cuda::Stream stream) {
  const int64_t n = index.numel(), num = dweight.size(0), dim = dweight.size(1);
  DDP_CUDA_CHECK(cudaMemsetAsync(dweight.data_ptr(), 0, dweight.nbytes(), native(stream)));
  if (n == 0 || dim == 0) return;
  DDP_CHECK_T(IndexError, n < (int64_t(1) << 31) && num < (int64_t(1) << 31) - 1,
              "embedding (backward): {} positions over {} rows exceed the 32-bit sort keys", n,
              num);
  DeviceErrorSlot rec = detail::device_error_record(dy.device().index);
  const TensorOptions i32 = TensorOptions(DType::i32).device(dy.device());
  Tensor keys_in = Tensor::empty({n}, i32), keys_out = Tensor::empty({n}, i32);
  Tensor pos_in = Tensor::empty({n}, i32), pos_out = Tensor::empty({n}, i32);
  dispatch_index(index.dtype(), "embedding_backward", [&]<class I>() {
    embedding_keys_kernel<I><<<grid_for(n), kThreads, 0, native(stream)>>>(
        ptr<const I>(index), ptr<int32_t>(keys_in), ptr<int32_t>(pos_in), n, num, rec);
    DDP_CUDA_CHECK_LAUNCH("embedding_keys_kernel");
  });
  // LSD radix sort is stable: equal keys keep increasing positions.
  const int bits = key_bits(num);
  size_t temp_bytes = 0;
  DDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, ptr<const int32_t>(keys_in), ptr<int32_t>(keys_out),
      ptr<const int32_t>(pos_in), ptr<int32_t>(pos_out), n, 0, bits, native(stream)));
  Tensor temp = Tensor::empty({int64_t(std::max<size_t>(temp_bytes, 1))},
                              TensorOptions(DType::u8).device(dy.device()));
  DDP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      temp.data_ptr(), temp_bytes, ptr<const int32_t>(keys_in), ptr<int32_t>(keys_out),
      ptr<const int32_t>(pos_in), ptr<int32_t>(pos_out), n, 0, bits, native(stream)));
  const unsigned blocks = unsigned(std::min<int64_t>(n, 65536));
  unsigned threads = 32;
  while (threads < unsigned(kThreads) && int64_t(threads) < dim) threads *= 2;
  dispatch_floating(dweight.dtype(), "embedding_backward", [&]<class T>() {
    embedding_run_sum_kernel<T><<<blocks, threads, 0, native(stream)>>>(
        ptr<const T>(dy), ptr<const int32_t>(keys_out), ptr<const int32_t>(pos_out),
        ptr<T>(dweight), n, dim, int32_t(num));
    DDP_CUDA_CHECK_LAUNCH("embedding_run_sum_kernel");
  });
}

}  // namespace

DDP_REGISTER_KERNEL(embedding_forward, CUDA,
                    [](const Tensor& weight, const Tensor& index, const Tensor& out) {
                      OnDevice on(weight);
                      embedding_forward(weight, index, out, on.stream);
                    })
DDP_REGISTER_KERNEL(embedding_backward, CUDA,
                    [](const Tensor& dy, const Tensor& index, const Tensor& dweight) {
                      OnDevice on(dweight);
                      embedding_backward(dy, index, dweight, on.stream);
                    })

}  // namespace ddp::cuda_kernels
