// The CUDA kernels of linear, linear_gelu and linear_gelu_linear's backward:
// cuBLASLt matmuls with fused epilogues, through a cache of plans.
//
// Note [cuBLASLt linear]
// y [rows, out] = x [rows, in] · wᵀ + b, all row-major and contiguous. cuBLASLt
// is column-major, where a row-major [R, C] matrix reads as its transpose
// [C, R]. So the call computes yᵀ (out × rows, ld = out) = op_T(w) · x with
// A = w stored as (in × out, ld = in), transposed, and B = x stored as
// (in × rows, ld = in). The bias epilogue adds a vector of D's row count
// (out) to every column, i.e. b to every row of y, in the same kernel.
// f16/bf16 multiply with f32 accumulation and scale, f32 in plain f32 (no
// TF32, as the bmm op: Note [cuBLAS bmm layouts]), f64 in f64.
// Pointer alignments are passed to the heuristic, so views with an offset
// get an algorithm that can read them; when the heuristic offers none, or the
// chosen one reports NOT_SUPPORTED, a kernel here returns false and the
// caller takes the composed path (matmul, add, gelu).
//
// Note [cuBLASLt GELU in f64]
// The first GPU run found linear_gelu_linear in f64 2e-10 (relative) off
// the CPU's f64 result, far above f64 rounding; the likely cause is that
// the GELU epilogues do not evaluate gelu and gelu' to f64 accuracy (the
// plain f64 GEMMs pass). f64 is libddp's reference
// precision, so f64 takes the composed path (an f64 GEMM, then the tensor
// ops' f64 gelu) for GELU_AUX(_BIAS) and DGELU(_BGRAD); the plain BIAS and
// BGRADB epilogues stay (no transcendental in them).
//
// The epilogues (Note [linear_gelu] in linear.cpp for the op):
// - BIAS: y = x·wᵀ + b (linear's forward).
// - GELU_AUX_BIAS (GELU_AUX without a bias): y = gelu_tanh(x·wᵀ + b), and
//   the pre-activation h = x·wᵀ + b written to an aux matrix of D's shape
//   for the backward. cuBLASLt's GELU is the tanh approximation, and the aux
//   leading dimension must be a multiple of 8, so out % 8 != 0 composes.
// - BGRADB: the weight gradient dW [out, in] = dyᵀ · x is computed as
//   dWᵀ (in × out, ld = in) = x (in × rows) · op_T(dy stored out × rows);
//   B's columns are the out features and its k dimension the rows, so the
//   bias gradient db [out] = Σ_rows dy comes out of the same GEMM.
// - DGELU_BGRAD (DGELU without a bias): it multiplies a GEMM's *output* by
//   gelu'(aux), so it belongs to the GEMM that produces dL/d(gelu output):
//   the input-gradient GEMM of the layer that consumes the GELU (c_proj in
//   the GPT MLP), not any GEMM of linear_gelu itself, whose backward starts
//   from that gradient as an input (linear_gelu alone applies gelu' with
//   one elementwise kernel, then BGRADB). The two-layer op
//   linear_gelu_linear (Note [linear_gelu_linear] in linear.cpp) uses it:
//   dh [rows, hid] = (dz [rows, out] · w2 [out, hid]) ∘ gelu'(h) is, column-
//   major, dhᵀ (hid × rows, ld = hid) = w2 stored (hid × out, ld = hid) ·
//   dz stored (out × rows, ld = out), no transposes; aux = the saved h with
//   dh's layout (ld = hid, a multiple of 8), and the bias gradient, a vector
//   of D's row count (hid) summed over D's columns (the rows), is
//   db1 = Σ_rows dh.
//
// Note [cuBLASLt plan cache]
// Creating the descriptors and asking the heuristic costs host time on
// every call (tens of microseconds, more than a small GEMM's launch), so
// each (device, dtype, transposes, m, n, k, leading dims, epilogue,
// alignments of A, B, D, bias and aux) gets one Plan: the matmul
// descriptor, the three layouts and the chosen algorithm (or the fact that
// there is none, so a declined case is not asked again). The key holds
// every input of the heuristic: the alignments, because the heuristic
// picks algorithms by the pointers it is shown; the epilogue, so the
// DGELU_BGRAD GEMM of linear_gelu_linear's backward is a plan of its own
// even where a plain GEMM has the same shape. The per-call pointers
// (bias, aux) are attributes of the cached descriptor, so a plan's mutex is
// held from setting them until cublasLtMatmul has queued the work (which
// reads the descriptor only while queuing); different plans run in
// parallel. The cache holds at most kMaxPlans entries and is emptied when
// full (a training run uses a handful of shapes; a plan in use stays alive
// through its shared_ptr). linear_cache_stats() counts hits and misses.
//
// One cuBLASLt handle per device serves every thread: the stream and the
// workspace are arguments of each call, so the handle holds no per-call
// state. The handles and the plans are leaked at exit on purpose (Note
// [Leaked singletons] in caching_allocator_cuda.cpp). The workspace comes
// from the caching allocator on the current stream, so it may be released
// right after the call is queued.

#include <cublasLt.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/cuda_check.h"
#include "cuda/on_device.h"
#include "ddp/tensor/cuda.h"
#include "kernel_list.h"
#include "tensor/caching_allocator.h"
#include "tensor/cublas_types.h"
#include "tensor/device_guard.h"

namespace ddp::nn::functional {

namespace {

constexpr size_t kMaxPlans = 1024;

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static auto* handles = new std::unordered_map<int, cublasLtHandle_t>;  // leaked: see Note
  std::lock_guard<std::mutex> g(mu);
  cublasLtHandle_t& h = (*handles)[device];
  if (!h) DDP_CUBLAS_CHECK(cublasLtCreate(&h));
  return h;
}

// The largest power of two, up to 256, that divides the address (256 for null).
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

template <class V>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const V& v) {
  DDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}
template <class V>
void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const V& v) {
  DDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)));
}

// One column-major GEMM as cuBLASLt sees it: D (m × n, ld ldd) = op(A) ·
// op(B) with op(A) m × k and op(B) k × n, then the epilogue. bias is the
// bias (BIAS, GELU_AUX_BIAS) or the bias gradient (BGRADB, DGELU_BGRAD); aux
// the GELU pre-activation (ld aux_ld), written forward and read by DGELU.
struct Gemm {
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  uint64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* a = nullptr;
  const void* b = nullptr;
  void* d = nullptr;
  void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

// Everything the descriptors and the heuristic depend on (Note [cuBLASLt
// plan cache]). Trivially copyable and padding-free, so it hashes and
// compares as bytes.
struct PlanKey {
  int32_t device, dtype, trans_a, trans_b, epilogue;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  uint64_t m, n, k;
  int64_t lda, ldb, ldd, aux_ld;
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
};
static_assert(sizeof(PlanKey) == 10 * 4 + 7 * 8, "PlanKey must have no padding");

struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    // FNV-1a over the bytes.
    const auto* p = reinterpret_cast<const unsigned char*>(&k);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(k); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return size_t(h);
  }
};

struct Plan {
  std::mutex mu;  // held while the per-call pointers are set and the matmul is queued
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  bool found = false;  // the heuristic offered an algorithm
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  ~Plan() {  // never throws: the statuses are ignored
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};

struct PlanCache {
  std::mutex mu;
  std::unordered_map<PlanKey, std::shared_ptr<Plan>, PlanKeyHash> plans;
  kernels::PlanCacheStats stats;
};

PlanCache& plan_cache() {
  static auto* c = new PlanCache;  // leaked: see Note [cuBLASLt linear]
  return *c;
}

bool uses_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_BGRADB || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}
bool uses_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

void set_pointers(const Plan& plan, const Gemm& g) {
  if (uses_bias(g.epilogue)) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias);
  if (uses_aux(g.epilogue)) set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, g.aux);
}

// Builds the descriptors of g and asks the heuristic once.
std::shared_ptr<Plan> make_plan(const Gemm& g, const CublasTypes& t, int device,
                                cublasLtHandle_t h) {
  auto plan = std::make_shared<Plan>();
  DDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, t.compute, t.scale));
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, g.trans_a);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, g.trans_b);
  set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, g.epilogue);
  if (uses_bias(g.epilogue)) set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, t.data);
  if (uses_aux(g.epilogue)) set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, g.aux_ld);
  set_pointers(*plan, g);  // the heuristic reads their alignment
  const bool ta = g.trans_a == CUBLAS_OP_T, tb = g.trans_b == CUBLAS_OP_T;
  // Stored shapes: A is m × k (k × m when transposed), B k × n (n × k).
  DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, t.data, ta ? g.k : g.m, ta ? g.m : g.k,
                                              g.lda));
  DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, t.data, tb ? g.n : g.k, tb ? g.k : g.n,
                                              g.ldb));
  DDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, t.data, g.m, g.n, g.ldd));

  int major = 0;
  DDP_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  // NVIDIA's guidance, as for cuBLAS: 32 MiB on Hopper and newer, 4 MiB before.
  const uint64_t ws_bytes = uint64_t(major >= 9 ? 32 : 4) << 20;
  cublasLtMatmulPreference_t pref = nullptr;
  DDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<void, void (*)(void*)> pref_owner(pref, [](void* p) {
    cublasLtMatmulPreferenceDestroy(static_cast<cublasLtMatmulPreference_t>(p));
  });
  set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws_bytes);
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(g.a));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(g.b));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(g.d));
  set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(g.d));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, plan->desc, plan->a, plan->b,
                                                           plan->d, plan->d, pref, 1, &result,
                                                           &found);
  if (hs != CUBLAS_STATUS_NOT_SUPPORTED && hs != CUBLAS_STATUS_INVALID_VALUE) DDP_CUBLAS_CHECK(hs);
  plan->found = hs == CUBLAS_STATUS_SUCCESS && found > 0;
  if (plan->found) {
    plan->algo = result.algo;
    plan->workspace = size_t(result.workspaceSize);
  }
  return plan;
}

std::shared_ptr<Plan> find_plan(const Gemm& g, const CublasTypes& t, int device,
                                cublasLtHandle_t h) {
  const PlanKey key{device,
                    int32_t(t.data),
                    int32_t(g.trans_a),
                    int32_t(g.trans_b),
                    int32_t(g.epilogue),
                    alignment(g.a),
                    alignment(g.b),
                    alignment(g.d),
                    alignment(g.bias),
                    alignment(g.aux),
                    g.m,
                    g.n,
                    g.k,
                    g.lda,
                    g.ldb,
                    g.ldd,
                    g.aux_ld};
  PlanCache& cache = plan_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.plans.find(key);
    if (it != cache.plans.end()) {
      ++cache.stats.hits;
      return it->second;
    }
    ++cache.stats.misses;
  }
  // Made outside the lock (the heuristic takes a while); a thread that made
  // the same plan meanwhile wins and this one is dropped.
  std::shared_ptr<Plan> plan = make_plan(g, t, device, h);
  std::lock_guard<std::mutex> lock(cache.mu);
  if (cache.plans.size() >= kMaxPlans) cache.plans.clear();
  auto it = cache.plans.emplace(key, std::move(plan)).first;
  cache.stats.entries = int64_t(cache.plans.size());
  return it->second;
}

// Runs g on dtype's types on device's current stream; false when cuBLASLt
// declines it (nothing written).
bool run_gemm(const Gemm& g, DType dtype, int device) {
  const std::optional<CublasTypes> types = cublas_types(dtype);
  if (!types) return false;
  CudaDeviceGuard guard(device);
  cudaStream_t stream = cuda_kernels::native(cuda::current_stream(device));
  cublasLtHandle_t h = lt_handle(device);
  std::shared_ptr<Plan> plan = find_plan(g, *types, device, h);
  if (!plan->found) return false;

  Storage workspace = cuda_allocate(plan->workspace, device);
  const float alpha_f = 1.0f, beta_f = 0.0f;
  const double alpha_d = 1.0, beta_d = 0.0;
  const bool f64 = types->scale == CUDA_R_64F;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  std::lock_guard<std::mutex> lock(plan->mu);
  set_pointers(*plan, g);
  const cublasStatus_t st = cublasLtMatmul(h, plan->desc, alpha, g.a, plan->a, g.b, plan->b, beta,
                                           g.d, plan->d, g.d, plan->d, &plan->algo,
                                           workspace.data(), plan->workspace, stream);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  DDP_CUBLAS_CHECK(st);
  return true;
}

// y = x·wᵀ (+ bias) with the bias epilogue, or with GELU_AUX(_BIAS) when pre
// is defined: y = gelu_tanh(h), pre = h. See Note [cuBLASLt linear].
bool forward_gemm(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                  const Tensor& pre) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  if (rows == 0 || out == 0) return true;  // nothing to write
  if (in == 0) return false;               // y = b: the composed path fills it
  const bool gelu = pre.defined();
  if (gelu && out % 8 != 0) return false;  // the aux ld must be a multiple of 8
  if (gelu && x.dtype() == DType::f64) return false;  // Note [cuBLASLt GELU in f64]
  Gemm g;
  g.trans_a = CUBLAS_OP_T;
  g.m = uint64_t(out);
  g.n = uint64_t(rows);
  g.k = uint64_t(in);
  g.lda = in;
  g.ldb = in;
  g.ldd = out;
  g.a = w.data_ptr();
  g.b = x.data_ptr();
  g.d = y.data_ptr();
  g.bias = bias.defined() ? bias.data_ptr() : nullptr;
  if (gelu) {
    g.epilogue = bias.defined() ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    g.aux = pre.data_ptr();
    g.aux_ld = out;
  } else {
    g.epilogue = bias.defined() ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  }
  return run_gemm(g, x.dtype(), x.device().index);
}

bool cublaslt_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  return forward_gemm(x, w, bias, y, Tensor());
}

bool cublaslt_linear_gelu(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                          const Tensor& pre) {
  return forward_gemm(x, w, bias, y, pre);
}

// dw = dyᵀ·x, and db = Σ_rows dy through BGRADB when db is defined.
bool cublaslt_linear_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                     const Tensor& db) {
  const int64_t rows = x.size(0), in = x.size(1), out = dy.size(1);
  if (rows == 0 || in == 0 || out == 0) return false;  // zero-sized: the composed path fills zeros
  Gemm g;
  g.trans_b = CUBLAS_OP_T;
  g.m = uint64_t(in);
  g.n = uint64_t(out);
  g.k = uint64_t(rows);
  g.lda = in;
  g.ldb = out;
  g.ldd = in;
  g.a = x.data_ptr();
  g.b = dy.data_ptr();
  g.d = dw.data_ptr();
  if (db.defined()) {
    g.epilogue = CUBLASLT_EPILOGUE_BGRADB;
    g.bias = db.data_ptr();
  }
  return run_gemm(g, x.dtype(), x.device().index);
}

// dh = (dz·w2) ∘ gelu'(h), and db = Σ_rows dh when db is defined, in one
// GEMM with the DGELU(_BGRAD) epilogue (Note [cuBLASLt linear]).
bool cublaslt_linear_dgelu_bgrad(const Tensor& dz, const Tensor& w2, const Tensor& h,
                                 const Tensor& dh, const Tensor& db) {
  const int64_t rows = dz.size(0), out = dz.size(1), hid = w2.size(1);
  if (rows == 0 || out == 0 || hid == 0) return false;  // the composed path fills zeros
  if (hid % 8 != 0) return false;                       // the aux ld must be a multiple of 8
  if (dz.dtype() == DType::f64) return false;           // Note [cuBLASLt GELU in f64]
  Gemm g;
  g.m = uint64_t(hid);
  g.n = uint64_t(rows);
  g.k = uint64_t(out);
  g.lda = hid;
  g.ldb = out;
  g.ldd = hid;
  g.a = w2.data_ptr();
  g.b = dz.data_ptr();
  g.d = dh.data_ptr();
  g.aux = h.data_ptr();
  g.aux_ld = hid;
  g.epilogue = db.defined() ? CUBLASLT_EPILOGUE_DGELU_BGRAD : CUBLASLT_EPILOGUE_DGELU;
  g.bias = db.defined() ? db.data_ptr() : nullptr;
  return run_gemm(g, dz.dtype(), dz.device().index);
}

kernels::PlanCacheStats cublaslt_cache_stats() {
  PlanCache& c = plan_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  kernels::PlanCacheStats s = c.stats;
  s.entries = int64_t(c.plans.size());
  return s;
}

}  // namespace

DDP_REGISTER_KERNEL(linear_forward, CUDA, cublaslt_linear)
DDP_REGISTER_KERNEL(linear_gelu_forward, CUDA, cublaslt_linear_gelu)
DDP_REGISTER_KERNEL(linear_backward_weight, CUDA, cublaslt_linear_backward_weight)
DDP_REGISTER_KERNEL(linear_dgelu_bgrad, CUDA, cublaslt_linear_dgelu_bgrad)
DDP_REGISTER_KERNEL(linear_cache_stats, CUDA, cublaslt_cache_stats)

}  // namespace ddp::nn::functional
