// ddprun's worker processes: starting them (Note [ddprun process groups and
// signals] in main.cpp), their output, stopping them, and the signals the
// launcher forwards. Shared by the classic and the elastic mode.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "ddp/core/error.h"
#include "launcher.h"

extern char** environ;

namespace ddprun {

// --- signals -----------------------------------------------------------------

volatile sig_atomic_t g_signal = 0;

namespace {
void on_signal(int sig) { g_signal = sig; }
}  // namespace

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

void Stream::emit(const char* data, size_t n) {
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

bool Stream::pump() {
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

void Stream::finish() {
  if (!pending.empty()) emit(pending.data(), pending.size());
  pending.clear();
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// --- workers -------------------------------------------------------------------

int exit_status(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}

namespace {

std::vector<std::string> worker_env(const Options& o, int master_port, int local, int round,
                                    int rank) {
  std::vector<std::pair<std::string, std::string>> vars = {
      {"RANK", std::to_string(rank)},
      {"WORLD_SIZE", std::to_string(o.world_size())},
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
      // Note [ddprun elastic]: the launcher hosts the store in elastic mode
      // only; set either way, so that a value inherited from an outer
      // launcher cannot mislead the workers.
      {"TORCHELASTIC_USE_AGENT_STORE", o.elastic ? "True" : "False"},
      {"DDP_ELASTIC", o.elastic ? "1" : "0"},
  };
  if (o.elastic) {
    vars.emplace_back("DDP_ELASTIC_MIN", std::to_string(o.elastic_min()));
    vars.emplace_back("DDP_ELASTIC_MAX", std::to_string(o.elastic_max()));
    vars.emplace_back("DDP_ELASTIC_TOKEN", o.elastic_token);
  }
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

}  // namespace

// Starts one worker. Everything the child needs is prepared before fork():
// the launcher may run a store server thread, and after fork only
// async-signal-safe calls are allowed.
void spawn(Worker& w, const Options& o, int master_port, int local, int restart_count, int rank) {
  if (rank < 0) rank = o.node_rank * o.nproc + local;
  std::vector<std::string> env_s = worker_env(o, master_port, local, restart_count, rank);
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
  w.rank = rank;
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
void stop_all(std::vector<Worker>& ws, int sig, Clock::duration grace) {
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

// Note [ddprun preemption]: forwards `sig`, waits up to the grace period;
// clean when every worker that was running exited 0 (in elastic mode a slot
// may hold a worker that failed earlier and was not replaced).
Outcome preempt(std::vector<Worker>& ws, int sig, double grace_s) {
  std::fprintf(stderr,
               "ddprun: got signal %d; forwarding it to the workers and waiting up to %g s for "
               "them to save and exit\n",
               sig, grace_s);
  std::vector<bool> was_running;
  for (const auto& w : ws) was_running.push_back(w.running);
  // At most 10^9 s, so that the deadline cannot overflow.
  stop_all(ws, sig,
           std::chrono::duration_cast<Clock::duration>(
               std::chrono::duration<double>(std::min(grace_s, 1e9))));
  for (size_t i = 0; i < ws.size(); ++i)
    if (was_running[i] && ws[i].status != 0) {
      std::fprintf(stderr, "ddprun: worker rank %d ended with exit status %d after signal %d\n",
                   ws[i].rank, ws[i].status, sig);
      return {Outcome::interrupted, 128 + sig};
    }
  std::fprintf(stderr, "ddprun: every worker exited 0 after signal %d (preempted)\n", sig);
  return {Outcome::success, 0};
}

}  // namespace ddprun
