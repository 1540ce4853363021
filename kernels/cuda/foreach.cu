// Multi-tensor ("foreach") kernels: one launch updates or reduces a whole
// list of tensors. Element arithmetic: kernels/common/foreach_math.h.
//
// Note [Multi-tensor launches]
// A launch gets a TensorList by value: up to kMax tensors' data pointers
// (one row per operand: param, grad, state...), their sizes, per-tensor
// scalars (AdamW's bias corrections, SGD's "fresh buffer" flag) and the
// running count of kChunk-element chunks. Chunk c of the concatenated list
// belongs to the first tensor whose chunk_end exceeds c (a binary search per
// chunk, in kernel-parameter memory); blocks take chunks grid-stride, so one
// launch of at most kMaxGrid blocks walks every element of every tensor.
// Only a list longer than kMax takes several launches. kMax follows from
// the kernel-parameter limit: 4 KB in general, 32 KB from CUDA 12.1 on
// Volta and newer (both the sm_80/sm_90 targets), i.e. a few hundred
// tensors per launch with the newer limit, so a whole ResNet-50 parameter
// group is one launch. Reductions write one f64 partial per block and a
// one-block kernel folds the partials in a fixed order: deterministic.

#include <algorithm>

#include "cuda/common.cuh"
#include "kernel_list.h"

namespace ddp::cuda_kernels {

namespace {

#if CUDART_VERSION >= 12010
constexpr size_t kArgBytes = 32000;
#else
constexpr size_t kArgBytes = 4000;
#endif
constexpr int64_t kChunk = 16384;
constexpr int64_t kMaxGrid = 1024;

template <int N, int A>
struct TensorList {
  static constexpr int kAux = A > 0 ? A : 1;
  // 64 bytes are left for the counts and the kernels' other arguments.
  static constexpr int kMax =
      int((kArgBytes - 64) / (N * sizeof(void*) + 2 * sizeof(int64_t) + kAux * sizeof(double)));
  int count = 0;
  int64_t total_chunks = 0;
  void* ptr[N][kMax];
  int64_t numel[kMax];
  int64_t chunk_end[kMax];  // chunks of tensors 0..k together
  double aux[kAux][kMax];

  // Tensor and element range [begin, end) of chunk c.
  __device__ __forceinline__ void locate(int64_t c, int& k, int64_t& begin, int64_t& end) const {
    int lo = 0, hi = count - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (chunk_end[mid] > c)
        hi = mid;
      else
        lo = mid + 1;
    }
    k = lo;
    const int64_t first = lo == 0 ? 0 : chunk_end[lo - 1];
    begin = (c - first) * kChunk;
    end = min(begin + kChunk, numel[lo]);
  }
};

unsigned grid_of(int64_t chunks) { return unsigned(std::clamp<int64_t>(chunks, 1, kMaxGrid)); }

// Packs the tensors of `lists` (operand rows; a null or empty list leaves its
// row null) into as few TensorLists as the limit allows and returns them.
// fill_aux(k, slot, list) sets tensor k's per-tensor scalars.
template <int N, int A, class FillAux>
std::vector<TensorList<N, A>> pack(const std::array<const Tensors*, N>& lists, FillAux fill_aux) {
  using List = TensorList<N, A>;
  std::vector<List> out;
  const Tensors& first = *lists[0];
  List cur;
  for (size_t k = 0; k < first.size(); ++k) {
    const int64_t n = first[k].numel();
    if (n == 0) continue;
    if (cur.count == List::kMax) {
      out.push_back(cur);
      cur = List();
    }
    const int slot = cur.count++;
    for (int j = 0; j < N; ++j)
      cur.ptr[j][slot] = lists[j] && !lists[j]->empty() ? (*lists[j])[k].data_ptr() : nullptr;
    cur.numel[slot] = n;
    cur.total_chunks += (n + kChunk - 1) / kChunk;
    cur.chunk_end[slot] = cur.total_chunks;
    fill_aux(k, slot, cur);
  }
  if (cur.count > 0) out.push_back(cur);
  return out;
}

auto no_aux = [](size_t, int, auto&) {};

// ---- optimizer steps ------------------------------------------------------------

template <class T>
static __global__ void sgd_kernel(const TensorList<3, 1> list, const kernels::SgdScalars s,
                                  const float* found_inf) {
  using C = compute_t<T>;
  if (found_inf && *found_inf != 0.0f) return;  // GradScaler saw inf/NaN: skip on the device
  for (int64_t c = blockIdx.x; c < list.total_chunks; c += gridDim.x) {
    int k;
    int64_t begin, end;
    list.locate(c, k, begin, end);
    T* p = static_cast<T*>(list.ptr[0][k]);
    const T* g = static_cast<const T*>(list.ptr[1][k]);
    T* b = static_cast<T*>(list.ptr[2][k]);
    const bool fresh = list.aux[0][k] != 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      C pv = load(p[i]);
      C bv = b && !fresh ? load(b[i]) : C(0);
      kernels::sgd_element(pv, load(g[i]), bv, fresh, s);
      p[i] = store<T>(pv);
      if (b) b[i] = store<T>(bv);
    }
  }
}

template <class T>
static __global__ void adamw_kernel(const TensorList<6, 2> list, const kernels::AdamWScalars s,
                                    const float* found_inf) {
  using C = compute_t<T>;
  if (found_inf && *found_inf != 0.0f) return;  // GradScaler saw inf/NaN: skip on the device
  for (int64_t c = blockIdx.x; c < list.total_chunks; c += gridDim.x) {
    int k;
    int64_t begin, end;
    list.locate(c, k, begin, end);
    T* p = static_cast<T*>(list.ptr[0][k]);
    const T* g = static_cast<const T*>(list.ptr[1][k]);
    T* m = static_cast<T*>(list.ptr[2][k]);
    T* v = static_cast<T*>(list.ptr[3][k]);
    T* vmax = static_cast<T*>(list.ptr[4][k]);
    // Row 5: the device step count (already counted by count_steps_kernel),
    // else the host's bias corrections in aux.
    const double* step = static_cast<const double*>(list.ptr[5][k]);
    const kernels::AdamWTensorScalars t =
        step ? kernels::adamw_bias_corrections(s.lr, s.beta1, s.beta2, *step)
             : kernels::AdamWTensorScalars{list.aux[0][k], list.aux[1][k]};
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      C pv = load(p[i]), mv = load(m[i]), vv = load(v[i]);
      C vmaxv = vmax ? load(vmax[i]) : C(0);
      kernels::adamw_element(pv, load(g[i]), mv, vv, vmaxv, s, t);
      p[i] = store<T>(pv);
      m[i] = store<T>(mv);
      v[i] = store<T>(vv);
      if (vmax) vmax[i] = store<T>(vmaxv);
    }
  }
}

// steps[k] += 1 for every tensor of the list, unless found_inf is set: the
// device step counts of AdamW (one thread per tensor), before its update.
static __global__ void count_steps_kernel(const TensorList<1, 0> list, const float* found_inf) {
  if (found_inf && *found_inf != 0.0f) return;
  for (int k = threadIdx.x; k < list.count; k += blockDim.x)
    *static_cast<double*>(list.ptr[0][k]) += 1;
}

// ---- norm and scaling -----------------------------------------------------------

static __device__ __forceinline__ double fold(double acc, double x, double p, bool is_max) {
  return is_max ? kernels::max_propagating_nan(acc, fabs(x)) : acc + kernels::norm_term(x, p);
}

template <class T>
static __global__ void norm_kernel(const TensorList<1, 0> list, double p, bool is_max,
                                   double* partial) {
  __shared__ double sm[kThreads];
  double acc = 0;
  for (int64_t c = blockIdx.x; c < list.total_chunks; c += gridDim.x) {
    int k;
    int64_t begin, end;
    list.locate(c, k, begin, end);
    const T* x = static_cast<const T*>(list.ptr[0][k]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x)
      acc = fold(acc, double(load(x[i])), p, is_max);
  }
  acc = block_all_reduce(acc, sm, [is_max](double a, double b) {
    return is_max ? kernels::max_propagating_nan(a, b) : a + b;
  });
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

static __global__ void norm_finish_kernel(const double* partial, int64_t n, bool is_max,
                                          double* out) {
  __shared__ double sm[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    acc = is_max ? kernels::max_propagating_nan(acc, partial[i]) : acc + partial[i];
  acc = block_all_reduce(acc, sm, [is_max](double a, double b) {
    return is_max ? kernels::max_propagating_nan(a, b) : a + b;
  });
  if (threadIdx.x == 0) *out = acc;
}

// x *= factor, where factor is given, or (scale != null) f32(1 / f64(*scale)),
// GradScaler's unscale read on the device.
template <class T>
static __global__ void mul_kernel(const TensorList<1, 0> list, double factor, const float* scale,
                                  float* found_inf) {
  using C = compute_t<T>;
  if (scale) factor = double(float(1.0 / double(*scale)));
  const C f = C(factor);
  bool bad = false;
  for (int64_t c = blockIdx.x; c < list.total_chunks; c += gridDim.x) {
    int k;
    int64_t begin, end;
    list.locate(c, k, begin, end);
    T* x = static_cast<T*>(list.ptr[0][k]);
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const C v = load(x[i]);
      bad = bad || !kernels::is_finite_value(v);
      x[i] = store<T>(v * f);
    }
  }
  // Every writer stores the same 1, so the race is benign.
  if (bad && found_inf) *found_inf = 1.0f;
}

// GradScaler's scale update (update_scale in foreach_math.h), one thread.
static __global__ void update_scale_kernel(float* scale, int64_t* tracker, const float* found_inf,
                                           const kernels::ScaleUpdate u) {
  kernels::update_scale(*scale, *tracker, *found_inf != 0.0f, u);
}

// The tensors of `xs` with dtype d, in order.
Tensors of_dtype(const Tensors& xs, DType d) {
  Tensors out;
  for (const Tensor& x : xs)
    if (x.dtype() == d) out.push_back(x);
  return out;
}

constexpr DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

static void foreach_sgd(const Tensors& params, const Tensors& grads, const Tensors& bufs,
                 const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s,
                 const Tensor& found_inf, cuda::Stream stream) {
  if (params.empty()) return;
  const float* flag = found_inf.defined() ? ptr<float>(found_inf) : nullptr;
  auto lists = pack<3, 1>({&params, &grads, &bufs}, [&](size_t k, int slot, auto& l) {
    l.aux[0][slot] = !fresh.empty() && fresh[k] ? 1.0 : 0.0;
  });
  dispatch_floating(params[0].dtype(), "foreach_sgd", [&]<class T>() {
    for (const auto& l : lists) {
      sgd_kernel<T><<<grid_of(l.total_chunks), kThreads, 0, native(stream)>>>(l, s, flag);
      DDP_CUDA_CHECK_LAUNCH("sgd_kernel");
    }
  });
}

static void foreach_adamw(const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                   const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                   const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                   const Tensors& steps, const kernels::AdamWScalars& s,
                   const Tensor& found_inf, cuda::Stream stream) {
  if (params.empty()) return;
  const float* flag = found_inf.defined() ? ptr<float>(found_inf) : nullptr;
  if (!steps.empty()) {
    // Count the step first (the update reads the new count); a 0-element
    // parameter is stepped too, so its count is packed by hand.
    TensorList<1, 0> counts;
    for (size_t k = 0; k < steps.size(); ++k) {
      if (counts.count == TensorList<1, 0>::kMax) {
        count_steps_kernel<<<1, kThreads, 0, native(stream)>>>(counts, flag);
        DDP_CUDA_CHECK_LAUNCH("count_steps_kernel");
        counts = TensorList<1, 0>();
      }
      counts.ptr[0][counts.count++] = steps[k].data_ptr();
    }
    count_steps_kernel<<<1, kThreads, 0, native(stream)>>>(counts, flag);
    DDP_CUDA_CHECK_LAUNCH("count_steps_kernel");
  }
  auto lists = pack<6, 2>({&params, &grads, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs, &steps},
                          [&](size_t k, int slot, auto& l) {
                            l.aux[0][slot] = per_tensor.empty() ? 0.0 : per_tensor[k].step_size;
                            l.aux[1][slot] =
                                per_tensor.empty() ? 1.0 : per_tensor[k].bias_correction2_sqrt;
                          });
  dispatch_floating(params[0].dtype(), "foreach_adamw", [&]<class T>() {
    for (const auto& l : lists) {
      adamw_kernel<T><<<grid_of(l.total_chunks), kThreads, 0, native(stream)>>>(l, s, flag);
      DDP_CUDA_CHECK_LAUNCH("adamw_kernel");
    }
  });
}

static void foreach_norm(const Tensors& xs, double p, const Tensor& out, cuda::Stream stream) {
  const bool is_max = p == HUGE_VAL;
  struct Launch {
    DType dtype;
    TensorList<1, 0> list;
  };
  std::vector<Launch> launches;
  int64_t blocks = 0;
  for (DType d : kFloatingDTypes) {
    const Tensors group = of_dtype(xs, d);
    for (const auto& l : pack<1, 0>({&group}, no_aux)) {
      launches.push_back({d, l});
      blocks += grid_of(l.total_chunks);
    }
  }
  if (launches.empty()) {  // nothing to fold: the sum (or max) of no elements is 0
    norm_finish_kernel<<<1, kThreads, 0, native(stream)>>>(nullptr, 0, is_max, ptr<double>(out));
    DDP_CUDA_CHECK_LAUNCH("norm_finish_kernel");
    return;
  }
  Tensor partial = Tensor::empty({blocks}, TensorOptions(DType::f64).device(out.device()));
  int64_t at = 0;
  for (const Launch& l : launches) {
    dispatch_floating(l.dtype, "foreach_norm", [&]<class T>() {
      norm_kernel<T><<<grid_of(l.list.total_chunks), kThreads, 0, native(stream)>>>(
          l.list, p, is_max, ptr<double>(partial) + at);
      DDP_CUDA_CHECK_LAUNCH("norm_kernel");
    });
    at += grid_of(l.list.total_chunks);
  }
  norm_finish_kernel<<<1, kThreads, 0, native(stream)>>>(ptr<double>(partial), blocks, is_max,
                                                 ptr<double>(out));
  DDP_CUDA_CHECK_LAUNCH("norm_finish_kernel");
}

static void foreach_mul_(const Tensors& xs, double factor, const Tensor& scale,
                         const Tensor& found_inf, cuda::Stream stream) {
  float* flag = found_inf.defined() ? ptr<float>(found_inf) : nullptr;
  const float* scale_ptr = scale.defined() ? ptr<float>(scale) : nullptr;
  for (DType d : kFloatingDTypes) {
    const Tensors group = of_dtype(xs, d);
    if (group.empty()) continue;
    const auto lists = pack<1, 0>({&group}, no_aux);
    dispatch_floating(d, "foreach_mul_", [&]<class T>() {
      for (const auto& l : lists) {
        mul_kernel<T><<<grid_of(l.total_chunks), kThreads, 0, native(stream)>>>(l, factor,
                                                                                 scale_ptr, flag);
        DDP_CUDA_CHECK_LAUNCH("mul_kernel");
      }
    });
  }
}

// The registered kernels: each runs on the lists' device and its current
// stream; the two reductions read their result back, which waits for it.
DDP_REGISTER_KERNEL(foreach_sgd_step, CUDA,
                    [](const Tensors& params, const Tensors& grads, const Tensors& bufs,
                       const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s,
                       const Tensor& found_inf) {
                      if (params.empty()) return;
                      OnDevice on(params[0]);
                      foreach_sgd(params, grads, bufs, fresh, s, found_inf, on.stream);
                    })
DDP_REGISTER_KERNEL(foreach_adamw_step, CUDA,
                    [](const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                       const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                       const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                       const Tensors& steps, const kernels::AdamWScalars& s,
                       const Tensor& found_inf) {
                      if (params.empty()) return;
                      OnDevice on(params[0]);
                      foreach_adamw(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs,
                                    per_tensor, steps, s, found_inf, on.stream);
                    })
DDP_REGISTER_KERNEL(foreach_pow_sum, CUDA, [](const Tensors& xs, double p) -> double {
  if (xs.empty()) return 0.0;
  OnDevice on(xs[0]);
  Tensor out = Tensor::empty({}, TensorOptions(DType::f64).device(xs[0].device()));
  foreach_norm(xs, p, out, on.stream);
  return out.item<double>();
})
DDP_REGISTER_KERNEL(foreach_mul, CUDA, [](const Tensors& xs, double factor, bool check_finite) {
  if (xs.empty()) return false;
  OnDevice on(xs[0]);
  Tensor found;
  if (check_finite) found = Tensor::zeros({}, TensorOptions(DType::f32).device(xs[0].device()));
  foreach_mul_(xs, factor, Tensor(), found, on.stream);
  return check_finite && found.item<float>() != 0.0f;
})
DDP_REGISTER_KERNEL(foreach_unscale, CUDA,
                    [](const Tensors& xs, const Tensor& scale, const Tensor& found_inf) {
                      if (xs.empty()) return;
                      OnDevice on(xs[0]);
                      foreach_mul_(xs, 1.0, scale, found_inf, on.stream);
                    })
static void update_scale_on_device(const Tensor& scale, const Tensor& growth_tracker,
                             const Tensor& found_inf, const kernels::ScaleUpdate& u) {
  OnDevice on(scale);
  update_scale_kernel<<<1, 1, 0, native(on.stream)>>>(
      ptr<float>(scale), ptr<int64_t>(growth_tracker), ptr<float>(found_inf), u);
  DDP_CUDA_CHECK_LAUNCH("update_scale_kernel");
}
DDP_REGISTER_KERNEL(amp_update_scale, CUDA, update_scale_on_device)

}  // namespace ddp::cuda_kernels
