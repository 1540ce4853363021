#include "options.h"

#include <fmt/format.h>

#include <cctype>
#include <climits>
#include <functional>
#include <map>

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

int64_t parse_int(const std::string& text, const std::string& flag, int64_t lo, int64_t hi) {
  if (text.empty())
    throw UsageError(fmt::format("{}: expected a number, got an empty value", flag));
  size_t i = 0;
  bool neg = false;
  if (text[0] == '-' || text[0] == '+') {
    neg = text[0] == '-';
    ++i;
  }
  if (i == text.size()) throw UsageError(fmt::format("{}: '{}' is not a number", flag, text));
  int64_t v = 0;
  for (; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])))
      throw UsageError(fmt::format("{}: '{}' is not a whole number", flag, text));
    if (v > (INT64_MAX - 9) / 10)
      throw UsageError(fmt::format("{}: '{}' is too large", flag, text));
    v = v * 10 + (text[i] - '0');
  }
  if (neg) v = -v;
  if (v < lo || v > hi)
    throw UsageError(hi >= INT_MAX
                         ? fmt::format("{}: {} must be at least {}", flag, text, lo)
                         : fmt::format("{}: {} must be between {} and {}", flag, text, lo, hi));
  return v;
}

bool parse_bool01(const std::string& text, const std::string& flag) {
  if (text == "0") return false;
  if (text == "1") return true;
  throw UsageError(fmt::format("{}: expected 0 or 1, got '{}'", flag, text));
}

}  // namespace

int64_t parse_size(const std::string& text, const std::string& flag) {
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
  if (!all_digits)
    throw UsageError(
        fmt::format("{}: '{}' is not a size (bytes, optionally with K, M or G)", flag, text));
  int64_t v = parse_int(digits, flag, 0, INT64_MAX);
  if (v > INT64_MAX / unit) throw UsageError(fmt::format("{}: '{}' is too large", flag, text));
  return v * unit;
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
  bool max_given = false;
  using Setter = std::function<void(const std::string& value, const std::string& flag)>;
  const std::map<std::string, Setter> with_value = {
      {"minbytes", [&](auto& v, auto& f) { o.min_bytes = parse_size(v, f); }},
      {"maxbytes",
       [&](auto& v, auto& f) {
         o.max_bytes = parse_size(v, f);
         max_given = true;
       }},
      {"stepfactor",
       [&](auto& v, auto& f) {
         o.step_factor = parse_int(v, f, INT64_MIN, INT64_MAX);
         if (o.step_factor < 2)
           throw UsageError(fmt::format("{}: the step factor must be at least 2, got {}", f, v));
       }},
      {"datatype",
       [&](auto& v, auto& f) {
         for (const DTypeName& d : kDTypes)
           if (v == d.name) {
             o.dtype = d.dtype;
             o.dtype_label = d.label;
             return;
           }
         for (const char* u : kUnsupportedDTypes)
           if (v == u)
             throw UsageError(
                 fmt::format("{}: dtype '{}' is not supported by libddp collectives "
                             "(supported: {})",
                             f, v, kSupportedDTypes));
         throw UsageError(
             fmt::format("{}: unknown dtype '{}' (supported: {})", f, v, kSupportedDTypes));
       }},
      {"op",
       [&](auto& v, auto& f) {
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
           throw UsageError(fmt::format(
               "{}: unknown reduce op '{}' (supported: sum, avg, min, max, prod)", f, v));
       }},
      {"iters", [&](auto& v, auto& f) { o.iters = int(parse_int(v, f, 1, INT_MAX)); }},
      {"warmup_iters", [&](auto& v, auto& f) { o.warmup = int(parse_int(v, f, 0, INT_MAX)); }},
      {"check", [&](auto& v, auto& f) { o.check = parse_bool01(v, f); }},
      {"blocking", [&](auto& v, auto& f) { o.blocking = parse_bool01(v, f); }},
      {"root", [&](auto& v, auto& f) { o.root = int(parse_int(v, f, 0, INT_MAX)); }},
      {"rounds", [&](auto& v, auto& f) { o.rounds = int(parse_int(v, f, 1, 1000)); }},
      {"backend",
       [&](auto& v, auto& f) {
         if (v != "mpi" && v != "gloo" && v != "nccl")
           throw UsageError(
               fmt::format("{}: unknown backend '{}' (expected mpi, gloo or nccl)", f, v));
         o.backend = v;
       }},
      {"collective",
       [&](auto& v, auto& f) {
         auto c = collective_from_name(v);
         if (!c)
           throw UsageError(
               fmt::format("{}: unknown collective '{}' (expected allreduce, "
                           "broadcast, reduce, allgather, reduce_scatter or "
                           "all_to_all)",
                           f, v));
         o.collective = *c;
       }},
      {"json",
       [&](auto& v, auto& f) {
         if (v.empty()) throw UsageError(fmt::format("{}: expected a file name", f));
         o.json_path = v;
       }},
  };
  const std::map<char, std::string> short_names = {
      {'b', "minbytes"}, {'e', "maxbytes"}, {'f', "stepfactor"},   {'d', "datatype"},
      {'o', "op"},       {'n', "iters"},    {'w', "warmup_iters"}, {'c', "check"},
      {'z', "blocking"}, {'r', "root"}};
  const std::map<std::string, std::string> aliases = {{"dtype", "datatype"},
                                                      {"warmup", "warmup_iters"}};

  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::string name, value, flag = arg;
    bool has_value = false;
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      name = arg.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        flag = "--" + name;
        has_value = true;
      }
      if (auto a = aliases.find(name); a != aliases.end()) name = a->second;
    } else if (arg.size() >= 2 && arg[0] == '-' &&
               !std::isdigit(static_cast<unsigned char>(arg[1]))) {
      auto s = short_names.find(arg[1]);
      if (s == short_names.end()) throw UsageError(fmt::format("unknown option '{}'", arg));
      name = s->second;
      flag = arg.substr(0, 2);
      if (arg.size() > 2) {  // -b8
        value = arg.substr(2);
        has_value = true;
      }
    } else {
      throw UsageError(fmt::format("unexpected argument '{}'", arg));
    }
    auto setter = with_value.find(name);
    if (setter == with_value.end()) throw UsageError(fmt::format("unknown option '{}'", flag));
    if (!has_value) {
      if (i + 1 >= argc) throw UsageError(fmt::format("{}: missing value", flag));
      value = argv[++i];
    }
    setter->second(value, flag);
  }

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
