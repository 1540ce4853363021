// Batched matmul on the CPU through OpenBLAS.
//
// Note [CPU bmm layouts]
// BLAS reads a matrix through (transpose flag, leading dimension). An operand
// whose last two dims are row-major (column stride 1) is passed as NoTrans
// with ld = row stride; a column-major one (row stride 1) as Trans with ld =
// column stride, so transposed views need no copy. A dim of size 1 makes its
// stride irrelevant, and BLAS still wants ld >= the other extent, so such ld
// are replaced by a legal value. Anything BLAS cannot express (a broadcast
// row, stride 0 inside a matrix) is packed into a contiguous buffer first.
// f16/bf16 are widened to f32, multiplied with sgemm (f32 accumulation, as
// the contract asks) and rounded back once.

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include "cpu/convert.h"
#include "cpu/kernels.h"
#include "cpu/strided.h"
#include "ddp/core/dispatch.h"

namespace ddp::cpu_kernels {

namespace {

struct Layout {
  bool ok;  // false: BLAS cannot read it in place, pack first
  CBLAS_TRANSPOSE trans;
  int64_t ld;
};

// How BLAS (row-major convention) reads an R x C matrix with strides rs, cs.
Layout blas_layout(int64_t R, int64_t C, int64_t rs, int64_t cs) {
  if ((cs == 1 || C == 1) && (R == 1 || rs >= std::max<int64_t>(1, C)))
    return {true, CblasNoTrans, R == 1 ? std::max<int64_t>(1, C) : rs};
  if ((rs == 1 || R == 1) && (C == 1 || cs >= std::max<int64_t>(1, R)))
    return {true, CblasTrans, C == 1 ? std::max<int64_t>(1, R) : cs};
  return {false, CblasNoTrans, C};
}

// Copies an R x C strided matrix of T into a dense row-major buffer of U.
template <class T, class U>
void pack(const T* src, int64_t R, int64_t C, int64_t rs, int64_t cs, U* dst) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) dst[r * C + c] = U(load(src[r * rs + c * cs]));
}

void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const float* a,
          int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, blasint(M), blasint(N), blasint(K), 1.0f, a, blasint(lda), b,
              blasint(ldb), 0.0f, c, blasint(ldc));
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const double* a,
          int64_t lda, const double* b, int64_t ldb, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, blasint(M), blasint(N), blasint(K), 1.0, a, blasint(lda), b,
              blasint(ldb), 0.0, c, blasint(ldc));
}

struct Operand {
  int64_t R, C, batch_stride, rs, cs;
};
Operand operand_of(const Tensor& t) {
  return {t.shape()[1], t.shape()[2], t.strides()[0], t.strides()[1], t.strides()[2]};
}

// f32 / f64: straight to BLAS, packing only what it cannot read in place.
template <class T>
void bmm_blas(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t B = out.shape()[0], M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  const Operand oa = operand_of(a), ob = operand_of(b);
  const T* pa = ptr<const T>(a);
  const T* pb = ptr<const T>(b);
  T* pc = ptr<T>(out);
  Layout la = blas_layout(M, K, oa.rs, oa.cs);
  Layout lb = blas_layout(K, N, ob.rs, ob.cs);

  // One shared right operand and a row-major left operand whose batches are
  // evenly spaced rows: the whole batch is one [B*M, K] @ [K, N] gemm (the
  // common "activations @ weight" case).
  if (B > 1 && la.ok && lb.ok && ob.batch_stride == 0 && la.trans == CblasNoTrans) {
    // With M == 1 the batch stride is the row stride of the folded matrix.
    const int64_t ld = M == 1 ? oa.batch_stride : la.ld;
    const bool even = M == 1 ? (ld >= K && ld <= INT_MAX) : oa.batch_stride == M * la.ld;
    if (even) {
      gemm(CblasNoTrans, lb.trans, B * M, N, K, pa, ld, pb, lb.ld, pc, N);
      return;
    }
  }

  std::vector<T> abuf(la.ok ? 0 : size_t(M * K)), bbuf(lb.ok ? 0 : size_t(K * N));
  const T* packed_b = nullptr;  // the last B matrix packed, reused for batch stride 0
  for (int64_t i = 0; i < B; ++i) {
    const T* ai = pa + i * oa.batch_stride;
    const T* bi = pb + i * ob.batch_stride;
    if (!la.ok) {
      pack(ai, M, K, oa.rs, oa.cs, abuf.data());
      ai = abuf.data();
    }
    if (!lb.ok) {
      if (packed_b != bi) pack(bi, K, N, ob.rs, ob.cs, bbuf.data());
      packed_b = bi;
      bi = bbuf.data();
    }
    gemm(la.ok ? la.trans : CblasNoTrans, lb.ok ? lb.trans : CblasNoTrans, M, N, K, ai,
         la.ok ? la.ld : K, bi, lb.ok ? lb.ld : N, pc + i * M * N, N);
  }
}

// f16 / bf16: widen each batch's operands to dense f32, sgemm, round back.
template <class T>
void bmm_widened(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t B = out.shape()[0], M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  const Operand oa = operand_of(a), ob = operand_of(b);
  const T* pa = ptr<const T>(a);
  const T* pb = ptr<const T>(b);
  T* pc = ptr<T>(out);
  std::vector<float> abuf(size_t(M * K)), bbuf(size_t(K * N)), cbuf(size_t(M * N));
  const T* widened_a = nullptr;
  const T* widened_b = nullptr;
  for (int64_t i = 0; i < B; ++i) {
    const T* ai = pa + i * oa.batch_stride;
    const T* bi = pb + i * ob.batch_stride;
    if (ai != widened_a) pack(ai, M, K, oa.rs, oa.cs, abuf.data());
    if (bi != widened_b) pack(bi, K, N, ob.rs, ob.cs, bbuf.data());
    widened_a = ai;
    widened_b = bi;
    gemm(CblasNoTrans, CblasNoTrans, M, N, K, abuf.data(), K, bbuf.data(), N, cbuf.data(), N);
    T* ci = pc + i * M * N;
    for (int64_t j = 0; j < M * N; ++j) ci[j] = T(cbuf[size_t(j)]);
  }
}

}  // namespace

void bmm(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t B = out.shape()[0], M = out.shape()[1], N = out.shape()[2], K = a.shape()[2];
  // Validate the dtype before the early returns so empty inputs fail alike.
  dispatch_floating(out.dtype(), "bmm", [&]<class T>() {
    if (B == 0 || M == 0 || N == 0) return;
    if (K == 0) {  // an empty sum; BLAS would leave C untouched or read it
      T* pc = ptr<T>(out);
      std::fill(pc, pc + B * M * N, T(0.0f));
      return;
    }
    // OpenBLAS takes 32-bit sizes and leading dimensions.
    const int64_t biggest =
        std::max({B * M, N, K, a.strides()[1], a.strides()[2], b.strides()[1], b.strides()[2]});
    if (biggest > INT_MAX)
      DDP_THROW(NotImplementedError,
                "bmm: a dimension or stride exceeds 2^31-1 on the CPU ({} @ {})", a.describe(),
                b.describe());
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      bmm_blas<T>(a, b, out);
    else
      bmm_widened<T>(a, b, out);
  });
}

}  // namespace ddp::cpu_kernels
