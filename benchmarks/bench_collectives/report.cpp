#include "report.h"

#include "ddp/io/json.h"

#include <fmt/format.h>

#include <cmath>

namespace bench {

namespace {

// nccl-tests' time column: fewer decimals as the time grows.
std::string time_str(double us) {
  if (!std::isfinite(us)) return fmt::format("{:>7}", "n/a");
  if (us >= 10000.0) return fmt::format("{:7.0f}", us);
  if (us >= 100.0) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.2f}", us);
}

// GB/s (10^9 bytes per second, as nccl-tests).
double gbps(int64_t bytes, double seconds) {
  return bytes > 0 && seconds > 0 ? double(bytes) / seconds / 1e9 : 0.0;
}

}  // namespace

Report::Report(const Options& opts, int world_size, bool has_raw, std::FILE* out, std::FILE* json)
    : opts_(opts), world_(world_size), has_raw_(has_raw), out_(out), json_(json) {}

void Report::header(const std::vector<std::string>& info_lines) {
  for (const std::string& l : info_lines) fmt::print(out_, "# {}\n", l);
  fmt::print(out_, "#\n");
  std::string l1 = fmt::format("#{:>72}", "libddp");
  std::string l2 =
      fmt::format("#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}", "size",
                  "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong");
  std::string l3 = fmt::format("#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}",
                               "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  if (has_raw_) {
    l1 += fmt::format("{:>32}", "raw MPI");
    l2 += fmt::format("  {:>7}  {:>6}  {:>6}  {:>5}", "time", "algbw", "busbw", "ratio");
    l3 += fmt::format("  {:>7}  {:>6}  {:>6}  {:>5}", "(us)", "(GB/s)", "(GB/s)", "");
  }
  for (std::string* l : {&l1, &l2, &l3}) {
    l->erase(l->find_last_not_of(' ') + 1);
    fmt::print(out_, "{}\n", *l);
  }
  std::fflush(out_);
  if (json_) std::fputs("[", json_);
}

void Report::row(const Row& r) {
  const double factor = bus_factor(opts_.collective, world_);
  const double algbw = gbps(r.bytes, r.time_s), busbw = algbw * factor;
  const bool reduces = uses_reduce_op(opts_.collective);
  const int root = uses_root(opts_.collective) ? opts_.root : -1;
  const std::string redop = reduces ? ddp::dist::reduce_op_name(opts_.op) : "none";
  std::string line = fmt::format(
      "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {}  {:6.2f}  {:6.2f}  {:>6}", r.bytes, r.count,
      opts_.dtype_label, redop == "product" ? "prod" : redop, root, time_str(r.time_s * 1e6), algbw,
      busbw, r.wrong < 0 ? std::string("N/A") : std::to_string(r.wrong));
  double raw_algbw = 0, raw_busbw = 0, ratio = 0;
  if (has_raw_) {
    raw_algbw = gbps(r.bytes, r.raw_time_s);
    raw_busbw = raw_algbw * factor;
    ratio = r.time_s > 0 ? r.raw_time_s / r.time_s : 0.0;  // = busbw / raw busbw
    if (std::isfinite(r.raw_time_s))
      line += fmt::format("  {}  {:6.2f}  {:6.2f}  {:5.2f}", time_str(r.raw_time_s * 1e6),
                          raw_algbw, raw_busbw, ratio);
    else
      line += fmt::format("  {:>7}  {:>6}  {:>6}  {:>5}", "n/a", "n/a", "n/a", "n/a");
  }
  fmt::print(out_, "{}\n", line);
  std::fflush(out_);

  ++rows_;
  busbw_sum_ += busbw;
  if (has_raw_ && std::isfinite(r.raw_time_s)) {
    raw_busbw_sum_ += raw_busbw;
    ++raw_rows_;
  }
  if (r.wrong > 0) total_wrong_ += r.wrong;

  if (json_) {
    // One row per line; NaN and inf (no raw MPI time) are written as null.
    ddp::io::json::Object obj;
    obj.add("collective", collective_name(opts_.collective))
        .add("backend", opts_.backend)
        .add("world_size", world_)
        .add("dtype", opts_.dtype_label)
        .add("op", redop)
        .add("root", root)
        .add("bytes", r.bytes)
        .add("count", r.count)
        .add("time_us", r.time_s * 1e6)
        .add("algbw_gbps", algbw)
        .add("busbw_gbps", busbw);
    if (r.wrong < 0)
      obj.add_null("wrong");  // not checked
    else
      obj.add("wrong", r.wrong);
    if (has_raw_) {
      const bool raw = std::isfinite(r.raw_time_s);
      obj.add("raw_mpi_time_us", r.raw_time_s * 1e6)
          .add("raw_mpi_algbw_gbps", raw ? std::optional<double>(raw_algbw) : std::nullopt)
          .add("raw_mpi_busbw_gbps", raw ? std::optional<double>(raw_busbw) : std::nullopt)
          .add("busbw_ratio", raw ? std::optional<double>(ratio) : std::nullopt);
    }
    fmt::print(json_, "{}\n  {}", rows_ == 1 ? "" : ",", obj.str());
    std::fflush(json_);
  }
}

void Report::footer() {
  if (opts_.check)
    fmt::print(out_, "# Out of bounds values : {} {}\n", total_wrong_,
               total_wrong_ == 0 ? "OK" : "FAILED");
  fmt::print(out_, "# Avg bus bandwidth : {:.6g}\n", rows_ ? busbw_sum_ / rows_ : 0.0);
  if (has_raw_)
    fmt::print(out_, "# Avg raw MPI bus bandwidth : {:.6g}\n",
               raw_rows_ ? raw_busbw_sum_ / raw_rows_ : 0.0);
  fmt::print(out_, "#\n");
  std::fflush(out_);
  if (json_) {
    std::fputs("\n]\n", json_);
    std::fflush(json_);
  }
}

}  // namespace bench
