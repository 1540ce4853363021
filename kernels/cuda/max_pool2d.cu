// max_pool2d on CUDA (contract in kernels/kernel_list.h).
//   planar [N·C, H, W]: one thread per output element; the backward scatters
//     with atomicAdd because overlapping windows (stride < kernel) can pick
//     the same input element.
//   NHWC (Note [Channels-last max_pool2d], kernels/cpu/max_pool2d.cpp): one
//     thread per output element in memory order, channels innermost, so a
//     warp reads 32 adjacent channels of each window position (coalesced);
//     the window is visited in the planar kernel's order under its rule, so
//     both pick the same element. The
//     backward scatters dy with atomicAdd like the planar one, one thread per
//     output element in NHWC order. All offsets go through the strides.

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

struct Strides4 {
  int64_t n, c, h, w;
};

Strides4 strides4(const Tensor& t) {
  const Shape& s = t.strides();
  return {s[0], s[1], s[2], s[3]};
}

struct NhwcGeom {
  int64_t n, c, h, w, oh, ow;
  int kh, kw, sh, sw, ph, pw, dh, dw;
};

template <class T>
__global__ void max_pool2d_nhwc_kernel(const T* __restrict__ x, T* __restrict__ y,
                                       int64_t* __restrict__ indices, NhwcGeom g, Strides4 xs,
                                       Strides4 ys, Strides4 is) {
  const int64_t total = g.n * g.oh * g.ow * g.c;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = o % g.c, j = (o / g.c) % g.ow, i = (o / (g.c * g.ow)) % g.oh,
                  b = o / (g.c * g.ow * g.oh);
    const T* plane = x + b * xs.n + c * xs.c;
    T best = T(0);
    int64_t arg = -1;
    for (int a = 0; a < g.kh; ++a) {
      const int64_t r = i * g.sh - g.ph + int64_t(a) * g.dh;
      if (r < 0 || r >= g.h) continue;
      for (int q = 0; q < g.kw; ++q) {
        const int64_t col = j * g.sw - g.pw + int64_t(q) * g.dw;
        if (col < 0 || col >= g.w) continue;
        const T v = plane[r * xs.h + col * xs.w];
        if (arg < 0 || v > best || isnan(v)) {  // the planar kernel's rule
          best = v;
          arg = r * g.w + col;
          if (isnan(v)) break;
        }
      }
    }
    y[b * ys.n + c * ys.c + i * ys.h + j * ys.w] = best;
    indices[b * is.n + c * is.c + i * is.h + j * is.w] = arg;
  }
}

// One thread per output element in dy's NHWC order (channels innermost), so
// the atomics of a warp hit 32 adjacent channels of dx.
template <class T>
__global__ void max_pool2d_nhwc_backward_kernel(const T* __restrict__ dy,
                                                const int64_t* __restrict__ indices,
                                                T* __restrict__ dx, int64_t n, int64_t channels,
                                                int64_t oh, int64_t ow, int64_t w, Strides4 dys,
                                                Strides4 is, Strides4 dxs) {
  const int64_t total = n * oh * ow * channels;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; o < total;
       o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = o % channels, j = (o / channels) % ow, i = (o / (channels * ow)) % oh,
                  b = o / (channels * ow * oh);
    const int64_t idx = indices[b * is.n + c * is.c + i * is.h + j * is.w];
    if (idx < 0) continue;
    atomicAdd(dx + b * dxs.n + c * dxs.c + (idx / w) * dxs.h + (idx % w) * dxs.w,
              dy[b * dys.n + c * dys.c + i * dys.h + j * dys.w]);
  }
}

NhwcGeom nhwc_geom(const Tensor& x, const Tensor& y, Int2 k, Int2 s, Int2 p, Int2 d) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), y.size(2), y.size(3), int(k.h), int(k.w),
          int(s.h),  int(s.w),  int(p.h),  int(p.w),  int(d.h),  int(d.w)};
}

void max_pool2d_nhwc(const Tensor& x, Int2 k, Int2 s, Int2 p, Int2 d, const Tensor& y,
                     const Tensor& indices, cuda::Stream stream) {
  if (y.numel() == 0) return;
  const NhwcGeom g = nhwc_geom(x, y, k, s, p, d);
  const unsigned blocks = grid_for(y.numel());
  dispatch_floating(x.dtype(), "max_pool2d", [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      max_pool2d_nhwc_kernel<T><<<blocks, kThreads, 0, native(stream)>>>(
          ptr<const T>(x), ptr<T>(y), ptr<int64_t>(indices), g, strides4(x), strides4(y),
          strides4(indices));
      DDP_CUDA_CHECK_LAUNCH("max_pool2d_nhwc_kernel");
    } else {
      DDP_THROW(DTypeError, "max_pool2d (NHWC, CUDA): f32 or f64 expected, got {}", x.describe());
    }
  });
}

void max_pool2d_nhwc_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                              cuda::Stream stream) {
  // dx is a dense NHWC tensor (the frontend's empty_nchw): one memset clears it.
  DDP_CUDA_CHECK(cudaMemsetAsync(dx.data_ptr(), 0, dx.nbytes(), native(stream)));
  if (dy.numel() == 0) return;
  const unsigned blocks = grid_for(dy.numel());
  dispatch_floating(dx.dtype(), "max_pool2d_backward", [&]<class T>() {
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      max_pool2d_nhwc_backward_kernel<T><<<blocks, kThreads, 0, native(stream)>>>(
          ptr<const T>(dy), ptr<const int64_t>(indices), ptr<T>(dx), dy.size(0), dy.size(1),
          dy.size(2), dy.size(3), dx.size(3), strides4(dy), strides4(indices), strides4(dx));
      DDP_CUDA_CHECK_LAUNCH("max_pool2d_nhwc_backward_kernel");
    } else {
      DDP_THROW(DTypeError, "max_pool2d backward (NHWC, CUDA): f32 or f64 expected, got {}",
                dx.describe());
    }
  });
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

DDP_REGISTER_KERNEL(max_pool2d_forward_nhwc, CUDA,
                    [](const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                       const Tensor& y, const Tensor& indices) {
                      OnDevice on(x);
                      max_pool2d_nhwc(x, kernel, stride, padding, dilation, y, indices, on.stream);
                    })
DDP_REGISTER_KERNEL(max_pool2d_backward_nhwc, CUDA,
                    [](const Tensor& dy, const Tensor& indices, const Tensor& dx) {
                      OnDevice on(dx);
                      max_pool2d_nhwc_backward(dy, indices, dx, on.stream);
                    })

}  // namespace ddp::cuda_kernels
