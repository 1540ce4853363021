// Fused scaled-dot-product attention on CUDA (forward and backward) that never
// writes the T×S score matrix to memory.
//
// Note [Flash attention kernels]
// Forward: one thread per query row, a block of kRows rows per (batch·head,
// query tile). The block walks the keys in tiles of kCols, staged in shared
// memory; each thread keeps its scaled query row, a running max m, a running
// sum l and an output accumulator in registers and folds every key in with
// the online softmax (rescale by exp(m_old - m_new)). It writes the output
// and the row's log-sum-exp lse = m + log l, all that the backward needs.
// Backward, with P recomputed from q, k and lse (p = exp(q·k·scale - lse)):
//   1. row_dot:   D_i = Σ_d dO_i,d · O_i,d        (one thread per query row)
//   2. dk_dv:     one thread per key row j, walking query tiles:
//                 dV_j += p_ij dO_i;  dS_ij = p_ij (dO_i·V_j − D_i);
//                 dK_j += dS_ij q_i · scale
//   3. dq:        one thread per query row i, walking key tiles:
//                 dQ_i += dS_ij K_j · scale
// Splitting dQ from dK/dV recomputes P once more but needs no atomics, so the
// result is deterministic. Causal masking skips whole tiles past the
// diagonal and masks within the diagonal tile. Math is f32 for every input
// dtype (Note [Compute type]); the head size D is a template parameter (16,
// 32, 64 or 128) so the per-thread rows live in registers. This is the simple
// form of the algorithm (no tensor cores): it saves memory, not yet time.
// It is the f32 path and the reference for cuDNN's fused attention, which
// serves f16/bf16 (Note [Attention paths on CUDA] in
// src/nn/functional/attention_cuda.cpp registers both).

#include "cuda/flash_attention.h"
#include "cuda/common.cuh"

namespace ddp::cuda_kernels {

namespace {

constexpr int kRows = 64;  // query rows per block (threads per block)
constexpr int kCols = 32;  // key rows per shared-memory tile

template <int D>
__device__ __forceinline__ float dot_row(const float* a, const float (*b)[D], int j) {
  float s = 0.f;
#pragma unroll
  for (int d = 0; d < D; ++d) s += a[d] * b[j][d];
  return s;
}

// Stages rows [r0, r0 + kCols) of a [n, D] matrix as f32; rows past n are 0.
template <class T, int D>
__device__ __forceinline__ void stage_tile(float (*dst)[D], const T* src, int r0, int n) {
  for (int idx = threadIdx.x; idx < kCols * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    dst[r][d] = r0 + r < n ? float(load(src[int64_t(r0 + r) * D + d])) : 0.f;
  }
}

template <class T, int D>
__global__ void flash_forward_kernel(const T* q, const T* k, const T* v, T* o, float* lse, int T_,
                                     int S, float scale, bool causal, int64_t BH) {
  __shared__ float ks[kCols][D];
  __shared__ float vs[kCols][D];
  // See Note [Attention grid]: (batch·head) spans gridDim.y and gridDim.z.
  const int64_t bh = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
  if (bh >= BH) return;  // the whole block: no barrier is skipped
  const int row = blockIdx.x * kRows + threadIdx.x;
  const bool active = row < T_;
  q += bh * T_ * D;
  k += bh * S * D;
  v += bh * S * D;
  float qr[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qr[d] = active ? float(load(q[int64_t(row) * D + d])) * scale : 0.f;
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int kend = causal ? min(S, (blockIdx.x + 1) * kRows) : S;
  for (int j0 = 0; j0 < kend; j0 += kCols) {
    stage_tile<T, D>(ks, k, j0, S);
    stage_tile<T, D>(vs, v, j0, S);
    __syncthreads();
    if (active) {
      int jn = min(kCols, S - j0);
      if (causal) jn = min(jn, row - j0 + 1);
      for (int j = 0; j < jn; ++j) {
        const float s = dot_row<D>(qr, ks, j);
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);  // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int d = 0; d < D; ++d) acc[d] = acc[d] * corr + p * vs[j][d];
        m = m_new;
      }
    }
    __syncthreads();
  }
  if (!active) return;
  const float inv = 1.f / l;
#pragma unroll
  for (int d = 0; d < D; ++d) o[bh * T_ * D + int64_t(row) * D + d] = store<T>(acc[d] * inv);
  lse[bh * T_ + row] = m + logf(l);
}

// D_i = Σ_d dO_i,d · O_i,d for every (batch·head, query row).
template <class T, int D>
__global__ void row_dot_kernel(const T* dout, const T* out, float* delta, int64_t rows) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float s = 0.f;
#pragma unroll
  for (int d = 0; d < D; ++d) s += float(load(dout[r * D + d])) * float(load(out[r * D + d]));
  delta[r] = s;
}

template <class T, int D>
__global__ void flash_dk_dv_kernel(const T* q, const T* k, const T* v, const T* dout,
                                   const float* lse, const float* delta, T* dk, T* dv, int T_,
                                   int S, float scale, bool causal, int64_t BH) {
  __shared__ float qs[kCols][D];
  __shared__ float dos[kCols][D];
  __shared__ float lse_s[kCols], delta_s[kCols];
  // See Note [Attention grid]: (batch·head) spans gridDim.y and gridDim.z.
  const int64_t bh = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
  if (bh >= BH) return;  // the whole block: no barrier is skipped
  const int col = blockIdx.x * kRows + threadIdx.x;  // this thread's key row
  const bool active = col < S;
  q += bh * T_ * D;
  dout += bh * T_ * D;
  lse += bh * T_;
  delta += bh * T_;
  float kr[D], vr[D], dkr[D], dvr[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    kr[d] = active ? float(load(k[bh * S * D + int64_t(col) * D + d])) : 0.f;
    vr[d] = active ? float(load(v[bh * S * D + int64_t(col) * D + d])) : 0.f;
    dkr[d] = dvr[d] = 0.f;
  }
  // Causal: queries before this block's first key see none of its keys.
  const int i_begin = causal ? (blockIdx.x * kRows) / kCols * kCols : 0;
  for (int i0 = i_begin; i0 < T_; i0 += kCols) {
    stage_tile<T, D>(qs, q, i0, T_);
    stage_tile<T, D>(dos, dout, i0, T_);
    for (int r = threadIdx.x; r < kCols; r += blockDim.x) {
      lse_s[r] = i0 + r < T_ ? lse[i0 + r] : 0.f;
      delta_s[r] = i0 + r < T_ ? delta[i0 + r] : 0.f;
    }
    __syncthreads();
    if (active) {
      const int in = min(kCols, T_ - i0);
      for (int i = causal ? max(0, col - i0) : 0; i < in; ++i) {
        const float p = expf(dot_row<D>(kr, qs, i) * scale - lse_s[i]);
        const float dp = dot_row<D>(vr, dos, i);
        const float ds = p * (dp - delta_s[i]);
#pragma unroll
        for (int d = 0; d < D; ++d) {
          dvr[d] += p * dos[i][d];
          dkr[d] += ds * qs[i][d] * scale;
        }
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int d = 0; d < D; ++d) {
    dk[bh * S * D + int64_t(col) * D + d] = store<T>(dkr[d]);
    dv[bh * S * D + int64_t(col) * D + d] = store<T>(dvr[d]);
  }
}

template <class T, int D>
__global__ void flash_dq_kernel(const T* q, const T* k, const T* v, const T* dout,
                                const float* lse, const float* delta, T* dq, int T_, int S,
                                float scale, bool causal, int64_t BH) {
  __shared__ float ks[kCols][D];
  __shared__ float vs[kCols][D];
  // See Note [Attention grid]: (batch·head) spans gridDim.y and gridDim.z.
  const int64_t bh = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
  if (bh >= BH) return;  // the whole block: no barrier is skipped
  const int row = blockIdx.x * kRows + threadIdx.x;
  const bool active = row < T_;
  k += bh * S * D;
  v += bh * S * D;
  float qr[D], dor[D], dqr[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qr[d] = active ? float(load(q[bh * T_ * D + int64_t(row) * D + d])) : 0.f;
    dor[d] = active ? float(load(dout[bh * T_ * D + int64_t(row) * D + d])) : 0.f;
    dqr[d] = 0.f;
  }
  const float lse_r = active ? lse[bh * T_ + row] : 0.f;
  const float delta_r = active ? delta[bh * T_ + row] : 0.f;
  const int kend = causal ? min(S, (blockIdx.x + 1) * kRows) : S;
  for (int j0 = 0; j0 < kend; j0 += kCols) {
    stage_tile<T, D>(ks, k, j0, S);
    stage_tile<T, D>(vs, v, j0, S);
    __syncthreads();
    if (active) {
      int jn = min(kCols, S - j0);
      if (causal) jn = min(jn, row - j0 + 1);
      for (int j = 0; j < jn; ++j) {
        const float p = expf(dot_row<D>(qr, ks, j) * scale - lse_r);
        const float ds = p * (dot_row<D>(dor, vs, j) - delta_r);
#pragma unroll
        for (int d = 0; d < D; ++d) dqr[d] += ds * ks[j][d] * scale;
      }
    }
    __syncthreads();
  }
  if (!active) return;
#pragma unroll
  for (int d = 0; d < D; ++d) dq[bh * T_ * D + int64_t(row) * D + d] = store<T>(dqr[d]);
}

// Calls fn.template operator()<T, D>() for the tensor's dtype and head size.
template <class F>
void dispatch_attention(DType dtype, int head, const char* what, F&& fn) {
  auto with_d = [&]<class T>() {
    switch (head) {
      case 16: return fn.template operator()<T, 16>();
      case 32: return fn.template operator()<T, 32>();
      case 64: return fn.template operator()<T, 64>();
      case 128: return fn.template operator()<T, 128>();
      default: DDP_THROW(ValueError, "{}: head size {} not supported by the fused kernel", what, head);
    }
  };
  switch (dtype) {
    case DType::f32: return with_d.template operator()<float>();
    case DType::f16: return with_d.template operator()<Half>();
    case DType::bf16: return with_d.template operator()<BFloat16>();
    default: DDP_THROW(DTypeError, "{}: {} not supported by the fused kernel", what, dtype_name(dtype));
  }
}

// Note [Attention grid]
// One block per (row tile, batch·head). gridDim.y stops at 65,535, so the
// batch·head index is folded over y and z (y·z ≥ BH) and each kernel skips
// the blocks past BH: B·H above 65,535 (small heads, large batches) works.
constexpr int64_t kMaxGridY = 65535;
dim3 grid_for(int rows, int64_t bh) {
  const int64_t y = std::min(bh, kMaxGridY);
  return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(y), unsigned((bh + y - 1) / y));
}

}  // namespace

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, float scale, bool causal, cuda::Stream stream) {
  const int bh = int(q.size(0)), T_ = int(q.size(1)), S = int(k.size(1)), D = int(q.size(2));
  if (bh == 0 || T_ == 0) return;
  dispatch_attention(q.dtype(), D, "flash_attention_forward", [&]<class T, int HD>() {
    flash_forward_kernel<T, HD><<<grid_for(T_, bh), kRows, 0, native(stream)>>>(
        ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<T>(out), ptr<float>(lse), T_, S,
        scale, causal, int64_t(bh));
    DDP_CUDA_CHECK_LAUNCH("flash_forward_kernel");
  });
}

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& lse, const Tensor& delta,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv, float scale,
                              bool causal, cuda::Stream stream) {
  const int bh = int(q.size(0)), T_ = int(q.size(1)), S = int(k.size(1)), D = int(q.size(2));
  if (bh == 0 || T_ == 0) return;
  dispatch_attention(q.dtype(), D, "flash_attention_backward", [&]<class T, int HD>() {
    const int64_t rows = int64_t(bh) * T_;
    row_dot_kernel<T, HD><<<unsigned((rows + kThreads - 1) / kThreads), kThreads, 0, native(stream)>>>(
        ptr<const T>(dout), ptr<const T>(out), ptr<float>(delta), rows);
    DDP_CUDA_CHECK_LAUNCH("row_dot_kernel");
    flash_dk_dv_kernel<T, HD><<<grid_for(S, bh), kRows, 0, native(stream)>>>(
        ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(dout),
        ptr<const float>(lse), ptr<const float>(delta), ptr<T>(dk), ptr<T>(dv), T_, S, scale,
        causal, int64_t(bh));
    DDP_CUDA_CHECK_LAUNCH("flash_dk_dv_kernel");
    flash_dq_kernel<T, HD><<<grid_for(T_, bh), kRows, 0, native(stream)>>>(
        ptr<const T>(q), ptr<const T>(k), ptr<const T>(v), ptr<const T>(dout),
        ptr<const float>(lse), ptr<const float>(delta), ptr<T>(dq), T_, S, scale, causal, int64_t(bh));
    DDP_CUDA_CHECK_LAUNCH("flash_dq_kernel");
  });
}

}  // namespace ddp::cuda_kernels
