// bench_flight_recorder: the cost of the flight recorder per collective
// (Note [Flight recorder]).
//
//   bench_flight_recorder [--iters N] [--runs R]
//
// 1. record: FlightRecorder::record + mark_started + mark_finished, the calls
//    one collective makes, on a 2000-entry ring with a CollectiveTag set.
// 2. collective: ProcessGroup::allreduce()->wait() on a group whose backend
//    does nothing (a completed Work), so that everything measured is the
//    common path every backend passes (argument checks, recording, the Work);
//    once with DDP_FLIGHT_RECORDER_SIZE=2000 and once with 0. The difference
//    is the recorder's cost per collective.
// Each figure is the median of R runs of N calls.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ddp/dist/flight_recorder.h"
#include "ddp/dist/process_group.h"

using namespace ddp;
using namespace ddp::dist;

namespace {

// A backend that does nothing: each collective returns a completed Work.
class NullGroup : public ProcessGroup {
 public:
  NullGroup() : ProcessGroup(0, 2) {}
  std::string backend_name() const override { return "null"; }

 protected:
  WorkPtr done(const char* op) { return completed_work(op); }
  WorkPtr do_allreduce(Tensors&, ReduceOp) override { return done("allreduce"); }
  WorkPtr do_broadcast(Tensors&, int) override { return done("broadcast"); }
  WorkPtr do_reduce(Tensors&, int, ReduceOp) override { return done("reduce"); }
  WorkPtr do_allgather(Tensors&, const Tensor&) override { return done("allgather"); }
  WorkPtr do_reduce_scatter(const Tensor&, Tensors&, ReduceOp) override {
    return done("reduce_scatter");
  }
  WorkPtr do_all_to_all(const Tensor&, const Tensor&) override { return done("all_to_all"); }
  WorkPtr do_barrier() override { return done("barrier"); }
  WorkPtr do_send(const Tensor&, int, int) override { return done("send"); }
  WorkPtr do_recv(const Tensor&, int, int) override { return done("recv"); }
};

template <class F>
double median_ns_per_call(int runs, int iters, F&& f) {
  std::vector<double> ns;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f(i);
    const auto t1 = std::chrono::steady_clock::now();
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / iters);
  }
  std::sort(ns.begin(), ns.end());
  return ns[ns.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 200000, runs = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--iters") iters = std::atoi(argv[i + 1]);
    else if (a == "--runs") runs = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_flight_recorder [--iters N] [--runs R]\n");
      return 2;
    }
  }
  if (iters < 1 || runs < 1) {
    std::fprintf(stderr, "bench_flight_recorder: --iters and --runs must be at least 1\n");
    return 2;
  }
  Tensor t = Tensor::ones({256});
  const Tensors ts{t};
  CollectiveTag tag("ddp bucket 3 of 7, iteration 41");

  FlightRecorder raw(FlightRecorder::kDefaultCapacity, 0, 2, "bench");
  const double record_ns = median_ns_per_call(runs, iters, [&](int) {
    const uint64_t seq = raw.record("allreduce", ts);
    raw.mark_started(seq);
    raw.mark_finished(seq, CollectiveState::completed);
  });

  ::setenv("DDP_FLIGHT_RECORDER_SIZE", "2000", 1);
  NullGroup on;
  ::setenv("DDP_FLIGHT_RECORDER_SIZE", "0", 1);
  NullGroup off;
  ::unsetenv("DDP_FLIGHT_RECORDER_SIZE");
  // Interleaved, so that a loaded machine slows both alike.
  std::vector<double> on_ns, off_ns;
  for (int r = 0; r < runs; ++r) {
    on_ns.push_back(median_ns_per_call(1, iters, [&](int) { on.allreduce(ts)->wait(); }));
    off_ns.push_back(median_ns_per_call(1, iters, [&](int) { off.allreduce(ts)->wait(); }));
  }
  std::sort(on_ns.begin(), on_ns.end());
  std::sort(off_ns.begin(), off_ns.end());
  const double on_med = on_ns[on_ns.size() / 2], off_med = off_ns[off_ns.size() / 2];
  std::printf("record + start + finish (raw):   %8.1f ns\n", record_ns);
  std::printf("allreduce()->wait(), recorder on:  %8.1f ns\n", on_med);
  std::printf("allreduce()->wait(), recorder off: %8.1f ns\n", off_med);
  std::printf("recorder cost per collective: %.1f ns (median of %d runs of %d calls)\n",
              on_med - off_med, runs, iters);
  return 0;
}
