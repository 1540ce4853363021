// max_pool2d on CUDA (contract in kernels/kernel_list.h). One thread per output element; the
// backward scatters with atomicAdd because overlapping windows (stride <
// kernel) can pick the same input element.

#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/common.cuh"
#include "kernel_list.h"

namespace ddp::cuda_kernels {

namespace {

struct PoolGeom {
  int64_t planes, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw, dh, dw;
};

template <class T>
__global__ void max_pool2d_kernel(const T* __restrict__ x, T* __restrict__ y,
                                  int64_t* __restrict__ indices, PoolGeom g) {
  const int64_t total = g.planes * g.oh * g.ow;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = o % g.ow, i = (o / g.ow) % g.oh, pl = o / (g.ow * g.oh);
    const T* plane = x + pl * g.h * g.w;
    T best = T(0);
    int64_t arg = -1;
    for (int a = 0; a < g.kh; ++a) {
      const int64_t r = i * g.sh - g.ph + int64_t(a) * g.dh;
      if (r < 0 || r >= g.h) continue;
      for (int b = 0; b < g.kw; ++b) {
        const int64_t c = j * g.sw - g.pw + int64_t(b) * g.dw;
        if (c < 0 || c >= g.w) continue;
        const T v = plane[r * g.w + c];
        if (arg < 0 || v > best || isnan(v)) {  // NaN wins, as on the CPU
          best = v;
          arg = r * g.w + c;
          if (isnan(v)) break;
        }
      }
    }
    y[o] = best;
    indices[o] = arg;
  }
}

template <class T>
__global__ void max_pool2d_backward_kernel(const T* __restrict__ dy,
                                           const int64_t* __restrict__ indices, T* __restrict__ dx,
                                           int64_t planes, int64_t ohw, int64_t hw) {
  const int64_t total = planes * ohw;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t idx = indices[o];
    if (idx >= 0) atomicAdd(dx + (o / ohw) * hw + idx, dy[o]);
  }
}

}  // namespace

static void max_pool2d(const Tensor& x, Int2 k, Int2 s, Int2 p, Int2 d, const Tensor& y,
                const Tensor& indices, cuda::Stream stream) {
  PoolGeom g{x.size(0), x.size(1), x.size(2), y.size(1), y.size(2), int(k.h), int(k.w),
             int(s.h),  int(s.w),  int(p.h),  int(p.w),  int(d.h),  int(d.w)};
  const unsigned blocks = grid_for(y.numel());
  if (x.dtype() == DType::f32)
    max_pool2d_kernel<float><<<blocks, kThreads, 0, native(stream)>>>(x.data<float>(), y.data<float>(),
                                                              indices.data<int64_t>(), g);
  else
    max_pool2d_kernel<double><<<blocks, kThreads, 0, native(stream)>>>(x.data<double>(), y.data<double>(),
                                                               indices.data<int64_t>(), g);
  DDP_CUDA_CHECK_LAUNCH("max_pool2d");
}

static void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                         cuda::Stream stream) {
  DDP_CUDA_CHECK(cudaMemsetAsync(dx.data_ptr(), 0, dx.nbytes(), native(stream)));
  const int64_t planes = dx.size(0), hw = dx.size(1) * dx.size(2), ohw = dy.numel() / planes;
  const unsigned blocks = grid_for(dy.numel());
  if (dy.dtype() == DType::f32)
    max_pool2d_backward_kernel<float><<<blocks, kThreads, 0, native(stream)>>>(
        dy.data<float>(), indices.data<int64_t>(), dx.data<float>(), planes, ohw, hw);
  else
    max_pool2d_backward_kernel<double><<<blocks, kThreads, 0, native(stream)>>>(
        dy.data<double>(), indices.data<int64_t>(), dx.data<double>(), planes, ohw, hw);
  DDP_CUDA_CHECK_LAUNCH("max_pool2d_backward");
}

DDP_REGISTER_KERNEL(max_pool2d_forward, CUDA,
                    [](const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                       const Tensor& y, const Tensor& indices) {
                      OnDevice on(x);
                      max_pool2d(x, kernel, stride, padding, dilation, y, indices, on.stream);
                    })
DDP_REGISTER_KERNEL(max_pool2d_backward, CUDA,
                    [](const Tensor& dy, const Tensor& indices, const Tensor& dx) {
                      OnDevice on(dy);
                      max_pool2d_backward(dy, indices, dx, on.stream);
                    })

}  // namespace ddp::cuda_kernels
