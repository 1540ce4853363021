#include "ddp/nn/flatten.h"

namespace ddp::nn {

Flatten::Flatten(int64_t start_dim, int64_t end_dim)
    : UnaryModule("Flatten"), start_(start_dim), end_(end_dim) {}

Tensor Flatten::forward(const Tensor& x) {
  DDP_CHECK(x.defined(), "{}: the input is undefined", describe());
  // torch treats a 0-dim input as 1-D here.
  const int64_t nd = std::max<int64_t>(x.dim(), 1);
  const int64_t s = start_ < 0 ? start_ + nd : start_;
  const int64_t e = end_ < 0 ? end_ + nd : end_;
  DDP_CHECK_T(ShapeError, s >= 0 && s < nd && e >= 0 && e < nd && s <= e,
              "{}: cannot flatten dims {}..{} of {}", describe(), start_, end_, x.describe());
  if (x.dim() == 0) return x.reshape({1});
  return x.flatten(s, e);
}

std::string Flatten::extra_repr() const {
  return fmt::format("start_dim={}, end_dim={}", start_, end_);
}

}  // namespace ddp::nn
