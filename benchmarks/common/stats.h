#pragma once
// Summary statistics of the timed steps.
//
// Note [Step-time statistics]
// The benchmarks report the median step time, not the mean: a shared
// machine (CI, a laptop) adds rare long stalls that move the mean but not
// the median. Throughput is batch / median step. The spread is given twice:
// p10 and p90 (linear interpolation between order statistics, numpy's
// default), robust to one outlier, and min and max, which show it.

#include <vector>

namespace bench {

struct StepStats {
  int count = 0;
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0, mean = 0;
};

// q in [0, 1] of the values, interpolating linearly between the two order
// statistics around q·(n−1); ValueError for no values or q outside [0, 1].
double quantile(std::vector<double> values, double q);
// ValueError for no values.
StepStats summarize(const std::vector<double>& step_seconds);

}  // namespace bench
