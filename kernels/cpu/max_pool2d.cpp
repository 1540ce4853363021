// max_pool2d on the CPU; the contract is in kernels/kernel_list.h.

#include "kernel_list.h"

#include <cmath>
#include <cstdint>

#include "ddp/core/error.h"

namespace ddp::cpu_kernels {

namespace {

template <class T>
void forward(const Tensor& x, Int2 k, Int2 s, Int2 p, Int2 d, const Tensor& y,
             const Tensor& indices) {
  const int64_t planes = x.size(0), h = x.size(1), w = x.size(2);
  const int64_t oh = y.size(1), ow = y.size(2);
  const T* px = x.data<T>();
  T* py = y.data<T>();
  int64_t* pi = indices.data<int64_t>();
  for (int64_t pl = 0; pl < planes; ++pl) {
    const T* plane = px + pl * h * w;
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        T best = T(-INFINITY);
        int64_t arg = -1;
        for (int64_t a = 0; a < k.h; ++a) {
          const int64_t r = i * s.h - p.h + a * d.h;
          if (r < 0 || r >= h) continue;
          for (int64_t b = 0; b < k.w; ++b) {
            const int64_t c = j * s.w - p.w + b * d.w;
            if (c < 0 || c >= w) continue;
            const T v = plane[r * w + c];
            if (arg < 0 || v > best || std::isnan(v)) {
              best = v;
              arg = r * w + c;
              if (std::isnan(v)) break;
            }
          }
        }
        const int64_t o = (pl * oh + i) * ow + j;
        py[o] = best;
        pi[o] = arg;
      }
  }
}

template <class T>
void backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  const int64_t planes = dx.size(0), hw = dx.size(1) * dx.size(2);
  const int64_t ohw = dy.numel() / planes;
  const T* pdy = dy.data<T>();
  const int64_t* pi = indices.data<int64_t>();
  T* pdx = dx.data<T>();
  for (int64_t i = 0; i < dx.numel(); ++i) pdx[i] = T(0);
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t o = 0; o < ohw; ++o) {
      const int64_t idx = pi[pl * ohw + o];
      if (idx >= 0) pdx[pl * hw + idx] += pdy[pl * ohw + o];
    }
}

}  // namespace

DDP_REGISTER_KERNEL(max_pool2d_forward, CPU,
                    [](const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                       const Tensor& y, const Tensor& indices) {
                      DDP_CHECK_T(DTypeError, x.dtype() == DType::f32 || x.dtype() == DType::f64,
                                  "max_pool2d CPU kernel: f32 or f64, got {}", x.describe());
                      x.dtype() == DType::f32
                          ? forward<float>(x, kernel, stride, padding, dilation, y, indices)
                          : forward<double>(x, kernel, stride, padding, dilation, y, indices);
                    })

DDP_REGISTER_KERNEL(max_pool2d_backward, CPU,
                    [](const Tensor& dy, const Tensor& indices, const Tensor& dx) {
                      dy.dtype() == DType::f32 ? backward<float>(dy, indices, dx)
                                               : backward<double>(dy, indices, dx);
                    })

}  // namespace ddp::cpu_kernels
