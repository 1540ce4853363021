// See src/optim/foreach.h: argument checks, dtype buckets, tensors of any
// dense layout as flat blocks (staging only the others), and the choice
// between the CPU kernels and the CUDA launchers.

#include "optim/foreach.h"

#include <array>
#include <atomic>
#include <cmath>
#include <map>

#include "kernel_list.h"
#include "ddp/autograd/grad_mode.h"
#include "ddp/tensor/dense_layout.h"

namespace ddp::optim::multi_tensor {

namespace {

// Checks one list against the parameters (see foreach.h): `optional` lists
// may be empty.
void check_list(const char* op, const char* what, const Tensors& list, const Tensors& params,
                bool optional) {
  if (optional && list.empty()) return;
  DDP_CHECK(list.size() == params.size(), "foreach {}: {} {} tensors for {} parameters", op,
            list.size(), what, params.size());
  for (size_t k = 0; k < list.size(); ++k) {
    const Tensor& t = list[k];
    const Tensor& p = params[k];
    DDP_CHECK(t.defined(), "foreach {}: {}[{}] is undefined", op, what, k);
    DDP_CHECK_T(DeviceError, t.device() == params[0].device(),
                "foreach {}: {}[{}] is {}, but {}[0] is on {}; all tensors must be on one "
                "device",
                op, what, k, t.describe(), "params", params[0].device().str());
    DDP_CHECK(is_floating(t.dtype()), "foreach {}: {}[{}] is {}; expected a floating dtype", op,
              what, k, t.describe());
    DDP_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype(),
              "foreach {}: {}[{}] is {}, but params[{}] is {}", op, what, k, t.describe(), k,
              p.describe());
  }
}

// Note [Optimizer tensors in any dense layout]
// An optimizer's update is elementwise: it needs entry k of every list to
// meet element for element, not any particular order. So when params[k] and
// the k-th entry of every other list are dense in one layout (contiguous,
// channels-last, any permutation), the kernels get each one's flat block
// (flat_view): no copy, whatever the layout. Only an entry whose tensors
// are not dense, or disagree in layout, goes through contiguous copies (a
// written tensor is copied back after the kernel).
std::atomic<int64_t> g_staged_copies{0};

class Staged {
 public:
  // Entry k of every list as the kernels take it. lists[0] are the
  // parameters; `written[i]` says whether the kernel writes lists[i].
  void prepare(const std::vector<Tensors*>& lists, const std::vector<bool>& written) {
    const size_t n = lists[0]->size();
    for (size_t k = 0; k < n; ++k) {
      const Tensor& p = (*lists[0])[k];
      bool one_layout = is_dense(p);
      for (const Tensors* l : lists)
        if (!l->empty()) one_layout = one_layout && same_dense_layout((*l)[k], p);
      if (one_layout && p.is_contiguous()) continue;  // as they are
      for (size_t i = 0; i < lists.size(); ++i) {
        if (lists[i]->empty()) continue;
        Tensor& t = (*lists[i])[k];
        if (one_layout) {
          t = flat_view(t, "foreach");
        } else if (!t.is_contiguous()) {
          g_staged_copies.fetch_add(1, std::memory_order_relaxed);
          Tensor c = t.contiguous();
          if (written[i]) back_.push_back({t, c});
          t = c;
        }
      }
    }
  }
  // A list of independent tensors: each dense one as its block.
  Tensors prepare(const Tensors& list, bool written) {
    Tensors out = list;
    for (Tensor& t : out) {
      if (t.is_contiguous()) continue;
      if (is_dense(t)) {
        t = flat_view(t, "foreach");
        continue;
      }
      g_staged_copies.fetch_add(1, std::memory_order_relaxed);
      Tensor c = t.contiguous();
      if (written) back_.push_back({t, c});
      t = c;
    }
    return out;
  }
  void finish() {
    for (auto& [original, copy] : back_) original.copy_(copy);
  }

 private:
  std::vector<std::pair<Tensor, Tensor>> back_;
};

// Indices of params by dtype, each in order.
std::map<DType, std::vector<size_t>> by_dtype(const Tensors& params) {
  std::map<DType, std::vector<size_t>> out;
  for (size_t k = 0; k < params.size(); ++k) out[params[k].dtype()].push_back(k);
  return out;
}

template <class T>
std::vector<T> pick(const std::vector<T>& list, const std::vector<size_t>& idx) {
  if (list.empty()) return {};
  std::vector<T> out;
  out.reserve(idx.size());
  for (size_t k : idx) out.push_back(list[k]);
  return out;
}

// All of xs on one device, floating; returns false for an empty list.
bool check_flat(const char* op, const Tensors& xs) {
  for (size_t k = 0; k < xs.size(); ++k) {
    DDP_CHECK(xs[k].defined(), "foreach {}: tensor {} is undefined", op, k);
    DDP_CHECK(is_floating(xs[k].dtype()), "foreach {}: tensor {} is {}; expected a floating dtype",
              op, k, xs[k].describe());
    DDP_CHECK_T(DeviceError, xs[k].device() == xs[0].device(),
                "foreach {}: tensor {} is {}, but tensor 0 is on {}; all tensors must be on one "
                "device",
                op, k, xs[k].describe(), xs[0].device().str());
  }
  return !xs.empty();
}

// found_inf, when given, is a 0-dim f32 on `device`.
void check_flag(const char* op, const char* what, const Tensor& t, const Device& device,
                DType dtype = DType::f32) {
  if (!t.defined()) return;
  DDP_CHECK_T(DeviceError, t.device() == device, "foreach {}: {} is {}, expected it on {}", op,
              what, t.describe(), device.str());
  DDP_CHECK(t.dim() == 0 && t.dtype() == dtype && t.is_contiguous(),
            "foreach {}: {} must be a 0-dim {} tensor, got {}", op, what, dtype_name(dtype),
            t.describe());
}

}  // namespace

int64_t staged_copies() { return g_staged_copies.load(std::memory_order_relaxed); }

void sgd_step(const Tensors& params, const Tensors& grads, const Tensors& bufs,
              const std::vector<uint8_t>& fresh, const kernels::SgdScalars& s,
              const Tensor& found_inf) {
  check_list("sgd_step", "params", params, params, false);
  check_list("sgd_step", "grads", grads, params, false);
  check_list("sgd_step", "momentum buffers", bufs, params, true);
  DDP_CHECK(fresh.empty() || fresh.size() == params.size(),
            "foreach sgd_step: {} fresh flags for {} parameters", fresh.size(), params.size());
  if (params.empty()) return;
  check_flag("sgd_step", "found_inf", found_inf, params[0].device());
  NoGradGuard no_grad;
  const Device device = params[0].device();
  for (const auto& [dtype, idx] : by_dtype(params)) {
    Staged staged;
    Tensors p = pick(params, idx), g = pick(grads, idx), b = pick(bufs, idx);
    staged.prepare({&p, &g, &b}, {true, false, true});
    std::vector<uint8_t> f = pick(fresh, idx);
    kernels::call<kernels::foreach_sgd_step>(device, p, g, b, f, s, found_inf);
    staged.finish();
  }
}

void adamw_step(const Tensors& params, const Tensors& grads, const Tensors& exp_avgs,
                const Tensors& exp_avg_sqs, const Tensors& max_exp_avg_sqs,
                const std::vector<kernels::AdamWTensorScalars>& per_tensor,
                const kernels::AdamWScalars& s, const Tensors& steps, const Tensor& found_inf) {
  check_list("adamw_step", "params", params, params, false);
  check_list("adamw_step", "grads", grads, params, false);
  check_list("adamw_step", "exp_avgs", exp_avgs, params, false);
  check_list("adamw_step", "exp_avg_sqs", exp_avg_sqs, params, false);
  check_list("adamw_step", "max_exp_avg_sqs", max_exp_avg_sqs, params, !s.amsgrad);
  DDP_CHECK(s.amsgrad || max_exp_avg_sqs.empty(),
            "foreach adamw_step: max_exp_avg_sqs given without amsgrad");
  DDP_CHECK(steps.empty() ? per_tensor.size() == params.size()
                           : per_tensor.empty() && steps.size() == params.size(),
            "foreach adamw_step: {} bias corrections and {} step counts for {} parameters; "
            "expected one of the two per parameter",
            per_tensor.size(), steps.size(), params.size());
  if (params.empty()) return;
  check_flag("adamw_step", "found_inf", found_inf, params[0].device());
  for (const Tensor& t : steps)
    check_flag("adamw_step", "a step count", t, params[0].device(), DType::f64);
  NoGradGuard no_grad;
  const Device device = params[0].device();
  for (const auto& [dtype, idx] : by_dtype(params)) {
    Staged staged;
    Tensors p = pick(params, idx), g = pick(grads, idx), m = pick(exp_avgs, idx),
            v = pick(exp_avg_sqs, idx), vmax = pick(max_exp_avg_sqs, idx);
    staged.prepare({&p, &g, &m, &v, &vmax}, {true, false, true, true, true});
    auto t = pick(per_tensor, idx);
    Tensors counts = pick(steps, idx);
    kernels::call<kernels::foreach_adamw_step>(device, p, g, m, v, vmax, t, counts, s, found_inf);
    staged.finish();
  }
}

double pow_sum(const Tensors& xs, double p) {
  DDP_CHECK(p > 0, "foreach pow_sum: the order p must be > 0, got {}", p);
  if (!check_flat("pow_sum", xs)) return 0.0;
  NoGradGuard no_grad;
  Staged staged;
  Tensors c = staged.prepare(xs, /*written=*/false);
  return kernels::call<kernels::foreach_pow_sum>(xs[0].device(), c, p);
}

bool mul_(const Tensors& xs, double factor, bool check_finite) {
  if (!check_flat("mul_", xs)) return false;
  NoGradGuard no_grad;
  Staged staged;
  Tensors c = staged.prepare(xs, /*written=*/true);
  const bool found = kernels::call<kernels::foreach_mul>(xs[0].device(), c, factor, check_finite);
  staged.finish();
  return found;
}

void unscale_(const Tensors& xs, const Tensor& scale, const Tensor& found_inf) {
  if (!check_flat("unscale_", xs)) return;
  DDP_CHECK(scale.defined() && found_inf.defined(),
            "foreach unscale_: the scale and the found_inf flag must be defined");
  check_flag("unscale_", "scale", scale, xs[0].device());
  check_flag("unscale_", "found_inf", found_inf, xs[0].device());
  NoGradGuard no_grad;
  Staged staged;
  Tensors c = staged.prepare(xs, /*written=*/true);
  kernels::call<kernels::foreach_unscale>(xs[0].device(), c, scale, found_inf);
  staged.finish();
}

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                   const kernels::ScaleUpdate& u) {
  DDP_CHECK(scale.defined() && growth_tracker.defined() && found_inf.defined(),
            "foreach update_scale_: scale, growth_tracker and found_inf must be defined");
  check_flag("update_scale_", "scale", scale, scale.device());
  check_flag("update_scale_", "growth_tracker", growth_tracker, scale.device(), DType::i64);
  check_flag("update_scale_", "found_inf", found_inf, scale.device());
  kernels::call<kernels::amp_update_scale>(scale.device(), scale, growth_tracker, found_inf, u);
}

namespace {
kernels::ScaleUpdate kernel_rule(const ScaleUpdateRule& r) {
  return {.growth_factor = r.growth_factor,
          .backoff_factor = r.backoff_factor,
          .growth_interval = r.growth_interval};
}
}  // namespace

void update_scale_(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                   const ScaleUpdateRule& rule) {
  update_scale_(scale, growth_tracker, found_inf, kernel_rule(rule));
}

void update_scale(float& scale, int64_t& growth_tracker, bool found_inf,
                  const ScaleUpdateRule& rule) {
  kernels::update_scale(scale, growth_tracker, found_inf, kernel_rule(rule));
}

}  // namespace ddp::optim::multi_tensor
