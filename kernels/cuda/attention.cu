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
// Every q/k/v/out/dout/dq/dk/dv operand is [B, H, rows, D] with its own
// batch, head and row strides and a dense last dim (Note [Strided attention
// operands] in src/nn/functional/attention.cpp): a block finds its head's
// rows from (b, h) = (bh / H, bh % H), so GPT's q/k/v views of the fused
// qkv projection and an output in [B, T, H, D] order need no copies. lse and
// delta are packed [B·H, T].
// It is the f32 path and the reference for cuDNN's fused attention, which
// serves f16/bf16 (Note [Attention paths on CUDA] in
// kernels/cuda/attention_cuda.cpp registers both).

#include "cuda/flash_attention.h"
#include "cuda/common.cuh"

namespace ddp::cuda_kernels {

namespace {

constexpr int kRows = 64;  // query rows per block (threads per block)
constexpr int kCols = 32;  // key rows per shared-memory tile

// Element strides of one [B, H, rows, D] operand whose last dim is dense.
struct Strides {
  int64_t b, h, r;
};

Strides strides_of(const Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// The offset of head bh = b·H + h's first row.
__device__ __forceinline__ int64_t head_offset(Strides s, int64_t bh, int H) {
  return (bh / H) * s.b + (bh % H) * s.h;
}

template <int D>
__device__ __forceinline__ float dot_row(const float* a, const float (*b)[D], int j) {
  float s = 0.f;
#pragma unroll
  for (int d = 0; d < D; ++d) s += a[d] * b[j][d];
  return s;
}

// Stages rows [r0, r0 + kCols) of an [n, D] matrix with row stride rs as
// f32; rows past n are 0.
template <class T, int D>
__device__ __forceinline__ void stage_tile(float (*dst)[D], const T* src, int64_t rs, int r0,
                                           int n) {
  for (int idx = threadIdx.x; idx < kCols * D; idx += blockDim.x) {
    const int r = idx / D, d = idx % D;
    dst[r][d] = r0 + r < n ? float(load(src[int64_t(r0 + r) * rs + d])) : 0.f;
  }
}

template <class T, int D>
__global__ void flash_forward_kernel(const T* q, Strides sq, const T* k, Strides sk, const T* v,
                                     Strides sv, T* o, Strides so, float* lse, int H, int T_,
                                     int S, float scale, bool causal, int64_t BH) {
  __shared__ float ks[kCols][D];
  __shared__ float vs[kCols][D];
  // See Note [Attention grid]: (batch·head) spans gridDim.y and gridDim.z.
  const int64_t bh = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
  if (bh >= BH) return;  // the whole block: no barrier is skipped
  const int row = blockIdx.x * kRows + threadIdx.x;
  const bool active = row < T_;
  q += head_offset(sq, bh, H) + int64_t(row) * sq.r;
  k += head_offset(sk, bh, H);
  v += head_offset(sv, bh, H);
  float qr[D], acc[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qr[d] = active ? float(load(q[d])) * scale : 0.f;
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int kend = causal ? min(S, (blockIdx.x + 1) * kRows) : S;
  for (int j0 = 0; j0 < kend; j0 += kCols) {
    stage_tile<T, D>(ks, k, sk.r, j0, S);
    stage_tile<T, D>(vs, v, sv.r, j0, S);
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
  o += head_offset(so, bh, H) + int64_t(row) * so.r;
#pragma unroll
  for (int d = 0; d < D; ++d) o[d] = store<T>(acc[d] * inv);
  lse[bh * T_ + row] = m + logf(l);
}

// D_i = Σ_d dO_i,d · O_i,d for every (batch·head, query row).
template <class T, int D>
__global__ void row_dot_kernel(const T* dout, Strides sdo, const T* out, Strides so,
                               float* delta, int H, int T_, int64_t rows) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const int64_t bh = r / T_, t = r % T_;
  dout += head_offset(sdo, bh, H) + t * sdo.r;
  out += head_offset(so, bh, H) + t * so.r;
  float s = 0.f;
#pragma unroll
  for (int d = 0; d < D; ++d) s += float(load(dout[d])) * float(load(out[d]));
  delta[r] = s;
}

template <class T, int D>
__global__ void flash_dk_dv_kernel(const T* q, Strides sq, const T* k, Strides sk, const T* v,
                                   Strides sv, const T* dout, Strides sdo, const float* lse,
                                   const float* delta, T* dk, Strides sdk, T* dv, Strides sdv,
                                   int H, int T_, int S, float scale, bool causal, int64_t BH) {
  __shared__ float qs[kCols][D];
  __shared__ float dos[kCols][D];
  __shared__ float lse_s[kCols], delta_s[kCols];
  // See Note [Attention grid]: (batch·head) spans gridDim.y and gridDim.z.
  const int64_t bh = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
  if (bh >= BH) return;  // the whole block: no barrier is skipped
  const int col = blockIdx.x * kRows + threadIdx.x;  // this thread's key row
  const bool active = col < S;
  q += head_offset(sq, bh, H);
  dout += head_offset(sdo, bh, H);
  k += head_offset(sk, bh, H) + int64_t(col) * sk.r;
  v += head_offset(sv, bh, H) + int64_t(col) * sv.r;
  lse += bh * T_;
  delta += bh * T_;
  float kr[D], vr[D], dkr[D], dvr[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    kr[d] = active ? float(load(k[d])) : 0.f;
    vr[d] = active ? float(load(v[d])) : 0.f;
    dkr[d] = dvr[d] = 0.f;
  }
  // Causal: queries before this block's first key see none of its keys.
  const int i_begin = causal ? (blockIdx.x * kRows) / kCols * kCols : 0;
  for (int i0 = i_begin; i0 < T_; i0 += kCols) {
    stage_tile<T, D>(qs, q, sq.r, i0, T_);
    stage_tile<T, D>(dos, dout, sdo.r, i0, T_);
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
  dk += head_offset(sdk, bh, H) + int64_t(col) * sdk.r;
  dv += head_offset(sdv, bh, H) + int64_t(col) * sdv.r;
#pragma unroll
  for (int d = 0; d < D; ++d) {
    dk[d] = store<T>(dkr[d]);
    dv[d] = store<T>(dvr[d]);
  }
}

template <class T, int D>
__global__ void flash_dq_kernel(const T* q, Strides sq, const T* k, Strides sk, const T* v,
                                Strides sv, const T* dout, Strides sdo, const float* lse,
                                const float* delta, T* dq, Strides sdq, int H, int T_, int S,
                                float scale, bool causal, int64_t BH) {
  __shared__ float ks[kCols][D];
  __shared__ float vs[kCols][D];
  // See Note [Attention grid]: (batch·head) spans gridDim.y and gridDim.z.
  const int64_t bh = int64_t(blockIdx.z) * gridDim.y + blockIdx.y;
  if (bh >= BH) return;  // the whole block: no barrier is skipped
  const int row = blockIdx.x * kRows + threadIdx.x;
  const bool active = row < T_;
  q += head_offset(sq, bh, H) + int64_t(row) * sq.r;
  dout += head_offset(sdo, bh, H) + int64_t(row) * sdo.r;
  k += head_offset(sk, bh, H);
  v += head_offset(sv, bh, H);
  float qr[D], dor[D], dqr[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    qr[d] = active ? float(load(q[d])) : 0.f;
    dor[d] = active ? float(load(dout[d])) : 0.f;
    dqr[d] = 0.f;
  }
  const float lse_r = active ? lse[bh * T_ + row] : 0.f;
  const float delta_r = active ? delta[bh * T_ + row] : 0.f;
  const int kend = causal ? min(S, (blockIdx.x + 1) * kRows) : S;
  for (int j0 = 0; j0 < kend; j0 += kCols) {
    stage_tile<T, D>(ks, k, sk.r, j0, S);
    stage_tile<T, D>(vs, v, sv.r, j0, S);
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
  dq += head_offset(sdq, bh, H) + int64_t(row) * sdq.r;
#pragma unroll
  for (int d = 0; d < D; ++d) dq[d] = store<T>(dqr[d]);
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

// The operands' contract (flash_attention.h): [B, H, rows, D] with a dense
// last dim; lse and delta packed [B, H, T].
void check_operands(const char* what, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    DDP_CHECK_T(ShapeError, t->dim() == 4 && t->stride(3) == 1,
                "{}: operands must be [B, H, rows, D] with a dense last dim, got {}", what,
                t->describe());
}

}  // namespace

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                             const Tensor& lse, float scale, bool causal, cuda::Stream stream) {
  check_operands("flash_attention_forward", {&q, &k, &v, &out});
  const int H = int(q.size(1)), T_ = int(q.size(2)), S = int(k.size(2)), D = int(q.size(3));
  const int64_t bh = q.size(0) * H;
  if (bh == 0 || T_ == 0) return;
  dispatch_attention(q.dtype(), D, "flash_attention_forward", [&]<class T, int HD>() {
    flash_forward_kernel<T, HD><<<grid_for(T_, bh), kRows, 0, native(stream)>>>(
        ptr<const T>(q), strides_of(q), ptr<const T>(k), strides_of(k), ptr<const T>(v),
        strides_of(v), ptr<T>(out), strides_of(out), ptr<float>(lse), H, T_, S, scale, causal, bh);
    DDP_CUDA_CHECK_LAUNCH("flash_forward_kernel");
  });
}

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& lse, const Tensor& delta,
                              const Tensor& dq, const Tensor& dk, const Tensor& dv, float scale,
                              bool causal, cuda::Stream stream) {
  check_operands("flash_attention_backward", {&q, &k, &v, &out, &dout, &dq, &dk, &dv});
  const int H = int(q.size(1)), T_ = int(q.size(2)), S = int(k.size(2)), D = int(q.size(3));
  const int64_t bh = q.size(0) * H;
  if (bh == 0 || T_ == 0) return;
  dispatch_attention(q.dtype(), D, "flash_attention_backward", [&]<class T, int HD>() {
    const int64_t rows = bh * T_;
    const Strides sq = strides_of(q), sk = strides_of(k), sv = strides_of(v),
                  sdo = strides_of(dout);
    row_dot_kernel<T, HD><<<unsigned((rows + kThreads - 1) / kThreads), kThreads, 0, native(stream)>>>(
        ptr<const T>(dout), sdo, ptr<const T>(out), strides_of(out), ptr<float>(delta), H, T_,
        rows);
    DDP_CUDA_CHECK_LAUNCH("row_dot_kernel");
    flash_dk_dv_kernel<T, HD><<<grid_for(S, bh), kRows, 0, native(stream)>>>(
        ptr<const T>(q), sq, ptr<const T>(k), sk, ptr<const T>(v), sv, ptr<const T>(dout), sdo,
        ptr<const float>(lse), ptr<const float>(delta), ptr<T>(dk), strides_of(dk), ptr<T>(dv),
        strides_of(dv), H, T_, S, scale, causal, bh);
    DDP_CUDA_CHECK_LAUNCH("flash_dk_dv_kernel");
    flash_dq_kernel<T, HD><<<grid_for(T_, bh), kRows, 0, native(stream)>>>(
        ptr<const T>(q), sq, ptr<const T>(k), sk, ptr<const T>(v), sv, ptr<const T>(dout), sdo,
        ptr<const float>(lse), ptr<const float>(delta), ptr<T>(dq), strides_of(dq), H, T_, S,
        scale, causal, bh);
    DDP_CUDA_CHECK_LAUNCH("flash_dq_kernel");
  });
}

}  // namespace ddp::cuda_kernels
