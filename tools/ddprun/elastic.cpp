// ddprun's elastic mode: one slot per worker, the workers' store hosted by
// the launcher, and a dead worker replaced alone. See Note [ddprun elastic]
// in main.cpp.

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/dist/tcp_store.h"
#include "launcher.h"

namespace ddprun {
namespace {

struct Slot {
  int restarts = 0;      // replacements started in this slot
  bool lost = false;     // failed, not replaced: empty for good
  bool excused = false;  // a replacement that ended after the job began completing
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL after our SIGTERM
};

std::string random_token() {
  unsigned char bytes[16] = {};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? ::read(fd, bytes, sizeof(bytes)) : -1;
  if (fd >= 0) ::close(fd);
  if (n != ssize_t(sizeof(bytes)))
    throw std::runtime_error("cannot read /dev/urandom for the job token");
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

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

}  // namespace

int run_elastic(const Options& opts) {
  Options o = opts;
  if (o.elastic_token.empty()) {
    const char* t = std::getenv("DDP_ELASTIC_TOKEN");
    o.elastic_token = t && *t ? t : random_token();
  }
  // The workers' store, which must outlive any of them (ElasticGroup).
  ddp::dist::TCPStoreOptions so;
  so.host = o.master_addr;
  so.port = uint16_t(o.master_port);
  so.bind_address = bind_address_for(o.master_addr);
  std::unique_ptr<ddp::dist::TCPStoreServer> store;
  try {
    store = std::make_unique<ddp::dist::TCPStoreServer>(so);
    store->start();
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddprun: cannot host the workers' store at %s:%d: %s\n",
                 o.master_addr.c_str(), o.master_port, e.what());
    return 1;
  }
  const int port = store->port();
  std::fprintf(stderr,
               "ddprun: elastic mode, %d to %d workers, --max-replacements %d; the workers' "
               "store is at %s:%d\n",
               o.nproc_min, o.nproc, o.max_replacements, o.master_addr.c_str(), port);

  std::vector<Worker> ws(size_t(o.nproc));
  std::vector<Slot> slots(size_t(o.nproc));
  for (int i = 0; i < o.nproc; ++i) spawn(ws[size_t(i)], o, port, i, 0);
  int replacements = 0;
  bool completing = false;
  Clock::time_point completing_since;
  std::optional<Outcome> outcome;  // set when the job ends early

  auto live = [&] {
    int n = 0;
    for (const auto& w : ws) n += w.running;
    return n;
  };

  while (any_running(ws)) {
    pump_output(ws, 50ms);
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
          std::fprintf(stderr,
                       "ddprun: worker rank %d exited 0: the job is completing, no worker is "
                       "replaced from now on\n",
                       w.rank);
          completing = true;
          completing_since = Clock::now();
        }
        continue;
      }
      retire(w);
      if (completing) {
        if (s.restarts > 0) {
          s.excused = true;
          std::fprintf(stderr,
                       "ddprun: replacement rank %d (pid %d) ended with exit status %d after the "
                       "job began completing; not counted\n",
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
      if (replacements < o.max_replacements) {
        ++replacements;
        ++s.restarts;
        std::fprintf(stderr,
                     "ddprun: worker rank %d (pid %d) failed with exit status %d; replacing it "
                     "alone (replacement %d of %d, restart %d of this rank)\n",
                     w.rank, int(w.pid), w.status, replacements, o.max_replacements, s.restarts);
        spawn(w, o, port, int(i), s.restarts);
        continue;
      }
      s.lost = true;
      std::fprintf(stderr,
                   "ddprun: worker rank %d (pid %d) failed with exit status %d; no replacements "
                   "left (--max-replacements %d), the slot stays empty\n",
                   w.rank, int(w.pid), w.status, o.max_replacements);
      w.pid = -1;
      if (live() < o.nproc_min) {
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
    // A replacement still running long after the job began completing could
    // not be admitted any more: stop it (Note [ddprun elastic]).
    if (completing) {
      const auto now = Clock::now();
      const auto window = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(std::min(o.preempt_grace_s, 1e9)));
      for (size_t i = 0; i < ws.size(); ++i) {
        Worker& w = ws[i];
        Slot& s = slots[i];
        if (!w.running || s.restarts == 0) continue;
        if (!s.excused && now - completing_since >= window) {
          std::fprintf(stderr,
                       "ddprun: replacement rank %d (pid %d) is still running %g s after the job "
                       "began completing; stopping it\n",
                       w.rank, int(w.pid), o.preempt_grace_s);
          s.excused = true;
          s.kill_at = now + kGracePeriod;
          ::kill(-w.pid, SIGTERM);
        } else if (s.excused && now >= s.kill_at) {
          ::kill(-w.pid, SIGKILL);
          s.kill_at = Clock::time_point::max();
        }
      }
    }
  }
  // Forward the signal we got; SIGTERM when the stop comes from us.
  if (any_running(ws)) stop_all(ws, g_signal ? int(g_signal) : SIGTERM);
  drain(ws);
  if (outcome) return outcome->status;
  for (size_t i = 0; i < ws.size(); ++i)
    if (ws[i].status != 0 && !slots[i].excused) {
      std::fprintf(stderr, "ddprun: rank %d's last worker ended with exit status %d%s\n",
                   ws[i].rank, ws[i].status, slots[i].lost ? " (no replacements were left)" : "");
      return ws[i].status;
    }
  return 0;
}

}  // namespace ddprun
