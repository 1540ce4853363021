// conv2d for f64 on the CPU: the definition of convolution as plain loops.
// oneDNN has no f64 convolution; this path exists so that gradcheck (which
// needs f64) covers conv2d's frontend and backward wiring. It is O(N·O·C/G·
// OH·OW·KH·KW) with no blocking: correct, small, slow. See Note [Conv2d
// backends] in src/nn/functional/conv.cpp. Tensors are read through their
// strides, so NCHW and NHWC layouts both work.

#include <cstdint>

#include "ddp/core/error.h"
#include "cpu/conv.h"

namespace ddp::nn::functional::conv_detail::reference {

namespace {

// Element (a, b, c, d) of a 4-D f64 tensor through its strides.
struct View4 {
  double* p;
  int64_t s0, s1, s2, s3;
  explicit View4(const Tensor& t)
      : p(t.data<double>()), s0(t.stride(0)), s1(t.stride(1)), s2(t.stride(2)), s3(t.stride(3)) {}
  double& operator()(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return p[a * s0 + b * s1 + c * s2 + d * s3];
  }
};

// Calls fn(n, o, i, j, c, ci, p, q, xi, xj) for every (output element, weight
// element) pair whose input position (xi, xj) lies inside the input; c is the
// weight's input channel, ci
// the input's. Every pass is this one loop nest with a different body.
template <class Fn>
void for_each_tap(const ConvGeometry& g, Fn fn) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t c0 = (o / og) * cg;
      for (int64_t i = 0; i < g.oh; ++i)
        for (int64_t j = 0; j < g.ow; ++j)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t p = 0; p < g.kh; ++p) {
              const int64_t xi = i * g.stride.h - g.padding.h + p * g.dilation.h;
              if (xi < 0 || xi >= g.h) continue;
              for (int64_t q = 0; q < g.kw; ++q) {
                const int64_t xj = j * g.stride.w - g.padding.w + q * g.dilation.w;
                if (xj < 0 || xj >= g.w) continue;
                fn(n, o, i, j, c, c0 + c, p, q, xi, xj);
              }
            }
    }
}

void check_f64(const ConvGeometry& g) {
  DDP_CHECK_T(DTypeError, g.dtype == DType::f64, "conv2d reference path: f64 only, got {}",
              dtype_name(g.dtype));
}

}  // namespace

void forward(const ConvGeometry& g, const Tensor& x, const Tensor& w, const Tensor& b,
             const Tensor& y) {
  check_f64(g);
  View4 X(x), W(w), Y(y);
  const double* bias = g.has_bias ? b.data<double>() : nullptr;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t i = 0; i < g.oh; ++i)
        for (int64_t j = 0; j < g.ow; ++j) Y(n, o, i, j) = bias ? bias[o] : 0.0;
  for_each_tap(g, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t c, int64_t ci, int64_t p,
                      int64_t q, int64_t xi,
                      int64_t xj) { Y(n, o, i, j) += W(o, c, p, q) * X(n, ci, xi, xj); });
}

void backward_data(const ConvGeometry& g, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  check_f64(g);
  View4 DY(dy), W(w), DX(dx);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t i = 0; i < g.h; ++i)
        for (int64_t j = 0; j < g.w; ++j) DX(n, c, i, j) = 0.0;
  for_each_tap(g, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t c, int64_t ci, int64_t p,
                      int64_t q, int64_t xi,
                      int64_t xj) { DX(n, ci, xi, xj) += W(o, c, p, q) * DY(n, o, i, j); });
}

void backward_weights(const ConvGeometry& g, const Tensor& x, const Tensor& dy, const Tensor& dw,
                      const Tensor& db) {
  check_f64(g);
  View4 X(x), DY(dy), DW(dw);
  double* dbias = db.defined() ? db.data<double>() : nullptr;
  for (int64_t k = 0; k < dw.numel(); ++k) dw.data<double>()[k] = 0.0;
  for_each_tap(g, [&](int64_t n, int64_t o, int64_t i, int64_t j, int64_t c, int64_t ci, int64_t p,
                      int64_t q, int64_t xi,
                      int64_t xj) { DW(o, c, p, q) += X(n, ci, xi, xj) * DY(n, o, i, j); });
  if (!dbias) return;
  for (int64_t o = 0; o < g.o; ++o) {
    double s = 0.0;
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t i = 0; i < g.oh; ++i)
        for (int64_t j = 0; j < g.ow; ++j) s += DY(n, o, i, j);
    dbias[o] = s;
  }
}

}  // namespace ddp::nn::functional::conv_detail::reference
