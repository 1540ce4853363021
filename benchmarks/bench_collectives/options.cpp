#include "options.h"

#include <fmt/format.h>

#include "command_line.h"

#include <cctype>
#include <climits>

namespace bench {

using ddp::DType;
using ddp::dist::ReduceOp;

namespace {

// nccl-tests' names first (the one printed in the table), then ours.
struct DTypeName {
  const char* name;
  DType dtype;
  const char* label;
};
constexpr DTypeName kDTypes[] = {
    {"float", DType::f32, "float"},    {"float32", DType::f32, "float"},
    {"f32", DType::f32, "float"},      {"double", DType::f64, "double"},
    {"float64", DType::f64, "double"}, {"f64", DType::f64, "double"},
    {"half", DType::f16, "half"},      {"float16", DType::f16, "half"},
    {"f16", DType::f16, "half"},       {"bfloat16", DType::bf16, "bfloat16"},
    {"bf16", DType::bf16, "bfloat16"}, {"int32", DType::i32, "int32"},
    {"int", DType::i32, "int32"},      {"i32", DType::i32, "int32"},
    {"int64", DType::i64, "int64"},    {"i64", DType::i64, "int64"},
    {"uint8", DType::u8, "uint8"},     {"u8", DType::u8, "uint8"},
};
// Names nccl-tests knows that libddp has no dtype for.
constexpr const char* kUnsupportedDTypes[] = {"int8",     "i8",   "char",   "uint32", "u32",
                                              "uint64",   "u64",  "f8e4m3", "f8e5m2", "fp8_e4m3",
                                              "fp8_e5m2", "bool", "all"};

constexpr const char* kSupportedDTypes = "float, double, half, bfloat16, int32, int64, uint8";

// Why text is not a whole number in [lo, hi], or "".
std::string check_int(const std::string& text, int64_t lo, int64_t hi, int64_t& out) {
  if (text.empty()) return "expected a number, got an empty value";
  size_t i = 0;
  bool neg = false;
  if (text[0] == '-' || text[0] == '+') {
    neg = text[0] == '-';
    ++i;
  }
  if (i == text.size()) return fmt::format("'{}' is not a number", text);
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])))
      return fmt::format("'{}' is not a whole number", text);
    if (v > (INT64_MAX - 9) / 10) return fmt::format("'{}' is too large", text);
    v = v * 10 + (text[i] - '0');
  }
  if (neg) v = -v;
  if (v < lo || v > hi)
    return hi >= INT_MAX ? fmt::format("{} must be at least {}", text, lo)
                         : fmt::format("{} must be between {} and {}", text, lo, hi);
  out = v;
  return "";
}

// Why text is not 0 or 1, or "".
std::string check_bool01(const std::string& text, bool& out) {
  if (text != "0" && text != "1") return fmt::format("expected 0 or 1, got '{}'", text);
  out = text == "1";
  return "";
}

// Why text is not a size ("8", "64K", "128M", "1G"), or "".
std::string check_size(const std::string& text, int64_t& out) {
  std::string digits = text;
  int64_t unit = 1;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K':
        unit = int64_t(1) << 10;
        break;
      case 'M':
        unit = int64_t(1) << 20;
        break;
      case 'G':
        unit = int64_t(1) << 30;
        break;
      case 'T':
        unit = int64_t(1) << 40;
        break;
      default:
        break;
    }
    if (unit != 1) digits.pop_back();
  }
  bool all_digits = !digits.empty();
  for (char c : digits) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
  if (!all_digits) return fmt::format("'{}' is not a size (bytes, optionally with K, M or G)", text);
  int64_t v = 0;
  if (std::string why = check_int(digits, 0, INT64_MAX, v); !why.empty()) return why;
  if (v > INT64_MAX / unit) return fmt::format("'{}' is too large", text);
  out = v * unit;
  return "";
}

}  // namespace

int64_t parse_size(const std::string& text, const std::string& flag) {
  int64_t v = 0;
  if (std::string why = check_size(text, v); !why.empty())
    throw UsageError(fmt::format("{}: {}", flag, why));
  return v;
}

std::string usage_text() {
  return R"(usage: bench_collectives [options]      (run under mpirun, one process per rank)

  -b, --minbytes SIZE       smallest size in bytes, K/M/G suffixes (default 8)
  -e, --maxbytes SIZE       largest size (default 32M)
  -f, --stepfactor N        multiply the size by N from one row to the next, N >= 2 (default 2)
  -d, --datatype TYPE       float, double, half, bfloat16, int32, int64, uint8
                            (also f32, f64, f16, bf16, i32, i64, u8; default float)
  -o, --op OP               sum, avg, min, max, prod (default sum; avg needs a floating type)
  -n, --iters N             timed iterations per size (default 20)
  -w, --warmup_iters N      untimed iterations per size before them (default 5)
  -c, --check 0|1           verify the results and count wrong elements (default 1)
  -z, --blocking 0|1        1: wait for each collective before starting the next;
                            0: start all iterations, then wait (default 0)
  -r, --root N              root of broadcast and reduce (default 0)
      --rounds N            timed rounds per size, alternating libddp and raw MPI;
                            each row reports the median round (default 1)
      --backend NAME        mpi, gloo or nccl (default mpi)
      --collective NAME     allreduce, broadcast, reduce, allgather, reduce_scatter,
                            all_to_all (default allreduce)
      --json FILE           also write the rows as a JSON array (rank 0)
  -h, --help                this text

Exit status: 0 success, 1 a collective failed or a result was wrong, 2 bad arguments.
See docs/benchmarks.md.
)";
}

Options parse_options(int argc, const char* const* argv) {
  Options o;
  int64_t iters = o.iters, warmup = o.warmup, root = o.root, rounds = o.rounds;
  ddp_cli::CommandLine args("bench_collectives", "");
  args.set_usage(usage_text());
  // An int option checked by check_int into `out`.
  auto add_int = [&](const char* names, int64_t* out, int64_t lo, int64_t hi) {
    args.add_value(names, "N", "", "", [out, lo, hi](const std::string& v) {
      return check_int(v, lo, hi, *out);
    });
  };
  auto add_bool01 = [&](const char* names, bool* out) {
    args.add_value(names, "0|1", "", "", [out](const std::string& v) { return check_bool01(v, *out); });
  };
  args.add_value("-b,--minbytes", "SIZE", "", "",
                 [&](const std::string& v) { return check_size(v, o.min_bytes); });
  args.add_value("-e,--maxbytes", "SIZE", "", "",
                 [&](const std::string& v) { return check_size(v, o.max_bytes); });
  args.add_value("-f,--stepfactor", "N", "", "", [&](const std::string& v) {
    if (std::string why = check_int(v, INT64_MIN, INT64_MAX, o.step_factor); !why.empty())
      return why;
    return o.step_factor < 2 ? fmt::format("the step factor must be at least 2, got {}", v)
                             : std::string();
  });
  args.add_value("-d,--datatype,--dtype", "TYPE", "", "", [&](const std::string& v) {
    for (const DTypeName& d : kDTypes)
      if (v == d.name) {
        o.dtype = d.dtype;
        o.dtype_label = d.label;
        return std::string();
      }
    for (const char* u : kUnsupportedDTypes)
      if (v == u)
        return fmt::format("dtype '{}' is not supported by libddp collectives (supported: {})", v,
                           kSupportedDTypes);
    return fmt::format("unknown dtype '{}' (supported: {})", v, kSupportedDTypes);
  });
  args.add_value("-o,--op", "OP", "", "", [&](const std::string& v) {
    if (v == "sum")
      o.op = ReduceOp::sum;
    else if (v == "avg")
      o.op = ReduceOp::avg;
    else if (v == "min")
      o.op = ReduceOp::min;
    else if (v == "max")
      o.op = ReduceOp::max;
    else if (v == "prod" || v == "product")
      o.op = ReduceOp::product;
    else
      return fmt::format("unknown reduce op '{}' (supported: sum, avg, min, max, prod)", v);
    return std::string();
  });
  add_int("-n,--iters", &iters, 1, INT_MAX);
  add_int("-w,--warmup_iters,--warmup", &warmup, 0, INT_MAX);
  add_bool01("-c,--check", &o.check);
  add_bool01("-z,--blocking", &o.blocking);
  add_int("-r,--root", &root, 0, INT_MAX);
  add_int("--rounds", &rounds, 1, 1000);
  args.add_value("--backend", "NAME", "", "", [&](const std::string& v) {
    if (v != "mpi" && v != "gloo" && v != "nccl")
      return fmt::format("unknown backend '{}' (expected mpi, gloo or nccl)", v);
    o.backend = v;
    return std::string();
  });
  args.add_value("--collective", "NAME", "", "", [&](const std::string& v) {
    auto c = collective_from_name(v);
    if (!c)
      return fmt::format("unknown collective '{}' (expected allreduce, broadcast, reduce, "
                         "allgather, reduce_scatter or all_to_all)",
                         v);
    o.collective = *c;
    return std::string();
  });
  args.add_value("--json", "FILE", "", "", [&](const std::string& v) {
    if (v.empty()) return std::string("expected a file name");
    o.json_path = v;
    return std::string();
  });
  try {
    args.parse(argc, argv);
  } catch (const ddp_cli::UsageExit& e) {
    if (e.code == 0) {
      o.help = true;
      return o;
    }
    throw UsageError(e.reason);
  }
  o.iters = int(iters), o.warmup = int(warmup), o.root = int(root), o.rounds = int(rounds);
  const bool max_given = args.given("-e,--maxbytes");

  if (o.min_bytes < 1) throw UsageError("-b: the smallest size must be at least 1 byte");
  if (!max_given && o.max_bytes < o.min_bytes) o.max_bytes = o.min_bytes;
  if (o.min_bytes > o.max_bytes)
    throw UsageError(
        fmt::format("-b {} is larger than -e {}: the smallest size must not exceed "
                    "the largest",
                    o.min_bytes, o.max_bytes));
  if (o.op == ReduceOp::avg && !ddp::is_floating(o.dtype))
    throw UsageError(
        fmt::format("-o avg needs a floating dtype (float, double, half, bfloat16), "
                    "not {}",
                    o.dtype_label));
  return o;
}

}  // namespace bench
