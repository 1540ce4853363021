// max_pool2d on the CPU; the contract is in kernels/kernel_list.h.

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/parallel.h"
#include "ddp/core/error.h"
#include "kernel_list.h"

namespace ddp::cpu_kernels {

namespace {

// Note [Parallel max_pool2d]
// Every loop below is split over disjoint output slices (planes, or NHWC
// rows of one image) with parallel_for (Note [CPU parallel loops]); the
// backward scatter is split by plane or image, whose dx slices do not
// overlap, so results do not depend on the thread count. Below about 32K
// output elements a loop stays on the calling thread.
constexpr int64_t kPoolGrainElements = 32768;
int64_t grain_for(int64_t elements_per_item) {
  return std::max<int64_t>(1, kPoolGrainElements / std::max<int64_t>(1, elements_per_item));
}

template <class T>
void forward(const Tensor& x, Int2 k, Int2 s, Int2 p, Int2 d, const Tensor& y,
             const Tensor& indices) {
  const int64_t planes = x.size(0), h = x.size(1), w = x.size(2);
  const int64_t oh = y.size(1), ow = y.size(2);
  const T* px = x.data<T>();
  T* py = y.data<T>();
  int64_t* pi = indices.data<int64_t>();
  parallel_for(planes, grain_for(oh * ow), [&](int64_t first, int64_t last) {
    for (int64_t pl = first; pl < last; ++pl) {
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
  });
}

template <class T>
void backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  const int64_t planes = dx.size(0), hw = dx.size(1) * dx.size(2);
  const int64_t ohw = dy.numel() / planes;
  const T* pdy = dy.data<T>();
  const int64_t* pi = indices.data<int64_t>();
  T* pdx = dx.data<T>();
  parallel_for(planes, grain_for(hw), [&](int64_t first, int64_t last) {
    for (int64_t i = first * hw; i < last * hw; ++i) pdx[i] = T(0);
    for (int64_t pl = first; pl < last; ++pl)
      for (int64_t o = 0; o < ohw; ++o) {
        const int64_t idx = pi[pl * ohw + o];
        if (idx >= 0) pdx[pl * hw + idx] += pdy[pl * ohw + o];
      }
  });
}

// Note [Channels-last max_pool2d]
// On NHWC tensors a window's C values at one (h, w) are adjacent, so the
// loops run over output positions, then the window, then the channels
// innermost: each channel keeps its own running maximum in y and its argmax
// in indices. Visiting the window in the same (row, column) order as the
// planar kernel and replacing under the same rule picks the same element:
// the first maximum, or, when the window holds NaNs, the first NaN of the
// last row that has one (the planar kernel stops a row at its first NaN, and
// a NaN in a later row wins again). All offsets go through the tensors'
// strides, which also covers the size-1 dims that may have any stride.
template <class T>
void forward_nhwc(const Tensor& x, Int2 k, Int2 s, Int2 p, Int2 d, const Tensor& y,
                  const Tensor& indices) {
  const int64_t n = x.size(0), channels = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t oh = y.size(2), ow = y.size(3);
  const Shape &xs = x.strides(), &ys = y.strides(), &is = indices.strides();
  const T* px = x.data<T>();
  T* py = y.data<T>();
  int64_t* pi = indices.data<int64_t>();
  // One item per output row of one image: items [first, last) are rows.
  parallel_for(n * oh, grain_for(ow * channels), [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
      const int64_t b = row / oh, i = row % oh;
      for (int64_t j = 0; j < ow; ++j) {
        T* best = py + b * ys[0] + i * ys[2] + j * ys[3];
        int64_t* arg = pi + b * is[0] + i * is[2] + j * is[3];
        for (int64_t c = 0; c < channels; ++c) best[c * ys[1]] = T(-INFINITY), arg[c * is[1]] = -1;
        for (int64_t a = 0; a < k.h; ++a) {
          const int64_t r = i * s.h - p.h + a * d.h;
          if (r < 0 || r >= h) continue;
          for (int64_t q = 0; q < k.w; ++q) {
            const int64_t col = j * s.w - p.w + q * d.w;
            if (col < 0 || col >= w) continue;
            const T* in = px + b * xs[0] + r * xs[2] + col * xs[3];
            for (int64_t c = 0; c < channels; ++c) {
              const T v = in[c * xs[1]];
              T& m = best[c * ys[1]];
              int64_t& at = arg[c * is[1]];
              if (at < 0 || v > m || (std::isnan(v) && !(std::isnan(m) && at / w == r)))
                m = v, at = r * w + col;
            }
          }
        }
      }
    }
  });
}

template <class T>
void backward_nhwc(const Tensor& dy, const Tensor& indices, const Tensor& dx) {
  const int64_t n = dx.size(0), channels = dx.size(1), w = dx.size(3);
  const int64_t oh = dy.size(2), ow = dy.size(3);
  const Shape &gs = dy.strides(), &is = indices.strides(), &xs = dx.strides();
  const T* pdy = dy.data<T>();
  const int64_t* pi = indices.data<int64_t>();
  T* pdx = dx.data<T>();
  parallel_for(dx.numel(), kPoolGrainElements, [&](int64_t first, int64_t last) {
    for (int64_t e = first; e < last; ++e) pdx[e] = T(0);  // dense: numel elements from pdx
  });
  parallel_for(n, grain_for(oh * ow * channels), [&](int64_t first, int64_t last) {
    for (int64_t b = first; b < last; ++b)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          const T* g = pdy + b * gs[0] + i * gs[2] + j * gs[3];
          const int64_t* arg = pi + b * is[0] + i * is[2] + j * is[3];
          T* out = pdx + b * xs[0];
          for (int64_t c = 0; c < channels; ++c) {
            const int64_t idx = arg[c * is[1]];
            if (idx >= 0) out[(idx / w) * xs[2] + (idx % w) * xs[3] + c * xs[1]] += g[c * gs[1]];
          }
        }
  });
}

void check_float(const Tensor& t) {
  DDP_CHECK_T(DTypeError, t.dtype() == DType::f32 || t.dtype() == DType::f64,
              "max_pool2d CPU kernel: f32 or f64, got {}", t.describe());
}

}  // namespace

DDP_REGISTER_KERNEL(max_pool2d_forward_nhwc, CPU,
                    [](const Tensor& x, Int2 kernel, Int2 stride, Int2 padding, Int2 dilation,
                       const Tensor& y, const Tensor& indices) {
                      check_float(x);
                      x.dtype() == DType::f32
                          ? forward_nhwc<float>(x, kernel, stride, padding, dilation, y, indices)
                          : forward_nhwc<double>(x, kernel, stride, padding, dilation, y, indices);
                    })

DDP_REGISTER_KERNEL(max_pool2d_backward_nhwc, CPU,
                    [](const Tensor& dy, const Tensor& indices, const Tensor& dx) {
                      check_float(dy);
                      dy.dtype() == DType::f32 ? backward_nhwc<float>(dy, indices, dx)
                                               : backward_nhwc<double>(dy, indices, dx);
                    })

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
