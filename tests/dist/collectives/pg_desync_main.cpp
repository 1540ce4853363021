// Ranks that fall out of step: every survivor must end with the desync
// report (Note [Desync report]) within the timeout + 10 s, or, with
// DDP_DEBUG=detail, with the collective check's error (Note [Collective
// check mode]). Run by ctest through ddprun (gloo) and mpirun (mpi).
//
//   pg_desync_main --backend gloo|mpi --scenario skip|shape|sleep|killed|late [--odd R]
//
// Every rank issues allreduce "step 1", allreduce "step 2", barrier "step 3";
// the odd rank (default 1) skips step 2 (skip), passes a longer tensor in
// step 2 (shape), sleeps instead of step 2 and issues nothing more (sleep:
// the others must call it alive but busy), or raises SIGKILL on itself
// while its (16 MiB) step 2 is in flight (killed: the others must call it
// lost), or starts step 2 1.5 s after the others' timeout (late, mpi: the
// others' blocking call returns while their watchdog makes the report, Note
// [MPI timeouts]; they must still end with the report). Each rank prints
// one line "rank N: PASS ..." when it saw what it should, or "rank N: odd
// rank, done" for an odd rank that saw no error; the ctest checks that every
// rank printed one (expect_lines.sh), since mpirun's exit status is not the
// ranks' (a timed-out MPI rank skips MPI_Finalize: Note [MPI timeouts]).

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/dist/flight_recorder.h"
#include "ddp/dist/init.h"

using namespace ddp;
using namespace ddp::dist;

static std::string fmt_rank(int r) { return "rank " + std::to_string(r); }

int main(int argc, char** argv) {
  std::string backend = "gloo", scenario = "sleep";
  int odd = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--backend") backend = argv[i + 1];
    if (a == "--scenario") scenario = argv[i + 1];
    if (a == "--odd") odd = std::atoi(argv[i + 1]);
  }
  constexpr double kTimeoutS = 3.0;
  const char* dbg = std::getenv("DDP_DEBUG");
  const bool detail = dbg && std::string(dbg) == "detail";
  int rank = -1;
  auto t0 = std::chrono::steady_clock::now();
  try {
    InitOptions o;
    o.backend = backend;
    o.device = Device::cpu();
    World w = init_process_group(o);
    rank = w.rank();
    ProcessGroup& g = *w.group;
    g.barrier()->wait();
    g.set_timeout(std::chrono::milliseconds(int(kTimeoutS * 1000)));
    Tensor a = Tensor::ones({4});
    {
      CollectiveTag tag("step 1");
      g.allreduce({a})->wait();
    }
    t0 = std::chrono::steady_clock::now();
    const bool is_odd = rank == odd;
    if (is_odd && scenario == "sleep") {
      std::printf("rank %d: odd rank, done (sleeping instead of step 2)\n", rank);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(14));
      return 0;
    }
    if (scenario == "killed") {
      // Long enough to be in flight when the odd rank dies.
      CollectiveTag tag("step 2");
      Tensor b = Tensor::ones({int64_t(1) << 22});
      auto work = g.allreduce({b});
      if (is_odd) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::fprintf(stderr, "rank %d: killing myself mid-allreduce\n", rank);
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
      work->wait();
    } else if (!(is_odd && scenario == "skip")) {
      if (is_odd && scenario == "late")
        std::this_thread::sleep_for(std::chrono::milliseconds(int((kTimeoutS + 1.5) * 1000)));
      CollectiveTag tag("step 2");
      Tensor b = Tensor::ones({is_odd && scenario == "shape" ? 5 : 4});
      g.allreduce({b})->wait();
      if (is_odd && scenario == "late") {
        std::printf("rank %d: odd rank, done (late step 2 completed)\n", rank);
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::seconds(14));
        return 0;
      }
    }
    {
      CollectiveTag tag("step 3");
      g.barrier()->wait();
    }
    if (is_odd) {
      std::printf("rank %d: odd rank, done (no error)\n", rank);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(14));
      return 0;
    }
    std::printf("rank %d: FAIL: no error\n", rank);
    return 1;
  } catch (const Error& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string msg = e.what();
    std::vector<std::string> want = {"desync report:"};
    if (detail && scenario == "shape") want = {"differs across ranks (DDP_DEBUG=detail)"};
    // The odd rank's state, as the heartbeat (gloo) or the liveness ping
    // (mpi) tells it.
    if (scenario == "sleep")
      want.push_back(fmt_rank(odd) +
                     " is alive but busy outside the roll call, at allreduce #2 "
                     "(step 1) done, nothing issued since");
    if (scenario == "killed") want.push_back(fmt_rank(odd) + " is lost (no answer, no ");
    bool ok = s <= kTimeoutS + 10.0;
    for (const std::string& w : want) ok = ok && msg.find(w) != std::string::npos;
    std::printf("rank %d: %s after %.1f s: %s\n", rank, ok ? "PASS" : "FAIL", s, msg.c_str());
    std::fflush(stdout);
    // Under mpirun, a rank that ends first may get the others killed before
    // they print.
    std::this_thread::sleep_for(std::chrono::seconds(2));
    return ok ? 0 : 1;
  }
}
