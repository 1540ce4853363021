#pragma once
// Helpers for the optimizers' options in state dicts; see
// Note [Optimizer state layout].

#include <fmt/format.h>

#include <string>
#include <unordered_set>

#include "ddp/tensor/ordered_dict.h"
#include "ddp/tensor/tensor.h"

namespace ddp::optim {

inline Tensor f64_scalar(double v) { return Tensor::scalar(v, DType::f64); }

// Reads options by name from a group's entries, raising ValueError for a
// missing, mis-shaped or (at finish()) unexpected one.
class OptionReader {
 public:
  OptionReader(std::string who, const TensorDict& options)
      : who_(std::move(who)), options_(options) {}

  std::vector<double> values(const char* name, int64_t count) {
    used_.insert(name);
    const Tensor* t = options_.find(name);
    DDP_CHECK(t, "{}: missing option '{}' in param_groups", who_, name);
    DDP_CHECK(t->numel() == count && t->dim() <= 1, "{}: option '{}' must hold {} value(s), got {}",
              who_, name, count, t->describe());
    return t->to_vector<double>();
  }
  double number(const char* name) { return values(name, 1)[0]; }
  bool flag(const char* name) {
    double v = number(name);
    DDP_CHECK(v == 0 || v == 1, "{}: option '{}' must be 0 or 1, got {}", who_, name, v);
    return v == 1;
  }
  void finish() const {
    for (const auto& [name, t] : options_)
      DDP_CHECK(used_.count(name), "{}: unexpected option '{}' in param_groups", who_, name);
  }

 private:
  std::string who_;
  const TensorDict& options_;
  std::unordered_set<std::string> used_;
};

}  // namespace ddp::optim
