#pragma once
// ddprun's internals shared by its two modes: the options, starting and
// stopping worker processes, their output, and the forwarded signals
// (workers.cpp). main.cpp parses the command line and runs the classic mode
// (Note [ddprun restarts]); elastic.cpp runs the elastic one (Note [ddprun
// elastic]), and nodes.cpp links the launchers of a multi-node elastic job.
// The Notes are in main.cpp.

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace ddprun {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kGracePeriod = 5s;

struct Options {
  int nproc = 0;       // workers on this node; in elastic mode on one node MAX
  int nnodes = 1;      // with --nnodes MIN:MAX, MAX
  int nnodes_min = 1;  // MIN of --nnodes MIN:MAX
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int max_restarts = 0;
  double rdzv_timeout_s = 300;
  double preempt_grace_s = 30;  // Note [ddprun preemption]
  // Note [ddprun elastic]: --nproc-per-node MIN:MAX or --elastic.
  bool elastic = false;
  int nproc_min = 0;          // MIN (elastic mode)
  int max_replacements = -1;  // -1: 3 * MAX (one node), 3 * --nproc-per-node (per node)
  std::string elastic_token;  // DDP_ELASTIC_TOKEN handed to the workers
  std::vector<std::string> command;

  // Elastic across nodes (--nnodes MIN:MAX with MAX > 1).
  bool elastic_nodes() const { return elastic && nnodes > 1; }
  // What the workers see as WORLD_SIZE: the whole job in the classic mode,
  // the founders in the elastic one (MAX workers on one node, MIN nodes'
  // workers across nodes).
  int world_size() const {
    if (!elastic) return nnodes * nproc;
    return elastic_nodes() ? nnodes_min * nproc : nproc;
  }
  // DDP_ELASTIC_MIN / DDP_ELASTIC_MAX: the fewest and most workers of the job.
  int elastic_min() const { return elastic_nodes() ? nnodes_min * nproc : nproc_min; }
  int elastic_max() const { return elastic_nodes() ? nnodes * nproc : nproc; }
};

// --- signals -------------------------------------------------------------------

// The signals the launcher forwards to its workers.
constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
extern volatile sig_atomic_t g_signal;  // the last of kForwarded received
// Note [ddprun preemption]
inline bool is_preemption(int sig) { return sig == SIGTERM || sig == SIGUSR1 || sig == SIGUSR2; }
void install_handlers();

// --- workers -------------------------------------------------------------------

// One worker stream: bytes arrive in arbitrary chunks and leave as whole
// lines, each prefixed, in one write so that lines of different workers do
// not interleave mid-line.
struct Stream {
  int fd = -1;  // our end of the pipe; -1 once closed
  int out = 1;  // where the lines go (1 or 2)
  std::string prefix;
  std::string pending;  // a partial line

  void emit(const char* data, size_t n);
  // Reads what is available; false at end of file.
  bool pump();
  void finish();
};

struct Worker {
  int rank = 0;
  pid_t pid = -1;  // also its process group id
  bool running = false;
  int status = 0;  // the exit status to report: code, or 128 + signal
  Stream out, err;
};

int exit_status(int wstatus);

// Starts the worker of local slot `local`; `restart_count` is what it sees as
// TORCHELASTIC_RESTART_COUNT / DDP_RESTART_COUNT (the round in the classic
// mode, the slot's own count in the elastic one). Its RANK is `rank`, or
// node_rank * nproc + local when that is -1.
void spawn(Worker& w, const Options& o, int master_port, int local, int restart_count,
           int rank = -1);

// Signals every worker's process group (Note [ddprun process groups and
// signals]).
void signal_all(std::vector<Worker>& ws, int sig);
// Reaps exited workers; returns the first failure seen in this call.
std::optional<size_t> reap(std::vector<Worker>& ws);
// Reads whatever the workers have written, waiting at most `timeout`.
void pump_output(std::vector<Worker>& ws, std::chrono::milliseconds timeout);
bool any_running(const std::vector<Worker>& ws);
// Stops the workers still running: `sig` now, SIGKILL after the grace period.
void stop_all(std::vector<Worker>& ws, int sig, Clock::duration grace = kGracePeriod);
// Reads the exited workers' pipes to their end, for at most a second.
void drain(std::vector<Worker>& ws);

struct Outcome {
  enum Kind { success, failed, interrupted } kind = success;
  int status = 0;  // exit status to report
};

// Note [ddprun preemption]: forwards `sig`, waits up to the grace period;
// clean when every worker that was running exited 0.
Outcome preempt(std::vector<Worker>& ws, int sig, double grace_s);

// Note [ddprun elastic]; in elastic.cpp.
int run_elastic(const Options& o);

}  // namespace ddprun
