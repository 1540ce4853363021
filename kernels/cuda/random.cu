// Random fills on CUDA from Philox; see Note [Counter-based RNG] in
// generator.h and Note [Random formulas] in kernels/cpu/random.cpp, whose
// formulas this kernel evaluates in the same order. Multiplies and adds use
// the _rn intrinsics so nvcc cannot fuse them into an FMA: f32/f64 uniforms
// are then bit-identical to the CPU's (f16/bf16 too, being rounded from
// them). Normals go through logf/cosf/sqrtf (log/cos/sqrt for f64), which are
// not correctly rounded, so they agree with the CPU to the last bits only.

#include "cuda/common.cuh"
#include "cuda/launchers.h"
#include "ddp/tensor/generator.h"

namespace ddp::cuda_kernels {

__device__ __forceinline__ float mul_rn(float x, float y) { return __fmul_rn(x, y); }
__device__ __forceinline__ double mul_rn(double x, double y) { return __dmul_rn(x, y); }
__device__ __forceinline__ float add_rn(float x, float y) { return __fadd_rn(x, y); }
__device__ __forceinline__ double add_rn(double x, double y) { return __dadd_rn(x, y); }

// u = to_unit_float(w0) (to_unit_double(w0, w1) for double); out = a + span * u.
template <class T>
static __global__ void uniform_kernel(T* out, compute_t<T> a, compute_t<T> span, uint64_t seed,
                                      uint64_t counter, int64_t n) {
  using C = compute_t<T>;
  DDP_KERNEL_LOOP(i, n) {
    uint32_t w[4];
    Philox4x32::draw(seed, counter + uint64_t(i), w);
    C u;
    if constexpr (std::is_same_v<C, double>)
      u = Philox4x32::to_unit_double(w[0], w[1]);
    else
      u = Philox4x32::to_unit_float(w[0]);
    out[i] = store<T>(add_rn(a, mul_rn(u, span)));
  }
}

// Box-Muller: z = sqrt(-2 log(1 - u1)) * cos(2 pi u2); out = mean + std * z.
template <class T>
static __global__ void normal_kernel(T* out, compute_t<T> mean, compute_t<T> stddev, uint64_t seed,
                                     uint64_t counter, int64_t n) {
  using C = compute_t<T>;
  const C two_pi = C(6.283185307179586);
  DDP_KERNEL_LOOP(i, n) {
    uint32_t w[4];
    Philox4x32::draw(seed, counter + uint64_t(i), w);
    C z;
    if constexpr (std::is_same_v<C, double>) {
      const double u1 = Philox4x32::to_unit_double(w[0], w[1]);
      const double u2 = Philox4x32::to_unit_double(w[2], w[3]);
      z = __dmul_rn(::sqrt(__dmul_rn(-2.0, ::log(__dsub_rn(1.0, u1)))),
                    ::cos(__dmul_rn(two_pi, u2)));
    } else {
      const float u1 = Philox4x32::to_unit_float(w[0]);
      const float u2 = Philox4x32::to_unit_float(w[1]);
      z = __fmul_rn(sqrtf(__fmul_rn(-2.0f, logf(__fsub_rn(1.0f, u1)))),
                    cosf(__fmul_rn(two_pi, u2)));
    }
    out[i] = store<T>(add_rn(mean, mul_rn(z, stddev)));
  }
}

void random(const Tensor& out, Backend::Distribution dist, double a, double b, uint64_t seed,
            uint64_t counter, cuda::Stream stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const bool uniform = dist == Backend::Distribution::uniform;
  dispatch_floating(out.dtype(), uniform ? "uniform" : "normal", [&]<class T>() {
    using C = compute_t<T>;
    const C ca = C(a), cb = C(b);
    if (uniform) {
      uniform_kernel<T>
          <<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<T>(out), ca, C(cb - ca), seed, counter, n);
    } else {
      normal_kernel<T><<<grid_for(n), kThreads, 0, native(stream)>>>(ptr<T>(out), ca, cb, seed, counter, n);
    }
    DDP_CUDA_CHECK_LAUNCH("random_kernel");
  });
}

}  // namespace ddp::cuda_kernels
