// ddprun: starts the local workers of a data-parallel job with the torchrun
// environment contract (the equivalent of `torchrun --no-python`).
//
//   ddprun --nproc-per-node 4 ./train_resnet --epochs 1
//   ddprun --nproc-per-node 8 --nnodes 2 --node-rank 0 --master-addr n0
//          --master-port 29500 ./train_gpt    (on n0; --node-rank 1 on n1)
//   ddprun --nproc-per-node 3:4 ./train_resnet --fault-tolerant   (elastic)
//   ddprun --nnodes 3:4 --nproc-per-node 1 --node-rank K --master-addr n0
//          --master-port 29500 ./train_resnet --fault-tolerant  (elastic, nodes)
//
// Each worker sees RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, DDP_RESTART_COUNT and
// DDPRUN=1 (ddp::dist::detect_launch_env reads them). Its stdout and stderr
// come back line by line prefixed with "[rank]: ", and its stdin is
// /dev/null.
//
// Note [ddprun process groups and signals]
// Every worker is put in a process group of its own (setpgid in the child),
// and the launcher signals the whole group (kill(-pgid)). That way a worker
// that is a shell script, or spawns helpers, is stopped with everything it
// started, and a worker that forks cannot leak processes past the job. The
// cost is that a Ctrl-C at the terminal reaches only the foreground group,
// the launcher's, so the launcher forwards SIGINT itself to every worker
// group and then waits for them as when a worker fails: SIGTERM, a grace
// period of 5 s, then SIGKILL (SIGTERM, SIGUSR1 and SIGUSR2 are forwarded
// too, with their own grace: Note [ddprun preemption]). Workers also ask
// the kernel for SIGKILL should the launcher die first (PR_SET_PDEATHSIG),
// so a `kill -9` of the launcher leaves no orphans.
//
// Note [ddprun preemption]
// SIGTERM, SIGUSR1 and SIGUSR2 (a scheduler's preemption notice, Slurm's
// `--signal`) are forwarded the same way, but then the launcher waits up to
// --preempt-grace seconds (default 30, also handed to the workers as
// DDP_PREEMPT_GRACE_S) for the workers to agree on a stop step, save and
// exit (ddp/parallel/preemption.h). If every worker exits 0 in that time the
// job was preempted cleanly: the launcher exits 0 and restarts nothing, and
// with several nodes it tells the others nothing either, since their
// workers stop at the same step through the job's store. Otherwise the
// workers still alive get SIGKILL and the launcher exits 128 + the signal
// as an interrupted job (the other nodes are told to stop, as below).
// A worker that ignores these signals (a plain shell script) thus costs the
// grace period; SIGINT keeps the 5 s of Note [ddprun process groups and
// signals].
//
// Note [ddprun restarts]
// A worker that exits non-zero or by a signal fails the whole local group:
// the launcher stops the others (see Note [ddprun process groups and
// signals]) and, while restarts are left (--max-restarts), starts all of them
// again with TORCHELASTIC_RESTART_COUNT / DDP_RESTART_COUNT one higher; a
// worker resumes from its checkpoint, it is not handed any state. With
// several nodes the launchers meet in a TCPStore that node 0's launcher hosts
// at MASTER_PORT + 1 (the workers' own store takes MASTER_PORT): before every
// round they pass a store barrier (waiting at most --rdzv-timeout), and a
// launcher whose group fails posts "ddprun/fail/<round>" with the exit status;
// the others poll for that key, stop their groups too, and join the next
// round, so all nodes restart together. A launcher that gets SIGINT, or a
// preemption signal its workers do not end cleanly on (Note [ddprun
// preemption]), also posts "ddprun/abort": the others then stop without
// restarting, and every launcher exits with 128 + that signal. A node whose
// group has already finished successfully does not come back for a
// restart; the others then time out at the next barrier with a clear
// error. Elastic membership, on one node or several, is Note [ddprun
// elastic].
//
// Note [ddprun elastic]
// `--nproc-per-node MIN:MAX` (or `--elastic`, with N meaning N:N) runs the
// job for ddp::parallel::ElasticGroup (ddp/parallel/elastic.h), whose
// survivors keep training when a rank dies and let a replacement join at a
// step boundary. Unlike Note [ddprun restarts], the launcher never touches
// a survivor:
//  - On one node it starts MAX founders; RANK = LOCAL_RANK = the slot
//    0..MAX-1 (the worker's stable replica id), WORLD_SIZE = MAX, and it
//    hands them
//    DDP_ELASTIC=1, DDP_ELASTIC_MIN, DDP_ELASTIC_MAX, DDP_ELASTIC_TOKEN (a
//    random token per job, or the one in ddprun's own environment) and
//    TORCHELASTIC_USE_AGENT_STORE=True: the launcher itself hosts the
//    workers' TCPStore at MASTER_ADDR:MASTER_PORT (a free port for 0), so
//    the store outlives any worker (rank 0 connects as a client;
//    init_process_group and connect_store follow the variable).
//  - A worker that exits non-zero or by a signal is replaced alone: what is
//    left of its process group gets SIGKILL, and the same slot is started
//    again with the same RANK and TORCHELASTIC_RESTART_COUNT /
//    DDP_RESTART_COUNT = that slot's restarts so far; at most
//    --max-replacements (default 3 * MAX) in all. Past that the slot stays
//    empty, and once the live workers are fewer than MIN the launcher stops
//    the rest (SIGTERM, 5 s, SIGKILL) and exits with the last failure's
//    status, naming the empty slots. (The workers' own MIN check, the heal's
//    min_size, usually ends them first.)
//  - A worker that exits 0 is done, and the job is then completing: nothing
//    is replaced from then on (a worker that fails leaves its slot empty),
//    and a replacement still running --preempt-grace seconds after that
//    first exit 0 is taken as one that could not be admitted any more (its
//    join would wait out its timeout): it gets SIGTERM, SIGKILL 5 s later.
//    A replacement admitted in time finishes at the same step as the
//    others and exits 0 by itself. Founders are never stopped this way (rank
//    0 may still be writing the final checkpoint).
//  - The exit status is 0 when every slot's last worker exited 0, or was a
//    replacement that ended (or was stopped) after the job began completing;
//    otherwise it is the status of the first slot for which neither holds:
//    a slot left empty after the replacements ran out fails the job even
//    when the others completed.
//  - Signals are as in the classic mode (Note [ddprun preemption]): a
//    preemption signal is clean when every worker running at that moment
//    exits 0 within the grace (a replacement still waiting to join must
//    exit 0 on it too); SIGINT ends the job with 130. Nothing is replaced
//    after a signal.
//  - --max-restarts (restarts of the whole group) has no meaning here and
//    is refused (exit 2).
// Across nodes, `--nnodes MIN:MAX` (or `--elastic --nnodes N`, N:N) with a
// fixed `--nproc-per-node P`; both ranged at once is refused (exit 2: MIN
// workers of MIN nodes would be two minimums). The rules above hold per
// node, with these differences:
//  - Node 0's launcher hosts the job's store at --master-addr:--master-port
//    (both required, the same on every node); the other launchers and all
//    workers connect to it (a launcher waits --rdzv-timeout for it). The
//    launchers link through it (nodes.cpp): node 0 posts the job's token
//    (DDP_ELASTIC_TOKEN from its environment, or a random one) and its
//    shape (--nnodes, --nproc-per-node), which every other node must match
//    (exit 2 otherwise; a token of its own must match too).
//  - The founders are MIN nodes' workers: WORLD_SIZE = MIN * P,
//    DDP_ELASTIC_MIN = MIN * P, DDP_ELASTIC_MAX = MAX * P, LOCAL_RANK the
//    slot, GROUP_RANK the node. Whoever arrives first founds generation 0;
//    a node with node_rank >= MIN, or one that arrives once it is formed,
//    joins at a step boundary. So a job survives a lost worker, or node,
//    only while at least MIN * P workers are left: `--nnodes 2:2` dies with
//    any worker, as `--nproc-per-node 4:4` does on one node.
//  - RANK is the worker's replica id, unique in the job for good: node_rank
//    * P + slot at a slot's first start, and for a replacement the next of
//    a counter in the store from MAX * P up (a launcher that finds its first
//    ids taken, one restarted with the same --node-rank, draws from the
//    counter too). A reused id would be refused while the dead worker is
//    still a member ("already a member"), and two nodes could not agree on
//    whose it is. A joiner's RANK is thus at or above WORLD_SIZE. (On one
//    node a replacement keeps its slot's id, which stays below WORLD_SIZE.)
//  - Each node replaces only its own workers, at most --max-replacements
//    (default 3 * P) per node; the workers' MIN (their heal's min_size)
//    decides when the job is too small, not the launchers.
//  - The job is completing as soon as a worker exits 0 on any node (the
//    launcher that sees it posts it in the store): no node replaces from
//    then on, and each stops its joiners (replacements and the workers of
//    a node that joined) still running --preempt-grace seconds later.
//  - A node lost (its launcher killed: its workers die with it) stops no
//    one: the others' workers heal. Each launcher beats in the store; node
//    0, which hosts the store, waits at the end for every launcher that is
//    not done and beat in the last 10 s (kNodeSilence), at most
//    --rdzv-timeout (5 s past the grace when interrupted).
//  - Node 0 lost is the job lost, as with torchrun's c10d rendezvous: the
//    others' workers fail with a DistNetworkError naming the store, and
//    their launchers, whose store requests fail too, replace no one and
//    exit with the workers' status.
//  - Signals stay per node: SIGINT or an unclean preemption on one node ends
//    that node's workers (the others heal, or stop at the agreed step when
//    preempted through the store, ddp/parallel/preemption.h).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "command_line.h"
#include "ddp/core/error.h"
#include "ddp/dist/rendezvous.h"
#include "ddp/dist/tcp_store.h"
#include "launcher.h"

namespace ddprun {
namespace {

constexpr const char* kUsage =
    "usage: ddprun --nproc-per-node N|MIN:MAX [--elastic] [--max-replacements K] "
    "[--nnodes M|MIN:MAX --node-rank K --master-addr HOST --master-port PORT] [--max-restarts R] "
    "[--rdzv-timeout SECONDS] [--preempt-grace SECONDS] PROGRAM [ARGS...]\n";

[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr, "ddprun: %s\n%s", why.c_str(), kUsage);
  std::exit(2);
}

// Why text is not a whole number in [lo, hi] (then out is unchanged), or "".
std::string check_int(const std::string& text, long lo, long hi, int& out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || errno != 0 || *end != '\0' || v < lo || v > hi)
    return "bad value '" + text + "'";
  out = int(v);
  return "";
}

// "N" (lo = hi = N, ranged = false) or "MIN:MAX" with 1 <= MIN <= MAX.
std::string check_range(const std::string& text, long lo, long hi, int& min_out, int& max_out,
                        bool& ranged) {
  const size_t colon = text.find(':');
  int a = 0, b = 0;
  if (colon == std::string::npos) {
    if (auto why = check_int(text, lo, hi, a); !why.empty()) return why;
    min_out = max_out = a;
    ranged = false;
    return "";
  }
  if (!check_int(text.substr(0, colon), 0, hi, a).empty() ||
      !check_int(text.substr(colon + 1), 0, hi, b).empty())
    return "bad value '" + text + "' (expected N or MIN:MAX, whole numbers)";
  if (a < lo) return "bad value '" + text + "': MIN must be at least " + std::to_string(lo);
  if (a > b) return "bad value '" + text + "': MIN is above MAX";
  min_out = a;
  max_out = b;
  ranged = true;
  return "";
}

Options parse_args(int argc, char** argv) {
  Options o;
  bool nproc_ranged = false, nnodes_ranged = false;
  int nnodes_min = 1;
  // "--flag value", "--flag=value" and torchrun's underscores; the first
  // argument that is not an option (or the one after "--") is the program.
  ddp_cli::CommandLine cli("ddprun", "");
  cli.set_usage(kUsage);
  cli.usage_on_error();
  cli.stop_at_command();
  auto add_int = [&](const char* names, int* out, long lo, long hi) {
    cli.add_value(names, "N", "", "",
                  [out, lo, hi](const std::string& v) { return check_int(v, lo, hi, *out); });
  };
  cli.add_value("--nproc-per-node,--nproc_per_node", "N|MIN:MAX", "", "",
                [&](const std::string& v) {
                  return check_range(v, 1, 1 << 16, o.nproc_min, o.nproc, nproc_ranged);
                });
  cli.add_value("--nnodes", "M|MIN:MAX", "", "", [&](const std::string& v) {
    return check_range(v, 1, 1 << 16, nnodes_min, o.nnodes, nnodes_ranged);
  });
  add_int("--node-rank,--node_rank", &o.node_rank, 0, 1 << 16);
  cli.add_value("--master-addr,--master_addr", "HOST", "", "", [&](const std::string& v) {
    if (v.empty()) return std::string("bad value ''");
    o.master_addr = v;
    return std::string();
  });
  add_int("--master-port,--master_port", &o.master_port, 0, 65535);
  add_int("--max-restarts,--max_restarts", &o.max_restarts, 0, 1 << 20);
  add_int("--max-replacements,--max_replacements", &o.max_replacements, 0, 1 << 20);
  cli.add_flag("--elastic", &o.elastic, "");
  cli.add_double("--rdzv-timeout,--rdzv_timeout", &o.rdzv_timeout_s, "", 0.0, /*exclusive=*/true);
  cli.add_double("--preempt-grace,--preempt_grace", &o.preempt_grace_s, "", 0.0);
  try {
    cli.parse(argc, argv);
  } catch (const ddp_cli::UsageExit& e) {
    std::fputs(e.what(), e.code == 0 ? stdout : stderr);
    std::exit(e.code);
  }
  o.command = cli.command();
  const bool have_nproc = cli.given("--nproc-per-node,--nproc_per_node");
  const bool have_port = cli.given("--master-port,--master_port");
  if (!have_nproc) usage_error("--nproc-per-node is required");
  if (o.command.empty()) usage_error("no program given");
  o.nnodes_min = nnodes_min;
  // Note [ddprun elastic]: MIN:MAX counts workers on one node, or nodes.
  if (nproc_ranged && (nnodes_ranged || o.nnodes > 1))
    usage_error(
        "--nproc-per-node MIN:MAX is elastic on one node; across nodes give --nnodes MIN:MAX "
        "with a fixed --nproc-per-node (both ranged at once is not supported)");
  o.elastic = o.elastic || nproc_ranged || nnodes_ranged;
  if (o.elastic) {
    if (o.max_restarts > 0)
      usage_error(
          "--max-restarts restarts the whole group and has no meaning in elastic mode "
          "(--nproc-per-node MIN:MAX, --nnodes MIN:MAX, --elastic); use --max-replacements");
    if (o.max_replacements < 0) o.max_replacements = 3 * o.nproc;
  } else if (cli.given("--max-replacements,--max_replacements")) {
    usage_error(
        "--max-replacements needs elastic mode (--nproc-per-node MIN:MAX, --nnodes MIN:MAX or "
        "--elastic)");
  }
  if (o.node_rank >= o.nnodes)
    usage_error(nnodes_ranged ? "--node-rank must be below MAX of --nnodes MIN:MAX"
                              : "--node-rank must be below --nnodes");
  if (o.elastic_nodes()) {
    // The other nodes' workers and launchers connect to the store that node
    // 0's launcher hosts: they must know where it is.
    if (!cli.given("--master-addr,--master_addr") || !have_port || o.master_port == 0)
      usage_error(
          "elastic mode across nodes (--nnodes MIN:MAX with MAX > 1) needs --master-addr and "
          "--master-port (1..65535): where node 0's launcher hosts the job's store, the same on "
          "every node");
  } else if (o.nnodes > 1) {
    // Every node must name the same port, and the launchers' own store needs
    // MASTER_PORT + 1, so a picked-at-random port cannot work across nodes.
    if (!have_port || o.master_port == 0 || o.master_port == 65535)
      usage_error("with --nnodes > 1, give --master-port (1..65534), the same on every node");
  }
  return o;
}

// A port that is free right now on this machine. Another process could take
// it before rank 0 binds it; good enough for a single-node job, which is the
// only one that asks (see parse_args).
int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int err = errno;
    ::close(fd);
    throw std::runtime_error(std::string("cannot pick a free port: ") + std::strerror(err));
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// --- the launcher's rendezvous (multi-node) ----------------------------------

struct Rendezvous {
  std::unique_ptr<ddp::dist::TCPStoreServer> server;  // node 0 only
  std::unique_ptr<ddp::dist::TCPStore> store;
  std::chrono::milliseconds timeout{};
};

std::string fail_key(int round) { return "ddprun/fail/" + std::to_string(round); }
// Set by a launcher that got SIGINT, or a preemption signal that did not end
// cleanly: the job ends, no restart.
constexpr const char* kAbortKey = "ddprun/abort";

// (node 0's launcher ended) must not keep us from stopping our workers.
void post_failure(Rendezvous& r, int round, int status, bool abort) {
  try {
    if (abort) r.store->set(kAbortKey, "1");
    r.store->compare_set(fail_key(round), "", std::to_string(status));
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddprun: cannot tell the other nodes: %s\n", e.what());
  }
}

// Whether another launcher posted a failure of this round. Losing the store
// ends the job here (no restart could rendezvous anyway).
std::optional<Outcome> poll_remote_failure(Rendezvous& r, int round) {
  try {
    if (!r.store->check({fail_key(round)})) return std::nullopt;
    int st = std::atoi(r.store->get_string(fail_key(round)).c_str());
    bool abort = r.store->check({kAbortKey});
    std::fprintf(stderr, "ddprun: %s on another node (exit status %d); stopping ours\n",
                 abort ? "the launcher was interrupted" : "a worker failed", st);
    return Outcome{abort ? Outcome::interrupted : Outcome::failed, st == 0 ? 1 : st};
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddprun: lost the launchers' store; stopping the workers: %s\n", e.what());
    return Outcome{Outcome::interrupted, 1};
  }
}

// Runs one round of the local group to its end.
Outcome run_round(const Options& o, int master_port, int round, Rendezvous* rdzv) {
  std::vector<Worker> ws(size_t(o.nproc));
  for (int local = 0; local < o.nproc; ++local)
    spawn(ws[size_t(local)], o, master_port, local, round);
  Outcome outcome;
  auto next_poll = Clock::now();
  while (any_running(ws)) {
    pump_output(ws, 50ms);
    if (auto failed = reap(ws)) {
      const auto& w = ws[*failed];
      std::fprintf(
          stderr,
          "ddprun: worker rank %d (pid %d) failed with exit status %d; stopping the others\n",
          w.rank, int(w.pid), w.status);
      outcome = {Outcome::failed, w.status};
      if (rdzv) post_failure(*rdzv, round, w.status, /*abort=*/false);
      break;
    }
    if (g_signal && is_preemption(g_signal)) {
      // Our workers first; the other nodes are told only if that fails.
      outcome = preempt(ws, int(g_signal), o.preempt_grace_s);
      if (rdzv && outcome.kind != Outcome::success)
        post_failure(*rdzv, round, outcome.status, /*abort=*/true);
      break;
    }
    if (g_signal) {
      std::fprintf(stderr, "ddprun: got signal %d; forwarding it to the workers\n", int(g_signal));
      outcome = {Outcome::interrupted, 128 + int(g_signal)};
      // The other nodes stop too, and do not restart without us.
      if (rdzv) post_failure(*rdzv, round, outcome.status, /*abort=*/true);
      break;
    }
    // Another node's group failed: stop ours as well and share its status.
    if (rdzv && Clock::now() >= next_poll) {
      next_poll = Clock::now() + 200ms;
      if (auto remote = poll_remote_failure(*rdzv, round)) {
        outcome = *remote;
        break;
      }
    }
  }
  // Forward the signal we got; SIGTERM when the stop comes from elsewhere.
  if (any_running(ws)) stop_all(ws, g_signal ? int(g_signal) : SIGTERM);
  drain(ws);
  return outcome;
}

int run(const Options& o) {
  int master_port = o.master_port;
  if (master_port == 0) master_port = pick_free_port();
  std::unique_ptr<Rendezvous> rdzv;
  auto rdzv_failed = [&](const std::exception& e) {
    std::fprintf(stderr, "ddprun: rendezvous of %d nodes at %s:%d failed: %s\n", o.nnodes,
                 o.master_addr.c_str(), master_port + 1, e.what());
    return 1;
  };
  if (o.nnodes > 1) try {
      rdzv = std::make_unique<Rendezvous>();
      rdzv->timeout = std::chrono::milliseconds(int64_t(o.rdzv_timeout_s * 1000));
      ddp::dist::TCPStoreOptions so;
      so.host = o.master_addr;
      so.port = uint16_t(master_port + 1);
      so.timeout = rdzv->timeout;
      if (o.node_rank == 0) {
        so.is_server = true;
        so.bind_address = "0.0.0.0";
        rdzv->server = std::make_unique<ddp::dist::TCPStoreServer>(so);
        rdzv->server->start();
        so.is_server = false;
      }
      rdzv->store = std::make_unique<ddp::dist::TCPStore>(so);
    } catch (const ddp::Error& e) {
      return rdzv_failed(e);
    }

  Outcome last;
  for (int round = 0; round <= o.max_restarts; ++round) {
    if (rdzv) {
      try {
        ddp::dist::store_barrier(*rdzv->store, "ddprun/round", o.node_rank, o.nnodes,
                                 rdzv->timeout);
      } catch (const ddp::Error& e) {
        return rdzv_failed(e);
      }
    }
    last = run_round(o, master_port, round, rdzv.get());
    if (last.kind != Outcome::failed) break;
    if (round < o.max_restarts)
      std::fprintf(stderr, "ddprun: restarting the workers (restart %d of %d)\n", round + 1,
                   o.max_restarts);
  }
  if (rdzv) try {
      // Node 0 hosts the store: it stays up until every launcher is done with
      // it, so that none of them mistakes the job's end for a lost store. When
      // interrupted, it waits only as long as the others need to stop.
      rdzv->store->add("ddprun/finished", 1);
      if (o.node_rank == 0) {
        auto wait = rdzv->timeout;
        if (last.kind == Outcome::interrupted)
          wait = std::min<std::chrono::milliseconds>(wait, kGracePeriod + 5s);
        const auto until = Clock::now() + wait;
        while (std::stoll(rdzv->store->get_string("ddprun/finished")) < o.nnodes &&
               Clock::now() < until)
          std::this_thread::sleep_for(100ms);
      }
    } catch (const ddp::Error& e) {
      std::fprintf(stderr, "ddprun: lost the launchers' store at the end of the job: %s\n",
                   e.what());
    }
  return last.status;
}

}  // namespace
}  // namespace ddprun

int main(int argc, char** argv) {
  using namespace ddprun;
  Options o = parse_args(argc, argv);
  install_handlers();
  try {
    if (o.elastic) return run_elastic(o);
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun: %s\n", e.what());
    return 1;
  }
}
