// Host-side comparisons of whole tensors, for tests and benchmarks. Values
// are copied to the host as f64, so tensors on any device and of any dtype
// compare the same way.

#include <algorithm>
#include <cmath>
#include <limits>

#include "ddp/tensor/ops.h"
#include "ops/ops_util.h"

namespace ddp {

using namespace ops_detail;

namespace {

void check_pair(const char* op, const Tensor& a, const Tensor& b) {
  check_defined(op, a, "a");
  check_defined(op, b, "b");
  DDP_CHECK_T(ShapeError, a.shape() == b.shape(), "{}: shapes differ: {} and {}", op,
              a.describe(), b.describe());
}

// Largest err(x, y) over the elements; NaN in exactly one operand is an
// infinite error, NaN in both (or equal infinities) none.
template <class Err>
double max_error(const Tensor& a, const Tensor& b, Err err) {
  std::vector<double> va = host_doubles(a), vb = host_doubles(b);
  double worst = 0.0;
  for (size_t i = 0; i < va.size(); ++i) {
    double x = va[i], y = vb[i];
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    if (std::isnan(x) || std::isnan(y) || std::isinf(x) || std::isinf(y))
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, err(x, y));
  }
  return worst;
}

}  // namespace

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  check_defined("allclose", a, "a");
  check_defined("allclose", b, "b");
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  std::vector<double> va = host_doubles(a), vb = host_doubles(b);
  for (size_t i = 0; i < va.size(); ++i) {
    double x = va[i], y = vb[i];
    if (x == y) continue;  // also equal infinities
    // NaN compares false here, so a NaN anywhere is "not close" like torch.
    if (!(std::fabs(x - y) <= atol + rtol * std::fabs(y))) return false;
  }
  return true;
}

double max_rel_error(const Tensor& a, const Tensor& b) {
  check_pair("max_rel_error", a, b);
  static constexpr double kTiny = std::numeric_limits<double>::min();
  return max_error(a, b, [](double x, double y) {
    return std::fabs(x - y) / std::max(std::fabs(y), kTiny);
  });
}

double max_abs_error(const Tensor& a, const Tensor& b) {
  check_pair("max_abs_error", a, b);
  return max_error(a, b, [](double x, double y) { return std::fabs(x - y); });
}

}  // namespace ddp
