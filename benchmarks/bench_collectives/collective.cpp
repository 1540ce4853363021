#include "collective.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <type_traits>

#include "ddp/core/dispatch.h"
#include "ddp/core/error.h"

namespace bench {

using ddp::DType;
using ddp::Tensor;
using ddp::dist::ReduceOp;

namespace {

constexpr Collective kAll[] = {Collective::allreduce,      Collective::broadcast,
                               Collective::reduce,         Collective::allgather,
                               Collective::reduce_scatter, Collective::all_to_all};

std::string squash(const std::string& s) {
  std::string out;
  for (char ch : s)
    if (ch != '_' && ch != '-') out.push_back(char(std::tolower(static_cast<unsigned char>(ch))));
  return out;
}

// What rank r contributes at element i (see fill_check_pattern).
double pattern(int r, int64_t i, ReduceOp op) {
  if (op == ReduceOp::product) return (i + r) % 3 == 0 ? 2.0 : 1.0;
  return double((i * 13 + int64_t(r) * 7) % 11 + 1);
}

// The serial reduction over all ranks of pattern(., i).
double reduced(int64_t i, int world, ReduceOp op) {
  double acc = pattern(0, i, op);
  for (int r = 1; r < world; ++r) {
    double v = pattern(r, i, op);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg:
        acc += v;
        break;
      case ReduceOp::min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::max:
        acc = std::max(acc, v);
        break;
      case ReduceOp::product:
        acc *= v;
        break;
    }
  }
  return op == ReduceOp::avg ? acc / world : acc;
}

template <class T>
T from_double(double x) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(std::llround(x));  // wraps like the collective's integer arithmetic
  else if constexpr (std::is_floating_point_v<T>)
    return static_cast<T>(x);
  else
    return T(static_cast<float>(x));  // Half, BFloat16
}

// Relative tolerance of avg (one rounding of the dtype; everything else is exact).
double avg_tolerance(DType d) {
  switch (d) {
    case DType::f16:
      return std::ldexp(1.0, -10);
    case DType::bf16:
      return std::ldexp(1.0, -7);
    case DType::f32:
      return std::ldexp(1.0, -23);
    case DType::f64:
      return std::ldexp(1.0, -52);
    default:
      return 0;
  }
}

// Counts elements i in [0, n) of data where got != expected(i), both as T.
template <class T, class Expected>
int64_t mismatches(const Tensor& t, int64_t offset, int64_t n, double tol, Expected expected) {
  const T* p = static_cast<const T*>(t.data_ptr()) + offset;
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) {
    double want = static_cast<double>(from_double<T>(expected(i)));
    double got = static_cast<double>(p[i]);
    if (!(got == want || std::fabs(got - want) <= tol * std::fabs(want))) ++wrong;
  }
  return wrong;
}

}  // namespace

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::allreduce:
      return "allreduce";
    case Collective::broadcast:
      return "broadcast";
    case Collective::reduce:
      return "reduce";
    case Collective::allgather:
      return "allgather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_to_all:
      return "all_to_all";
  }
  return "unknown";
}

std::optional<Collective> collective_from_name(const std::string& name) {
  const std::string want = squash(name);
  for (Collective c : kAll)
    if (squash(collective_name(c)) == want) return c;
  if (want == "bcast") return Collective::broadcast;
  return std::nullopt;
}

bool uses_reduce_op(Collective c) {
  return c == Collective::allreduce || c == Collective::reduce || c == Collective::reduce_scatter;
}
bool uses_root(Collective c) { return c == Collective::broadcast || c == Collective::reduce; }

double bus_factor(Collective c, int n) {
  switch (c) {
    case Collective::allreduce:
      return 2.0 * (n - 1) / n;
    case Collective::allgather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
      return double(n - 1) / n;
    case Collective::broadcast:
    case Collective::reduce:
      return 1.0;
  }
  return 1.0;
}

Buffers make_buffers(Collective c, DType dtype, int64_t requested_count, int n) {
  Buffers b;
  b.coll = c;
  b.dtype = dtype;
  const bool per_rank =
      c == Collective::allgather || c == Collective::reduce_scatter || c == Collective::all_to_all;
  b.count = per_rank ? requested_count / n * n : requested_count;
  const int64_t chunk = b.count / n;
  ddp::TensorOptions opts(dtype);
  switch (c) {
    case Collective::allreduce:
    case Collective::broadcast:
    case Collective::reduce:
      b.in = Tensor::zeros({b.count}, opts);
      break;
    case Collective::allgather:
      b.in = Tensor::zeros({chunk}, opts);
      b.out = Tensor::zeros({b.count}, opts);
      for (int r = 0; r < n; ++r) b.out_chunks.push_back(b.out.narrow(0, r * chunk, chunk));
      break;
    case Collective::reduce_scatter:
      b.in = Tensor::zeros({b.count}, opts);
      b.out = Tensor::zeros({chunk}, opts);
      for (int r = 0; r < n; ++r) b.in_chunks.push_back(b.in.narrow(0, r * chunk, chunk));
      break;
    case Collective::all_to_all:
      b.in = Tensor::zeros({b.count}, opts);
      b.out = Tensor::zeros({b.count}, opts);
      break;
  }
  return b;
}

ddp::dist::WorkPtr launch(ddp::dist::ProcessGroup& pg, Buffers& b, ReduceOp op, int root) {
  switch (b.coll) {
    case Collective::allreduce:
      return pg.allreduce({b.in}, op);
    case Collective::broadcast:
      return pg.broadcast({b.in}, root);
    case Collective::reduce:
      return pg.reduce({b.in}, root, op);
    case Collective::allgather:
      return pg.allgather(b.out_chunks, b.in);
    case Collective::reduce_scatter:
      return pg.reduce_scatter(b.out, b.in_chunks, op);
    case Collective::all_to_all:
      return pg.all_to_all(b.out, b.in);
  }
  DDP_THROW(ValueError, "bench_collectives: unknown collective {}", int(b.coll));
}

void fill_check_pattern(Buffers& b, int rank, ReduceOp op) {
  if (!uses_reduce_op(b.coll)) op = ReduceOp::sum;  // count_wrong expects this pattern
  ddp::dispatch_numeric(b.dtype, "fill_check_pattern", [&]<class T>() {
    T* in = static_cast<T*>(b.in.data_ptr());
    for (int64_t i = 0; i < b.in.numel(); ++i) in[i] = from_double<T>(pattern(rank, i, op));
  });
  if (b.out.defined()) b.out.zero_();  // the pattern is never 0, so untouched output shows
}

int64_t count_wrong(const Buffers& b, int rank, int n, ReduceOp op, int root) {
  const int64_t chunk = b.count / n;
  const double tol = op == ReduceOp::avg ? avg_tolerance(b.dtype) : 0.0;
  int64_t wrong = 0;
  ddp::dispatch_numeric(b.dtype, "count_wrong", [&]<class T>() {
    switch (b.coll) {
      case Collective::allreduce:
        wrong = mismatches<T>(b.in, 0, b.count, tol, [&](int64_t i) { return reduced(i, n, op); });
        break;
      case Collective::reduce:
        if (rank == root)
          wrong =
              mismatches<T>(b.in, 0, b.count, tol, [&](int64_t i) { return reduced(i, n, op); });
        break;
      case Collective::broadcast:
        wrong = mismatches<T>(b.in, 0, b.count, 0.0,
                              [&](int64_t i) { return pattern(root, i, ReduceOp::sum); });
        break;
      case Collective::allgather:
        for (int r = 0; r < n; ++r)
          wrong += mismatches<T>(b.out, r * chunk, chunk, 0.0,
                                 [&](int64_t i) { return pattern(r, i, ReduceOp::sum); });
        break;
      case Collective::reduce_scatter:
        wrong = mismatches<T>(b.out, 0, chunk, tol,
                              [&](int64_t i) { return reduced(rank * chunk + i, n, op); });
        break;
      case Collective::all_to_all:
        // Chunk r of the output is chunk `rank` of rank r's input.
        for (int r = 0; r < n; ++r)
          wrong += mismatches<T>(b.out, r * chunk, chunk, 0.0, [&](int64_t i) {
            return pattern(r, rank * chunk + i, ReduceOp::sum);
          });
        break;
    }
  });
  return wrong;
}

}  // namespace bench
