// ddprun: starts the local workers of a data-parallel job with the torchrun
// environment contract (the equivalent of `torchrun --no-python`).
//
//   ddprun --nproc-per-node 4 ./train_resnet --epochs 1
//   ddprun --nproc-per-node 8 --nnodes 2 --node-rank 0 --master-addr n0
//          --master-port 29500 ./train_gpt    (on n0; --node-rank 1 on n1)
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
// error. Elastic membership (nodes joining or leaving) is not supported.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
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

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kGracePeriod = 5s;
constexpr const char* kUsage =
    "usage: ddprun --nproc-per-node N [--nnodes M --node-rank K --master-addr HOST "
    "--master-port PORT] [--max-restarts R] [--rdzv-timeout SECONDS] "
    "[--preempt-grace SECONDS] PROGRAM [ARGS...]\n";

struct Options {
  int nproc = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int max_restarts = 0;
  double rdzv_timeout_s = 300;
  double preempt_grace_s = 30;  // Note [ddprun preemption]
  std::vector<std::string> command;
};

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

Options parse_args(int argc, char** argv) {
  Options o;
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
  add_int("--nproc-per-node,--nproc_per_node", &o.nproc, 1, 1 << 16);
  add_int("--nnodes", &o.nnodes, 1, 1 << 16);
  add_int("--node-rank,--node_rank", &o.node_rank, 0, 1 << 16);
  cli.add_value("--master-addr,--master_addr", "HOST", "", "", [&](const std::string& v) {
    if (v.empty()) return std::string("bad value ''");
    o.master_addr = v;
    return std::string();
  });
  add_int("--master-port,--master_port", &o.master_port, 0, 65535);
  add_int("--max-restarts,--max_restarts", &o.max_restarts, 0, 1 << 20);
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
  if (o.node_rank >= o.nnodes) usage_error("--node-rank must be below --nnodes");
  if (o.nnodes > 1) {
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

// --- signals -----------------------------------------------------------------

// The signals the launcher forwards to its workers.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

volatile sig_atomic_t g_signal = 0;  // the last of kForwarded received
void on_signal(int sig) { g_signal = sig; }

// Note [ddprun preemption]
bool is_preemption(int sig) { return sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2; }

void install_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kForwarded) sigaction(sig, &sa, nullptr);
  // A closed stdout (ddprun ... | head) must not kill the launcher before it
  // has stopped its workers.
  signal(SIGPIPE, SIG_IGN);
}

// --- output --------------------------------------------------------------------

// One worker stream: bytes arrive in arbitrary chunks and leave as whole
// lines, each prefixed, in one write so that lines of different workers do
// not interleave mid-line.
struct Stream {
  int fd = -1;  // our end of the pipe; -1 once closed
  int out = 1;  // where the lines go (1 or 2)
  std::string prefix;
  std::string pending;  // a partial line

  void emit(const char* data, size_t n) {
    std::string line = prefix;
    line.append(data, n);
    if (line.back() != '\n') line += '\n';
    for (size_t off = 0; off < line.size();) {
      ssize_t w = ::write(out, line.data() + off, line.size() - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return;  // the reader went away; drop the output
      off += size_t(w);
    }
  }
  // Reads what is available; false at end of file.
  bool pump() {
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) return false;
    pending.append(buf, size_t(n));
    size_t start = 0;
    for (size_t nl; (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1)
      emit(pending.data() + start, nl - start + 1);
    pending.erase(0, start);
    return true;
  }
  void finish() {
    if (!pending.empty()) emit(pending.data(), pending.size());
    pending.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

// --- workers -------------------------------------------------------------------

struct Worker {
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  int status = 0;  // the exit status to report: code, or 128 + signal
  Stream out, err;
};

int exit_status(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

std::vector<std::string> worker_env(const Options& o, int master_port, int local, int round) {
  const std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(o.node_rank * o.nproc + local)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc)},
      {"LOCAL_RANK", std::to_string(local)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"NODE_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(round)},
      {"DDP_RESTART_COUNT", std::to_string(round)},
      {"DDPRUN", "1"},
      {"DDP_PREEMPT_GRACE_S", fmt::format("{}", o.preempt_grace_s)},
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    std::string key = kv.substr(0, kv.find('='));
    bool overridden = false;
    for (const auto& [k, v] : vars) overridden |= (k == key);
    if (!overridden) env.push_back(kv);
  }
  for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
  return env;
}

// Starts one worker. Everything the child needs is prepared before fork():
// the launcher may run a store server thread, and after fork only
// async-signal-safe calls are allowed.
void spawn(Worker& w, const Options& o, int master_port, int local, int round) {
  std::vector<std::string> env_s = worker_env(o, master_port, local, round);
  std::vector<char*> envp, argv;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> cmd = o.command;
  for (auto& s : cmd) argv.push_back(s.data());
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  // A SIGTERM may come (from us, stopping a failed group) before the child
  // has reset its handlers, and our handler would swallow it; so the signals
  // stay blocked across fork until the child has the default actions back.
  sigset_t block, old_mask;
  sigemptyset(&block);
  for (int sig : kForwarded) sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &old_mask);
  pid_t pid = ::fork();
  if (pid < 0) {
    int err = errno;
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    throw std::runtime_error(std::string("fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    // See Note [ddprun process groups and signals].
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher died already
    // Ignored signals survive exec; the worker starts with the defaults.
    ::signal(SIGPIPE, SIG_DFL);
    for (int sig : kForwarded) ::signal(sig, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    // Only async-signal-safe calls here: write(2), not stdio.
    for (const char* part : {"ddprun: cannot execute ", static_cast<const char*>(argv[0]), "\n"}) {
      ssize_t ignored = ::write(2, part, std::strlen(part));
      (void)ignored;
    }
    ::_exit(127);
  }
  // Also from the parent, so that a kill(-pid) right after fork finds the
  // group even before the child has run.
  ::setpgid(pid, pid);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  w.pid = pid;
  w.running = true;
  w.status = 0;
  w.rank = o.node_rank * o.nproc + local;
  std::string prefix = fmt::format("[{}]: ", w.rank);
  w.out = Stream{out_pipe[0], 1, prefix, {}};
  w.err = Stream{err_pipe[0], 2, prefix, {}};
}

// Signals every worker's process group, those whose leader has exited too:
// a helper it left behind is part of the group being stopped. (The kernel
// does not hand out a pid that is still a process group id, so the signal
// cannot reach a stranger.)
void signal_all(std::vector<Worker>& ws, int sig) {
  for (auto& w : ws)
    if (w.pid > 0) ::kill(-w.pid, sig);
}

// Reaps exited workers; returns the first failure seen in this call.
std::optional<size_t> reap(std::vector<Worker>& ws) {
  std::optional<size_t> failed;
  for (size_t i = 0; i < ws.size(); ++i) {
    auto& w = ws[i];
    if (!w.running) continue;
    int st = 0;
    pid_t r = ::waitpid(w.pid, &st, WNOHANG);
    if (r != w.pid) continue;
    w.running = false;
    w.status = exit_status(st);
    if (w.status != 0 && !failed) failed = i;
  }
  return failed;
}

// Reads whatever the workers have written, waiting at most `timeout`.
void pump_output(std::vector<Worker>& ws, std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;
  for (auto& w : ws)
    for (Stream* s : {&w.out, &w.err})
      if (s->fd >= 0) {
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);
    return;
  }
  int n = ::poll(fds.data(), fds.size(), int(timeout.count()));
  if (n <= 0) return;  // timeout, or EINTR from a signal: the caller looks
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
      if (!streams[i]->pump()) streams[i]->finish();
}

bool any_running(const std::vector<Worker>& ws) {
  for (const auto& w : ws)
    if (w.running) return true;
  return false;
}

// Stops the workers still running: `sig` now, SIGKILL after the grace period.
void stop_all(std::vector<Worker>& ws, int sig, Clock::duration grace = kGracePeriod) {
  signal_all(ws, sig);
  const auto kill_at = Clock::now() + grace;
  bool killed = false;
  while (any_running(ws)) {
    pump_output(ws, 20ms);
    reap(ws);
    if (!killed && Clock::now() >= kill_at) {
      signal_all(ws, SIGKILL);
      killed = true;
    }
  }
}

// After the workers exited, their pipes may still hold output, or be held
// open by a grandchild that outlived its worker; read until end of file, but
// not forever.
void drain(std::vector<Worker>& ws) {
  const auto until = Clock::now() + 1s;
  auto open = [&] {
    for (auto& w : ws)
      if (w.out.fd >= 0 || w.err.fd >= 0) return true;
    return false;
  };
  while (open() && Clock::now() < until) pump_output(ws, 20ms);
  for (auto& w : ws) {
    w.out.finish();
    w.err.finish();
  }
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

struct Outcome {
  enum Kind { success, failed, interrupted } kind = success;
  int status = 0;  // exit status to report
};

// Note [ddprun preemption]: forwards `sig`, waits up to the grace period;
// clean when every worker exited 0.
Outcome preempt(std::vector<Worker>& ws, int sig, double grace_s) {
  std::fprintf(stderr,
               "ddprun: got signal %d; forwarding it to the workers and waiting up to %g s for "
               "them to save and exit\n",
               sig, grace_s);
  // At most 10^9 s, so that the deadline cannot overflow.
  stop_all(ws, sig,
           std::chrono::duration_cast<Clock::duration>(
               std::chrono::duration<double>(std::min(grace_s, 1e9))));
  for (const auto& w : ws)
    if (w.status != 0) {
      std::fprintf(stderr, "ddprun: worker rank %d ended with exit status %d after signal %d\n",
                   w.rank, w.status, sig);
      return {Outcome::interrupted, 128 + sig};
    }
  std::fprintf(stderr, "ddprun: every worker exited 0 after signal %d (preempted)\n", sig);
  return {Outcome::success, 0};
}

// Tells the other launchers that this round failed. A store that is gone
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

int main(int argc, char** argv) {
  Options o = parse_args(argc, argv);
  install_handlers();
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddprun: %s\n", e.what());
    return 1;
  }
}
