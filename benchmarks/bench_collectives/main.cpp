// bench_collectives: collective bandwidth through a libddp ProcessGroup, in
// the style of nccl-tests (all_reduce_perf and friends). Every rank runs it
// (mpirun -np N bench_collectives ...); rank 0 prints the table. With the mpi
// backend each row also times the MPI call the backend makes, on the same
// buffers, so the wrapper's overhead shows (raw_mpi.h). Usage and results:
// docs/benchmarks.md.

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "collective.h"
#include "create_group.h"
#include "ddp/config.h"
#include "ddp/core/error.h"
#include "ddp/dist/launch_env.h"
#include "ddp/version.h"
#include "options.h"
#include "report.h"
#if DDP_HAVE_MPI
#include "raw_mpi.h"
#endif

namespace bench {
namespace {

using ddp::DType;
using ddp::Tensor;
using ddp::dist::ProcessGroup;
using ddp::dist::ReduceOp;
using ddp::dist::WorkPtr;

constexpr int kExitUsage = 2;
constexpr int kExitError = 1;

// Rank 0 reports what all ranks agree on; before a group exists we go by the
// launcher's environment.
bool launcher_rank_zero() {
  try {
    return ddp::dist::detect_launch_env().rank == 0;
  } catch (const ddp::Error&) {
    return true;
  }
}

double max_over_ranks(ProcessGroup& pg, double v) {
  Tensor t = Tensor::full({1}, v, ddp::TensorOptions(DType::f64));
  pg.allreduce({t}, ReduceOp::max)->wait(pg.timeout());
  return t.item<double>();
}

int64_t sum_over_ranks(ProcessGroup& pg, int64_t v) {
  Tensor t = Tensor::full({1}, double(v), ddp::TensorOptions(DType::i64));
  pg.allreduce({t}, ReduceOp::sum)->wait(pg.timeout());
  return t.item<int64_t>();
}

// Seconds per collective on this rank, over `iters` launches. Blocking: wait
// for each before the next; otherwise launch all, then wait for all (as
// nccl-tests launches its iterations and then synchronises the stream).
double time_wrapper(ProcessGroup& pg, Buffers& b, const Options& o, int iters) {
  std::vector<WorkPtr> works;
  works.reserve(size_t(iters));
  pg.barrier()->wait(pg.timeout());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    WorkPtr w = launch(pg, b, o.op, o.root);
    if (o.blocking)
      w->wait(pg.timeout());
    else
      works.push_back(std::move(w));
  }
  for (WorkPtr& w : works) w->wait(pg.timeout());
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count() / iters;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// "Rank r Pid p on host h" for every rank, gathered to all (like nccl-tests'
// device lines).
std::vector<std::string> rank_lines(ProcessGroup& pg) {
  constexpr int64_t kHost = 64, kEntry = 8 + kHost;
  Tensor mine = Tensor::zeros({kEntry}, ddp::TensorOptions(DType::u8));
  int64_t pid = int64_t(getpid());
  std::memcpy(mine.data_ptr(), &pid, 8);
  std::string h = hostname().substr(0, size_t(kHost - 1));
  std::memcpy(static_cast<char*>(mine.data_ptr()) + 8, h.data(), h.size());
  Tensor all = Tensor::zeros({pg.size() * kEntry}, ddp::TensorOptions(DType::u8));
  ddp::Tensors outs;
  for (int r = 0; r < pg.size(); ++r) outs.push_back(all.narrow(0, r * kEntry, kEntry));
  pg.allgather(outs, mine)->wait(pg.timeout());
  std::vector<std::string> lines;
  for (int r = 0; r < pg.size(); ++r) {
    const char* e = static_cast<const char*>(all.data_ptr()) + r * kEntry;
    std::memcpy(&pid, e, 8);
    lines.push_back(fmt::format(" Rank {:2} Pid {:7} on {}", r, pid, std::string(e + 8)));
  }
  return lines;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int run(ProcessGroup& pg, const Options& o) {
  const int rank = pg.rank(), world = pg.size();
  const bool print = rank == 0;
  if (uses_root(o.collective) && o.root >= world) {
    if (print)
      fmt::print(stderr, "bench_collectives: -r {} is out of range for world size {}\n", o.root,
                 world);
    return kExitUsage;
  }

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> json(nullptr, &std::fclose);
  int json_failed = 0;
  if (print && !o.json_path.empty()) {
    json.reset(std::fopen(o.json_path.c_str(), "w"));
    json_failed = json ? 0 : errno;
  }
  if (sum_over_ranks(pg, json_failed) != 0) {
    if (print)
      fmt::print(stderr, "bench_collectives: cannot write {}: {}\n", o.json_path,
                 std::strerror(json_failed));
    return kExitError;
  }

  std::string versions =
      fmt::format("libddp {}, fmt {}.{}.{}", DDP_VERSION_STRING, FMT_VERSION / 10000,
                  FMT_VERSION / 100 % 100, FMT_VERSION % 100);
  bool has_raw = false;
#if DDP_HAVE_MPI
  std::unique_ptr<RawMpiBaseline> raw;
  if (o.backend == "mpi") {
    raw = std::make_unique<RawMpiBaseline>();
    has_raw = true;
    versions += ", " + RawMpiBaseline::library_version();
  }
#endif

  std::vector<std::string> info;
  info.push_back(fmt::format(
      "bench_collectives {}: backend {}, world size {}, dtype {} ({}), "
      "op {}, root {}",
      collective_name(o.collective), o.backend, world, o.dtype_label, ddp::dtype_name(o.dtype),
      uses_reduce_op(o.collective) ? ddp::dist::reduce_op_name(o.op) : "none",
      uses_root(o.collective) ? o.root : -1));
  info.push_back(fmt::format(
      "minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} "
      "validation: {} blocking: {}",
      o.min_bytes, o.max_bytes, o.step_factor, o.warmup, o.iters, int(o.check), int(o.blocking)));
  info.push_back(versions);
  std::time_t now = std::time(nullptr);
  info.push_back(fmt::format("host {}, {:%Y-%m-%d %H:%M:%S %z}", hostname(), fmt::localtime(now)));
  for (std::string& l : rank_lines(pg)) info.push_back(std::move(l));

  Report report(o, world, has_raw, stdout, json.get());
  if (print) report.header(info);

  const int64_t esize = int64_t(ddp::element_size(o.dtype));
  for (int64_t size = o.min_bytes; size <= o.max_bytes;) {
    Buffers b = make_buffers(o.collective, o.dtype, size / esize, world);
    Row row;
    row.bytes = b.bytes();
    row.count = b.count;
    if (o.warmup > 0) time_wrapper(pg, b, o, o.warmup);
    std::vector<double> lib_times, raw_times;
    for (int round = 0; round < o.rounds; ++round) {
      lib_times.push_back(max_over_ranks(pg, time_wrapper(pg, b, o, o.iters)));
#if DDP_HAVE_MPI
      // Warm-up only before the first round: later rounds follow each other.
      if (raw)
        raw_times.push_back(raw->time(b, o.op, o.root, round == 0 ? o.warmup : 0, o.iters));
#endif
    }
    row.time_s = median(lib_times);
    if (!raw_times.empty()) row.raw_time_s = median(raw_times);
    if (o.check) {
      fill_check_pattern(b, rank, o.op);
      launch(pg, b, o.op, o.root)->wait(pg.timeout());
      row.wrong = sum_over_ranks(pg, count_wrong(b, rank, world, o.op, o.root));
    }
    if (print) report.row(row);
    if (size > o.max_bytes / o.step_factor) break;
    size *= o.step_factor;
  }
  if (print) report.footer();
  const int64_t wrong = print ? report.total_wrong() : 0;
  return sum_over_ranks(pg, wrong) == 0 ? 0 : kExitError;
}

}  // namespace
}  // namespace bench

int main(int argc, char** argv) {
  using namespace bench;
  Options opts;
  try {
    opts = parse_options(argc, argv);
  } catch (const UsageError& e) {
    if (launcher_rank_zero())
      fmt::print(stderr, "bench_collectives: {}\nRun 'bench_collectives --help' for the options.\n",
                 e.what());
    return kExitUsage;
  }
  if (opts.help) {
    std::fputs(usage_text().c_str(), stdout);
    return 0;
  }

  std::shared_ptr<ddp::dist::ProcessGroup> pg;
  try {
    pg = create_group(opts.backend);
  } catch (const BackendUnavailable& e) {
    if (launcher_rank_zero()) fmt::print(stderr, "bench_collectives: {}\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_collectives: cannot create the {} process group: {}\n", opts.backend,
               e.what());
    return kExitError;
  }

  try {
    return run(*pg, opts);
  } catch (const std::exception& e) {
    // A collective failed (ddp::Error, e.g. MpiError or TimeoutError) or
    // memory ran out. The other ranks may be blocked in a collective this
    // rank will never join, so leave without tearing the group down (its
    // destructor would wait for them); mpirun then stops the job.
    fmt::print(stderr, "bench_collectives (rank {}): error: {}\n", pg->rank(), e.what());
    std::fflush(stderr);
    std::exit(kExitError);
  }
}
