// ddprun's elastic mode: one slot per worker, the workers' store hosted by
// the launcher (node 0's, across nodes), and a dead worker replaced alone.
// See Note [ddprun elastic] in main.cpp; nodes.cpp links the launchers of
// several nodes.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/dist/tcp_store.h"
#include "launcher.h"
#include "nodes.h"

namespace ddprun {
namespace {

struct Slot {
  int restarts = 0;      // replacements started in this slot
  bool lost = false;     // failed, not replaced: empty for good
  bool joiner = false;   // its worker joins a running job: a replacement, or a late node's
  bool excused = false;  // a joiner that ended after the job began completing
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL after our SIGTERM
};

// Where the store listens: loopback stays off the network.
std::string bind_address_for(const std::string& addr) {
  if (addr == "127.0.0.1" || addr == "localhost") return "127.0.0.1";
  if (addr == "::1") return "::1";
  return addr.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

std::string slot_list(const std::vector<Slot>& slots) {
  std::string s;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].lost) s += (s.empty() ? "" : ", ") + std::to_string(i);
  return s;
}

// A failed worker's process group is gone for good once its leader is
// reaped: what it left behind gets SIGKILL, and its output is read to the
// end, before a replacement takes the slot.
void retire(Worker& w) {
  ::kill(-w.pid, SIGKILL);
  std::vector<Worker> one{w};
  drain(one);
  w.out = {};
  w.err = {};
}

// A joiner still running long after the job began completing could not be
// admitted any more: SIGTERM, SIGKILL kGracePeriod later (Note [ddprun
// elastic]). Founders are never stopped this way.
void stop_stale_joiners(std::vector<Worker>& ws, std::vector<Slot>& slots,
                        Clock::time_point completing_since, double grace_s) {
  const auto now = Clock::now();
  const auto window = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::min(grace_s, 1e9)));
  for (size_t i = 0; i < ws.size(); ++i) {
    Worker& w = ws[i];
    Slot& s = slots[i];
    if (!w.running || !s.joiner) continue;
    if (!s.excused && now - completing_since >= window) {
      std::fprintf(stderr,
                   "ddprun: joining rank %d (pid %d) is still running %g s after the job began "
                   "completing; stopping it\n",
                   w.rank, int(w.pid), grace_s);
      s.excused = true;
      s.kill_at = now + kGracePeriod;
      ::kill(-w.pid, SIGTERM);
    } else if (s.excused && now >= s.kill_at) {
      ::kill(-w.pid, SIGKILL);
      s.kill_at = Clock::time_point::max();
    }
  }
}

// Hosts the workers' store (one node, or node 0 of several): it must
// outlive every worker (ElasticGroup).
std::unique_ptr<ddp::dist::TCPStoreServer> host_store(const Options& o) {
  ddp::dist::TCPStoreOptions so;
  so.host = o.master_addr;
  so.port = uint16_t(o.master_port);
  so.bind_address = bind_address_for(o.master_addr);
  try {
    auto store = std::make_unique<ddp::dist::TCPStoreServer>(so);
    store->start();
    return store;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddprun: cannot host the workers' store at %s:%d: %s\n",
                 o.master_addr.c_str(), o.master_port, e.what());
    return nullptr;
  }
}

// Several nodes: the link to the others; nullptr, with the exit status in
// `status`, when it cannot be made.
std::unique_ptr<NodeLink> link_nodes(const Options& o, const std::string& token, int& status) {
  try {
    return std::make_unique<NodeLink>(o, token);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ddprun: %s\n", e.what());
    status = 2;
  } catch (const ddp::Error& e) {
    std::fprintf(stderr,
                 "ddprun: cannot reach the job's store at %s:%d, which node 0's launcher hosts "
                 "(waited --rdzv-timeout %g s): %s\n",
                 o.master_addr.c_str(), o.master_port, o.rdzv_timeout_s, e.what());
    status = 1;
  }
  return nullptr;
}

void print_mode(const Options& o, int port) {
  if (!o.elastic_nodes()) {
    std::fprintf(stderr,
                 "ddprun: elastic mode, %d to %d workers, --max-replacements %d; the workers' "
                 "store is at %s:%d\n",
                 o.nproc_min, o.nproc, o.max_replacements, o.master_addr.c_str(), port);
    return;
  }
  std::fprintf(stderr,
               "ddprun: elastic mode, node %d of %d to %d nodes, %d workers here, "
               "--max-replacements %d; the job's store is at %s:%d%s\n",
               o.node_rank, o.nnodes_min, o.nnodes, o.nproc, o.max_replacements,
               o.master_addr.c_str(), port, o.node_rank == 0 ? " (hosted here)" : "");
}

}  // namespace

int run_elastic(const Options& opts) {
  Options o = opts;
  const char* env_token = std::getenv("DDP_ELASTIC_TOKEN");
  std::string token = env_token ? env_token : "";
  std::unique_ptr<ddp::dist::TCPStoreServer> store;
  int port = o.master_port;
  if (o.node_rank == 0) {
    store = host_store(o);
    if (!store) return 1;
    port = store->port();
  }
  std::unique_ptr<NodeLink> link;
  if (o.elastic_nodes()) {
    int status = 0;
    link = link_nodes(o, token, status);
    if (!link) return status;
    token = link->token();
  }
  o.elastic_token = token.empty() ? random_token() : token;
  print_mode(o, port);

  std::vector<Worker> ws(size_t(o.nproc));
  std::vector<Slot> slots(size_t(o.nproc));
  // One node: the slot is the replica id, and a replacement takes its
  // predecessor's. Several: ids come from the store (NodeLink::claim_id).
  auto start = [&](size_t i) {
    Slot& s = slots[i];
    int id = o.node_rank * o.nproc + int(i);
    s.joiner = s.restarts > 0;
    if (link) {
      auto claimed = link->claim_id(int(i), s.restarts == 0);
      if (!claimed) return false;
      id = claimed->id;
      s.joiner = claimed->joiner;
    }
    spawn(ws[i], o, port, int(i), s.restarts, id);
    return true;
  };
  for (size_t i = 0; i < ws.size(); ++i)
    if (!start(i)) {
      // Only a lost store gets here, before the job ran.
      stop_all(ws, SIGTERM);
      drain(ws);
      return 1;
    }
  int replacements = 0;
  bool completing = false;
  Clock::time_point completing_since;
  std::optional<Outcome> outcome;  // set when the job ends early

  auto live = [&] {
    int n = 0;
    for (const auto& w : ws) n += w.running;
    return n;
  };
  auto begin_completing = [&](const char* why) {
    std::fprintf(stderr, "ddprun: %s: the job is completing, no worker is replaced from now on\n",
                 why);
    completing = true;
    completing_since = Clock::now();
  };

  while (any_running(ws)) {
    pump_output(ws, 50ms);
    if (link && link->completing() && !completing)
      begin_completing("a worker on another node exited 0");
    for (size_t i = 0; i < ws.size() && !outcome; ++i) {
      Worker& w = ws[i];
      Slot& s = slots[i];
      if (!w.running) continue;
      int st = 0;
      if (::waitpid(w.pid, &st, WNOHANG) != w.pid) continue;
      w.running = false;
      w.status = exit_status(st);
      if (w.status == 0) {
        if (!completing) {
          begin_completing(fmt::format("worker rank {} exited 0", w.rank).c_str());
          if (link) link->post_completing();
        }
        continue;
      }
      retire(w);
      if (completing) {
        if (s.joiner) {
          s.excused = true;
          std::fprintf(stderr,
                       "ddprun: joining rank %d (pid %d) ended with exit status %d after the job "
                       "began completing; not counted\n",
                       w.rank, int(w.pid), w.status);
        } else {
          std::fprintf(stderr,
                       "ddprun: worker rank %d (pid %d) failed with exit status %d while the job "
                       "was completing; not replaced\n",
                       w.rank, int(w.pid), w.status);
        }
        w.pid = -1;  // its group is gone: signal_all must not reach a reused id
        continue;
      }
      const bool store_lost = link && link->lost();
      // Exit status 2 is a usage error (a flag the trainer refuses): its
      // replacement would run the same command and fail the same way.
      const bool usage_error = w.status == 2;
      if (!store_lost && !usage_error && replacements < o.max_replacements) {
        ++replacements;
        ++s.restarts;
        const int old_rank = w.rank, old_pid = int(w.pid), old_status = w.status;
        if (start(i)) {
          std::fprintf(stderr,
                       "ddprun: worker rank %d (pid %d) failed with exit status %d; replacing it "
                       "alone (replacement %d of %d, restart %d of this slot, as rank %d)\n",
                       old_rank, old_pid, old_status, replacements, o.max_replacements, s.restarts,
                       w.rank);
          continue;
        }
      }
      s.lost = true;
      std::fprintf(
          stderr,
          "ddprun: worker rank %d (pid %d) failed with exit status %d; %s, the slot "
          "stays empty\n",
          w.rank, int(w.pid), w.status,
          store_lost    ? "the job's store is lost"
          : usage_error ? "exit status 2 is a usage error, which a replacement would repeat"
                        : fmt::format("no replacements left (--max-replacements {})",
                                      o.max_replacements)
                              .c_str());
      w.pid = -1;
      // Across nodes the workers' own MIN check (the heal's min_size) rules.
      if (!link && live() < o.nproc_min) {
        std::fprintf(stderr,
                     "ddprun: %d worker(s) left, fewer than the minimum %d, and no replacements "
                     "left; lost ranks: %s; stopping the others\n",
                     live(), o.nproc_min, slot_list(slots).c_str());
        outcome = Outcome{Outcome::failed, w.status};
      }
    }
    if (outcome) break;
    if (g_signal && is_preemption(g_signal)) {
      outcome = preempt(ws, int(g_signal), o.preempt_grace_s);
      break;
    }
    if (g_signal) {
      std::fprintf(stderr, "ddprun: got signal %d; forwarding it to the workers\n", int(g_signal));
      outcome = Outcome{Outcome::interrupted, 128 + int(g_signal)};
      break;
    }
    if (completing) stop_stale_joiners(ws, slots, completing_since, o.preempt_grace_s);
  }
  // Forward the signal we got; SIGTERM when the stop comes from us.
  if (any_running(ws)) stop_all(ws, g_signal ? int(g_signal) : SIGTERM);
  drain(ws);
  if (link) {
    // Node 0 hosts the store: it stays up while the others' workers may use
    // it; when interrupted, only as long as they need to stop.
    auto limit = std::chrono::milliseconds(int64_t(o.rdzv_timeout_s * 1000));
    if (outcome && outcome->kind == Outcome::interrupted)
      limit = std::min<std::chrono::milliseconds>(limit, kGracePeriod + 5s);
    link->finish(limit);
  }
  if (outcome) return outcome->status;
  for (size_t i = 0; i < ws.size(); ++i)
    if (ws[i].status != 0 && !slots[i].excused) {
      std::fprintf(stderr, "ddprun: rank %d's last worker ended with exit status %d%s\n",
                   ws[i].rank, ws[i].status, slots[i].lost ? " (it was not replaced)" : "");
      return ws[i].status;
    }
  return 0;
}

}  // namespace ddprun
