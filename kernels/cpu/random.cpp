// Random fills on the CPU from Philox; see Note [Counter-based RNG].
//
// Note [Random formulas]
// Element i draws w = Philox4x32::draw(seed, counter + i) and computes, in
// C = compute_t<T> (float for f32/f16/bf16, double for f64):
//   uniform: u = to_unit_float(w0)  (f64: to_unit_double(w0, w1))
//            x = C(a) + (C(b) - C(a)) * u, a multiply then an add, each
//            rounded (no FMA), so the GPU kernel gives the same bits when it
//            uses __fmul_rn/__fadd_rn (resp. __dmul_rn/__dadd_rn).
//   normal:  u1 = to_unit_float(w0), u2 = to_unit_float(w1)
//            (f64: u1 = to_unit_double(w0, w1), u2 = to_unit_double(w2, w3))
//            z = sqrt(-2 log(1 - u1)) * cos(2 pi u2)   (1 - u1 is in (0, 1])
//            x = C(a) + C(b) * z   (mean a, standard deviation b)
// then rounds x to T once. Normal values match the GPU's only to within the
// last bits, since log/cos/sqrt are not correctly rounded everywhere.

#include <cmath>

#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"
#include "ddp/tensor/generator.h"

namespace ddp::cpu_kernels {

namespace {

// Keeps a multiply-then-add from being contracted into an FMA (the volatile
// store forces the product to be rounded), whatever
// -ffp-contract or -march the library is built with.
template <class C>
inline C mul_add_rounded(C x, C scale, C shift) {
  volatile C prod = x * scale;
  return shift + prod;
}

template <class T>
void random_kernel(const Tensor& out, Backend::Distribution dist, double a, double b, uint64_t seed,
                   uint64_t counter) {
  using C = compute_t<T>;
  T* p = ptr<T>(out);
  const int64_t n = out.numel();
  const C ca = C(a), cb = C(b);
  uint32_t w[4];
  if (dist == Backend::Distribution::uniform) {
    const C span = cb - ca;
    for (int64_t i = 0; i < n; ++i) {
      Philox4x32::draw(seed, counter + uint64_t(i), w);
      C u;
      if constexpr (std::is_same_v<C, double>)
        u = Philox4x32::to_unit_double(w[0], w[1]);
      else
        u = Philox4x32::to_unit_float(w[0]);
      p[i] = store<T>(mul_add_rounded(u, span, ca));
    }
  } else {
    const C two_pi = C(6.283185307179586);
    for (int64_t i = 0; i < n; ++i) {
      Philox4x32::draw(seed, counter + uint64_t(i), w);
      C u1, u2;
      if constexpr (std::is_same_v<C, double>) {
        u1 = Philox4x32::to_unit_double(w[0], w[1]);
        u2 = Philox4x32::to_unit_double(w[2], w[3]);
      } else {
        u1 = Philox4x32::to_unit_float(w[0]);
        u2 = Philox4x32::to_unit_float(w[1]);
      }
      const C z = std::sqrt(C(-2) * std::log(C(1) - u1)) * std::cos(two_pi * u2);
      p[i] = store<T>(mul_add_rounded(z, cb, ca));
    }
  }
}

}  // namespace

void random(const Tensor& out, Backend::Distribution dist, double a, double b, uint64_t seed,
            uint64_t counter) {
  dispatch_floating(out.dtype(), dist == Backend::Distribution::uniform ? "uniform" : "normal",
                    [&]<class T>() { random_kernel<T>(out, dist, a, b, seed, counter); });
}

}  // namespace ddp::cpu_kernels
