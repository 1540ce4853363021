#include "stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ddp/core/error.h"

namespace bench {

double quantile(std::vector<double> values, double q) {
  if (values.empty()) throw ddp::ValueError("quantile: no values");
  if (!(q >= 0.0 && q <= 1.0)) throw ddp::ValueError("quantile: q must be in [0, 1]");
  std::sort(values.begin(), values.end());
  const double pos = q * double(values.size() - 1);
  const size_t lo = size_t(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (pos - double(lo)) * (values[hi] - values[lo]);
}

StepStats summarize(const std::vector<double>& t) {
  if (t.empty()) throw ddp::ValueError("summarize: no step times");
  StepStats s;
  s.count = int(t.size());
  s.median = quantile(t, 0.5);
  s.p10 = quantile(t, 0.1);
  s.p90 = quantile(t, 0.9);
  s.min = *std::min_element(t.begin(), t.end());
  s.max = *std::max_element(t.begin(), t.end());
  s.mean = std::accumulate(t.begin(), t.end(), 0.0) / double(t.size());
  return s;
}

}  // namespace bench
