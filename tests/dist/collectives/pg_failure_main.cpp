// A job in which one rank dies: the other ranks must fail with an error that
// names it (Note [Naming the lost rank]), not hang. Driven by
// tests/dist/pg_failure_test.cpp (which starts the ranks itself, as a
// launcher would tear the survivors down) and by the ddprun restart test.
//
//   pg_failure_main --victim R [--first-attempt-only]
//
// Every rank joins through init_process_group (gloo), then all run large
// allreduces; the victim submits one and SIGKILLs itself while it is in
// flight. Survivors print "rank N: <error>" and exit 3. With
// --first-attempt-only the victim dies only when DDP_RESTART_COUNT is 0, so
// that under `ddprun --max-restarts 1` the second attempt completes: every
// rank checks an allreduce result and exits 0.

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "ddp/core/error.h"
#include "ddp/dist/init.h"

using namespace ddp;
using namespace ddp::dist;

int main(int argc, char** argv) {
  int victim = -1;
  bool first_attempt_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--victim" && i + 1 < argc)
      victim = std::atoi(argv[++i]);
    else if (a == "--first-attempt-only")
      first_attempt_only = true;
  }
  const char* restarts = std::getenv("DDP_RESTART_COUNT");
  const int attempt = restarts ? std::atoi(restarts) : 0;
  if (first_attempt_only && attempt > 0) victim = -1;

  int rank = -1;
  auto t0 = std::chrono::steady_clock::now();
  try {
    InitOptions o;
    o.backend = "gloo";
    o.device = Device::cpu();
    World w = init_process_group(o);
    rank = w.rank();
    w.group->barrier()->wait();
    t0 = std::chrono::steady_clock::now();
    const int64_t n = int64_t(1) << 22;  // 16 MiB of f32: long enough to die in
    Tensor t = Tensor::ones({n});
    if (rank == victim) {
      auto work = w.group->allreduce({t});
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::fprintf(stderr, "rank %d: killing myself mid-allreduce\n", rank);
      std::fflush(stderr);
      std::raise(SIGKILL);
    }
    const int rounds = victim < 0 ? 3 : 1000;
    for (int k = 0; k < rounds; ++k) {
      t.fill_(1.0);
      w.group->allreduce({t})->wait();
      const float got = t.to_vector<float>()[size_t(n - 1)];
      if (got != float(w.size())) {
        std::fprintf(stderr, "rank %d: allreduce gave %g, expected %d\n", rank, got, w.size());
        return 4;
      }
    }
    std::printf("rank %d: attempt %d completed\n", rank, attempt);
    return 0;
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "rank %d: failed after %.1f s: %s\n", rank, s, e.what());
    return 3;
  }
}
