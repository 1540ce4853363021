// metrics_load: the metrics endpoint under attack while a trainer runs
// (issue 30; Note [Metrics server under load]). Loopback only.
//
//   metrics_load [--steps N] [--idle N] [--burst N] [--rss-growth-mib M]
//       the test (ctest metrics.load.under_attack): trains N steps with no
//       client, the same N steps while a child process (this program with
//       --attack) attacks the trainer's MetricsServer, and N steps with no
//       client again (step times of a shared machine drift); fails unless
//       every legitimate scrape was answered 200 within 1 s, the trained
//       parameters are bit-identical, every malformed request got its 4xx
//       and the resident set grew by less than M MiB.
//   metrics_load --step-time [--pairs N] [--segment-steps S] [--json FILE]
//                [--idle N] [--burst N]
//       a measurement, not a test (issue 30's "step time within 2 %"): the
//       training thread pinned to one CPU, the attacker process and the
//       server's thread to another, N pairs of a quiet and an attacked
//       segment of S steps each, in the order QA AQ QA AQ ... so that a slow
//       drift of the machine cancels (default: 40 pairs of 400 steps, about
//       8 minutes); prints each segment's median and mean step (wall, and
//       the training thread's CPU), the median over the pairs of
//       attacked/quiet with its spread, the server thread's CPU share and
//       the scrapes, and a last line "step-time summary: ...". Exits 0
//       unless a legitimate scrape failed (not 200 within 1 s) or a segment
//       trained different parameters; 77 where fewer than 2 CPUs are
//       allowed. Note [Step time, pinned and interleaved] below.
//   metrics_load --attack PORT [--seconds S] [--idle N] [--burst N] [--cpu C]
//       only the attack, on 127.0.0.1:PORT: for S seconds, or until stdin
//       closes; prints the report's lines on stdout and a summary on stderr.
//       With --cpu, every thread of the attack runs on CPU C only.
//   metrics_load --serve
//       libddp's MetricsServer alone, serving the same registry as
//       --serve-httplib, until stdin closes; prints its port.
//   metrics_load --serve-httplib [--threads N] [--read-timeout-ms MS]
//       a cpp-httplib server set up like libddp's before issue 30 (2
//       threads, 5 s read timeout) or as given, serving a registry of the
//       training series, until stdin closes; prints its port. For the
//       measurement in docs/metrics.md ("The endpoint under load").

#include <dirent.h>
#include <fcntl.h>
#include <httplib.h>
#include <sched.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "attack.h"
#include "ddp/core/threads.h"
#include "ddp/metrics/server.h"
#include "metrics/raw_http.h"
#include "trainer.h"

extern char** environ;

namespace ddp::metrics::load {
namespace {

struct Args {
  int steps = 200;
  int idle = 200;
  int burst = 32;
  double rss_growth_mib = 16;
  int attack_port = 0;
  double seconds = 0;  // 0: until stdin closes
  bool serve = false;
  bool serve_httplib = false;
  int threads = 2;
  int read_timeout_ms = 5000;
  int cpu = -1;  // --attack: the CPU to run on (-1: any)
  bool step_time = false;
  int pairs = 40;  // --step-time: about 8 minutes on the project's VM
  int segment_steps = 400;
  std::string json;  // --step-time: also write the figures here
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) throw std::invalid_argument(flag + " needs a value");
      return std::string(argv[++i]);
    };
    if (flag == "--steps") a.steps = std::stoi(value());
    else if (flag == "--idle") a.idle = std::stoi(value());
    else if (flag == "--burst") a.burst = std::stoi(value());
    else if (flag == "--rss-growth-mib") a.rss_growth_mib = std::stod(value());
    else if (flag == "--attack") a.attack_port = std::stoi(value());
    else if (flag == "--seconds") a.seconds = std::stod(value());
    else if (flag == "--serve") a.serve = true;
    else if (flag == "--serve-httplib") a.serve_httplib = true;
    else if (flag == "--threads") a.threads = std::stoi(value());
    else if (flag == "--read-timeout-ms") a.read_timeout_ms = std::stoi(value());
    else if (flag == "--cpu") a.cpu = std::stoi(value());
    else if (flag == "--step-time") a.step_time = true;
    else if (flag == "--pairs") a.pairs = std::stoi(value());
    else if (flag == "--segment-steps") a.segment_steps = std::stoi(value());
    else if (flag == "--json") a.json = value();
    else throw std::invalid_argument("unknown flag " + flag);
  }
  return a;
}

double rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      status >> kib;
      return kib / 1024;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

// The task ids of this process's threads, with their names.
std::vector<std::pair<pid_t, std::string>> threads() {
  std::vector<std::pair<pid_t, std::string>> all;
  DIR* tasks = ::opendir("/proc/self/task");
  while (const dirent* e = tasks ? ::readdir(tasks) : nullptr) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    all.emplace_back(pid_t(std::atoi(e->d_name)), name);
  }
  if (tasks) ::closedir(tasks);
  return all;
}

// The task id of the server's thread (it names itself "ddp-metrics" when
// its loop starts), or -1 while there is none.
pid_t server_thread_id() {
  for (const auto& [tid, name] : threads())
    if (name == "ddp-metrics") return tid;
  return -1;
}

// CPU seconds (user + system) the server's thread has used.
double server_thread_cpu_seconds() {
  const pid_t tid = server_thread_id();
  if (tid < 0) return -1;
  std::ifstream stat("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(stat, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
  std::string skip;
  for (int i = 3; i < 14; ++i) fields >> skip;  // fields 3..13
  double utime = 0, stime = 0;
  fields >> utime >> stime;
  return (utime + stime) / double(::sysconf(_SC_CLK_TCK));
}

// The CPUs this process may run on (its affinity mask), in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) throw std::runtime_error("sched_getaffinity failed");
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Runs the thread `tid` (0: the calling thread) on `cpu` only. A thread
// created afterwards by that thread inherits it.
void pin(pid_t tid, int cpu, const std::string& what) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(tid, sizeof set, &set) != 0)
    throw std::runtime_error("cannot pin " + what + " to CPU " + std::to_string(cpu) + ": " + std::strerror(errno));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Blocks until stdin reaches EOF (the parent closed it), on its own thread.
void set_on_stdin_eof(std::atomic<bool>* flag) {
  std::thread([flag] {
    char c;
    while (::read(0, &c, 1) > 0) {
    }
    *flag = true;
  }).detach();
}

// count_statuses: each malformed kind's statuses as "414 x 80" instead of
// one by one (--step-time, where there are many attacks).
void print_summary(const AttackReport& r, std::ostream& out, bool count_statuses = false) {
  const long ok = std::count_if(r.scrapes.begin(), r.scrapes.end(),
                                [](const Scrape& s) { return s.status == 200 && s.seconds < 1.0; });
  out << "legitimate scrapes: " << r.scrapes.size() << ", answered 200 within 1 s: " << ok << " ("
      << (r.scrapes.empty() ? 0.0 : 100.0 * double(ok) / double(r.scrapes.size())) << " %)"
      << ", p50 " << percentile(r.scrapes, 50) * 1e3 << " ms, p99 " << percentile(r.scrapes, 99) * 1e3
      << " ms, max " << percentile(r.scrapes, 100) * 1e3 << " ms\n";
  for (const auto& [kind, statuses] : r.malformed) {
    out << "malformed " << kind << ":";
    if (count_statuses) {
      std::map<int, long> counts;
      for (int s : statuses) ++counts[s];
      for (const auto& [s, n] : counts) out << ' ' << s << " x " << n;
    } else {
      for (int s : statuses) out << ' ' << s;
    }
    out << '\n';
  }
  out << "idle sockets: " << r.idle_open_mean << " open on average, " << r.idle_reopened
      << " reopened after the server closed them\n";
}

int run_attack(const Args& a) {
  if (a.cpu >= 0) pin(0, a.cpu, "the attacker");  // before its threads start: they inherit it
  std::atomic<bool> stop{false};
  if (a.seconds > 0) {
    std::thread([&stop, s = a.seconds] {
      std::this_thread::sleep_for(std::chrono::duration<double>(s));
      stop = true;
    }).detach();
  } else {
    set_on_stdin_eof(&stop);
  }
  const AttackReport r = attack({a.attack_port, a.idle, a.burst}, stop, [] {
    std::cout << "ready" << std::endl;
  });
  std::cout << to_lines(r) << std::flush;
  if (a.seconds > 0) print_summary(r, std::cerr);  // by hand; the test prints its own
  return 0;
}

// The registry both --serve modes serve: the training series after 100 steps.
struct ServedRegistry {
  Registry registry{Labels{{"rank", "0"}}};
  TrainingMetrics metrics{registry, false};
  ServedRegistry() { metrics.steps.inc(100); }
};

void wait_for_stdin_eof() {
  std::atomic<bool> stop{false};
  set_on_stdin_eof(&stop);
  while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

int serve(const Args&) {
  ServedRegistry served;
  MetricsServer server(served.registry, 0, "127.0.0.1");
  std::cout << "port " << server.port() << std::endl;
  wait_for_stdin_eof();
  return 0;
}

int serve_httplib(const Args& a) {
  ServedRegistry served;
  httplib::Server http;
  const int threads = a.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  http.set_keep_alive_max_count(1);
  http.set_read_timeout(a.read_timeout_ms / 1000, (a.read_timeout_ms % 1000) * 1000);
  http.Get("/metrics", [&served](const httplib::Request&, httplib::Response& res) {
    res.set_content(served.registry.expose(), kTextContentType);
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  std::thread loop([&] { http.listen_after_bind(); });
  std::cout << "port " << port << std::endl;
  wait_for_stdin_eof();
  http.stop();
  loop.join();
  return 0;
}

// This program with --attack PORT in a child process: its stdin is our
// pipe (closing it stops the attack), its stdout comes back.
struct Attacker {
  pid_t pid = -1;
  int to_child = -1, from_child = -1;

  // cpu >= 0: the attacker runs on that CPU only (--cpu).
  Attacker(int port, const Args& a, int cpu = -1) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    std::vector<std::string> args = {"metrics_load", "--attack", std::to_string(port), "--idle",
                                     std::to_string(a.idle), "--burst", std::to_string(a.burst)};
    if (cpu >= 0) args.insert(args.end(), {"--cpu", std::to_string(cpu)});
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    to_child = in[1];
    from_child = out[0];
    if (rc != 0) throw std::runtime_error(std::string("cannot start the attacker: ") + std::strerror(rc));
  }
  std::string read_line() {
    std::string line;
    char c;
    while (::read(from_child, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  AttackReport stop_and_report() {
    ::close(to_child);
    std::string lines;
    char buf[65536];
    for (ssize_t n; (n = ::read(from_child, buf, sizeof buf)) > 0;) lines.append(buf, size_t(n));
    ::close(from_child);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("the attacker failed");
    return from_lines(lines);
  }
};

int run_test(const Args& a) {
  Registry registry(Labels{{"job", "metrics_load"}, {"rank", "0"}, {"world_size", "1"}});
  TrainingMetrics metrics(registry, false);
  MetricsServer server(registry, 0, "127.0.0.1");
  std::cout << "metrics_load: server on 127.0.0.1:" << server.port() << ", " << a.steps << " steps per run\n";

  (void)train(a.steps / 10, metrics);  // warm-up: caches, allocator, page faults
  const TrainResult quiet = train(a.steps, metrics);
  const double rss_before = rss_mib();
  Attacker attacker(server.port(), a);
  if (attacker.read_line() != "ready") throw std::runtime_error("the attacker did not start");
  const double server_cpu_before = server_thread_cpu_seconds();
  const auto attack_start = std::chrono::steady_clock::now();
  const TrainResult attacked = train(a.steps, metrics);
  const double attack_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - attack_start).count();
  const double server_cpu = server_thread_cpu_seconds() - server_cpu_before;
  const AttackReport report = attacker.stop_and_report();
  const double rss_after = rss_mib();
  // A second quiet run after the attack, so drift of a shared machine shows.
  const TrainResult quiet_again = train(a.steps, metrics);

  print_summary(report, std::cout);
  const double quiet_step = (median(quiet.step_seconds) + median(quiet_again.step_seconds)) / 2;
  const double attacked_step = median(attacked.step_seconds);
  std::cout << "median step: " << median(quiet.step_seconds) * 1e3 << " and "
            << median(quiet_again.step_seconds) * 1e3 << " ms unattacked (before and after), "
            << attacked_step * 1e3 << " ms attacked (" << (attacked_step / quiet_step - 1) * 100
            << " % against their mean)\n"
            << "median CPU per step (whole process): " << median(quiet.step_cpu_seconds) * 1e3 << " and "
            << median(quiet_again.step_cpu_seconds) * 1e3 << " ms unattacked, "
            << median(attacked.step_cpu_seconds) * 1e3 << " ms attacked\n"
            << "server thread: " << server_cpu << " s of CPU in the " << attack_seconds
            << " s of the attacked run (" << 100 * server_cpu / attack_seconds << " % of one core)\n"
            << "resident set: " << rss_before << " MiB before the attack, " << rss_after
            << " MiB after (+" << rss_after - rss_before << " MiB)\n";

  int failures = 0;
  auto check = [&failures](bool ok, const std::string& what) {
    if (!ok) {
      std::cout << "FAILED: " << what << '\n';
      ++failures;
    }
  };
  check(report.scrapes.size() >= 20, "too few legitimate scrapes during the attack: " +
                                         std::to_string(report.scrapes.size()));
  for (const Scrape& s : report.scrapes)
    check(s.status == 200 && s.seconds < 1.0, "a scrape answered " + std::to_string(s.status) + " after " +
                                                  std::to_string(s.seconds) + " s");
  const std::map<std::string, int> expected = {{"garbage-request-line", 400}, {"8MiB-header", 431},
                                               {"huge-Content-Length", 413}, {"1MiB-URL", 414}};
  for (const auto& [kind, status] : expected) {
    const auto it = report.malformed.find(kind);
    check(it != report.malformed.end() && !it->second.empty(), "no " + kind + " request was sent");
    if (it == report.malformed.end()) continue;
    for (int got : it->second) check(got == status, kind + " answered " + std::to_string(got));
  }
  check(report.idle_open_mean >= 0.5 * a.idle, "the idle sockets were not held: " +
                                                   std::to_string(report.idle_open_mean) + " open on average");
  check(attacked.parameters == quiet.parameters && quiet_again.parameters == quiet.parameters,
        "the attacked run trained different parameters");
  check(rss_after - rss_before < a.rss_growth_mib, "the resident set grew by more than " +
                                                       std::to_string(a.rss_growth_mib) + " MiB");
  // And once the attack is over the server answers as before.
  const std::string after = testing::request_once(server.port(), testing::scrape_request());
  check(testing::status_of(after) == 200 && testing::body_of(after) == registry.expose(),
        "no whole page after the attack");
  std::cout << (failures == 0 ? "PASSED" : "FAILED") << '\n';
  return failures == 0 ? 0 : 1;
}


// Note [Step time, pinned and interleaved]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// Issue 30 asks for the trainer's step time under the attack within 2 % of
// an unattacked run. The test mode cannot show that (docs/benchmarks.md,
// "The endpoint under attack: metrics.load.under_attack"): on a 2-core VM
// the attacker process competes with the trainer for the CPU, and the VM's
// speed drifts by up to 55 % between two quiet runs. --step-time takes the
// harness out of the comparison:
//
//  - pinned: the training thread runs on one CPU, the attacker process and
//    the MetricsServer's thread on another (the first two CPUs this process
//    may use, 0 and 1 on the VM). The attacker's CPU is the harness's cost,
//    not the server's; and on a GPU node the metrics thread never shares
//    the training thread's core either: a node has dozens of cores for a
//    handful of ranks, and the scheduler keeps a busy training thread on a
//    core of its own. What remains is what a real trainer feels: the
//    server's effect through shared caches, memory bandwidth, interrupts
//    and the kernel's network stack. The trainer computes on its own
//    thread alone (set_num_threads(1): otherwise its matmuls would run on
//    OpenBLAS's pool and its loops on OpenMP's, on both CPUs; Note [CPU
//    threads]). Besides the wall time of each step, that thread's CPU time
//    (CLOCK_THREAD_CPUTIME_ID) is reported: it does not count time spent
//    waiting for the core. The means are reported too (a slow tail moves
//    them, not the medians), and how often the training thread was
//    preempted (involuntary context switches): something else ran on its
//    CPU, which pinning cannot prevent on a shared machine.
//  - interleaved: N pairs of a quiet and an attacked segment of S steps,
//    the order alternating from pair to pair (QA AQ QA AQ ...), each pair
//    giving one ratio attacked/quiet of the segments' median steps. A drift
//    slower than a pair cancels within its ratio, a steady one across the
//    run cancels between consecutive pairs (ABBA), and the median over the
//    pairs with its quartiles and extremes says how far the figure can be
//    trusted.
//  - the attacker is started for each attacked segment (training starts
//    once its 200 idle sockets are open) and stopped after it, followed by
//    a 0.5 s pause for the server to close what is left: a quiet segment has
//    no client at all, like the unattacked run the issue compares against.
//    Every segment trains the same steps from the same seed, so all must
//    end with bit-identical parameters.

struct Segment {
  int pair = 0;
  bool attacked = false;
  double step_wall = 0;        // median over the segment's steps, seconds
  double step_thread_cpu = 0;  // median, the training thread's CPU seconds
  double mean_wall = 0, mean_thread_cpu = 0;
  double seconds = 0;     // the segment's wall time
  double server_cpu = 0;  // the server thread's CPU seconds during it
  long preempted = 0;     // the training thread's involuntary context switches
};

double mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? 0 : sum / double(v.size());
}

long involuntary_switches() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  return u.ru_nivcsw;
}

// Quantile q (0..1) of v, interpolated between neighbouring values.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double at = q * double(v.size() - 1);
  const size_t below = size_t(std::floor(at));
  const size_t above = std::min(v.size() - 1, below + 1);
  return v[below] + (at - double(below)) * (v[above] - v[below]);
}

// A ratio as a signed change in percent: 1.0123 -> "+1.23 %".
std::string change(double ratio) {
  std::ostringstream out;
  out << std::showpos << std::fixed << std::setprecision(2) << (ratio - 1) * 100 << " %";
  return out.str();
}

struct RatioStats {
  std::vector<double> ratios;  // attacked / quiet, one per pair
  std::string text() const {
    return change(quantile(ratios, 0.5)) + " (quartiles " + change(quantile(ratios, 0.25)) + " .. " +
           change(quantile(ratios, 0.75)) + ", range " + change(quantile(ratios, 0)) + " .. " +
           change(quantile(ratios, 1)) + ")";
  }
  std::string json() const {
    std::ostringstream out;
    out << std::setprecision(6) << "{\"median\": " << quantile(ratios, 0.5) << ", \"q25\": " << quantile(ratios, 0.25)
        << ", \"q75\": " << quantile(ratios, 0.75) << ", \"min\": " << quantile(ratios, 0)
        << ", \"max\": " << quantile(ratios, 1) << ", \"per_pair\": [";
    for (size_t i = 0; i < ratios.size(); ++i) out << (i ? ", " : "") << ratios[i];
    out << "]}";
    return out.str();
  }
};

int run_step_time(const Args& a) {
  if (a.pairs < 1 || a.segment_steps < 1) throw std::invalid_argument("--pairs and --segment-steps must be at least 1");
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.size() < 2) {
    std::cerr << "metrics_load --step-time: needs 2 CPUs, one for the training thread and one for the "
                 "attacker and the server's thread; this process may run on "
              << cpus.size() << " only. Refused.\n";
    return 77;
  }
  const int trainer_cpu = cpus[0], side_cpu = cpus[1];
  set_num_threads(1);  // the training's kernels on the training thread, not on OpenBLAS's or OpenMP's pools

  Registry registry(Labels{{"job", "metrics_load"}, {"rank", "0"}, {"world_size", "1"}});
  TrainingMetrics metrics(registry, false);
  pin(0, side_cpu, "the main thread");  // the server's thread, started next, inherits it
  MetricsServer server(registry, 0, "127.0.0.1");
  pin(0, trainer_cpu, "the training thread");
  pid_t server_tid = server_thread_id();
  for (int i = 0; i < 200 && server_tid < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    server_tid = server_thread_id();
  }
  if (server_tid < 0) throw std::runtime_error("the server's thread (ddp-metrics) was not found");
  // Every other thread too: the server's by name, in case it was started
  // elsewhere, and the libraries' idle pool threads started before main.
  for (const auto& [tid, name] : threads())
    if (tid != ::gettid()) pin(tid, side_cpu, "thread " + std::to_string(tid) + " (" + name + ")");
  std::cout << "metrics_load --step-time: training thread on CPU " << trainer_cpu
            << ", attacker and server thread on CPU " << side_cpu << "; server on 127.0.0.1:" << server.port()
            << ", " << a.pairs << " pairs of " << a.segment_steps << " steps (QA AQ ...)\n"
            << std::fixed;

  (void)train(std::max(5, a.segment_steps / 5), metrics);  // warm-up: caches, allocator, page faults
  std::vector<Segment> segments;
  AttackReport attacks;  // every attacked segment's, together
  std::vector<float> parameters;
  int same_parameters = 0;
  for (int pair = 0; pair < a.pairs; ++pair) {
    for (int k = 0; k < 2; ++k) {
      Segment seg;
      seg.pair = pair;
      seg.attacked = (k == 1) == (pair % 2 == 0);
      std::optional<Attacker> attacker;
      if (seg.attacked) {
        attacker.emplace(server.port(), a, side_cpu);
        if (attacker->read_line() != "ready") throw std::runtime_error("the attacker did not start");
      }
      const double server_cpu_before = server_thread_cpu_seconds();
      const long switches_before = involuntary_switches();
      const auto start = std::chrono::steady_clock::now();
      const TrainResult run = train(a.segment_steps, metrics);
      seg.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      seg.preempted = involuntary_switches() - switches_before;
      seg.server_cpu = server_thread_cpu_seconds() - server_cpu_before;
      seg.step_wall = median(run.step_seconds);
      seg.step_thread_cpu = median(run.step_thread_cpu_seconds);
      seg.mean_wall = mean(run.step_seconds);
      seg.mean_thread_cpu = mean(run.step_thread_cpu_seconds);
      if (attacker) {
        AttackReport r = attacker->stop_and_report();
        attacks.scrapes.insert(attacks.scrapes.end(), r.scrapes.begin(), r.scrapes.end());
        for (auto& [kind, statuses] : r.malformed)
          attacks.malformed[kind].insert(attacks.malformed[kind].end(), statuses.begin(), statuses.end());
        attacks.idle_reopened += r.idle_reopened;
        attacks.idle_open_mean += r.idle_open_mean / a.pairs;  // one attacked segment per pair
        std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the server closes what is left
      }
      if (parameters.empty()) parameters = run.parameters;
      same_parameters += run.parameters == parameters ? 1 : 0;
      std::cout << "pair " << pair << (seg.attacked ? " attacked" : " quiet   ") << ": step median "
                << std::setprecision(3) << seg.step_wall * 1e3 << " ms wall, " << seg.step_thread_cpu * 1e3
                << " ms thread CPU; mean " << seg.mean_wall * 1e3 << " / " << seg.mean_thread_cpu * 1e3
                << " ms; " << std::setprecision(2) << seg.seconds << " s, preempted " << seg.preempted
                << " times, server thread " << seg.server_cpu << " s CPU" << std::endl;
      segments.push_back(seg);
    }
  }

  RatioStats wall, thread_cpu, mean_wall, mean_thread_cpu;
  double attacked_seconds = 0, attacked_server_cpu = 0, quiet_seconds = 0, quiet_server_cpu = 0;
  long attacked_preempted = 0, quiet_preempted = 0;
  for (size_t i = 0; i + 1 < segments.size(); i += 2) {
    const Segment& q = segments[i].attacked ? segments[i + 1] : segments[i];
    const Segment& x = segments[i].attacked ? segments[i] : segments[i + 1];
    wall.ratios.push_back(x.step_wall / q.step_wall);
    thread_cpu.ratios.push_back(x.step_thread_cpu / q.step_thread_cpu);
    mean_wall.ratios.push_back(x.mean_wall / q.mean_wall);
    mean_thread_cpu.ratios.push_back(x.mean_thread_cpu / q.mean_thread_cpu);
    attacked_preempted += x.preempted;
    quiet_preempted += q.preempted;
    attacked_seconds += x.seconds;
    attacked_server_cpu += x.server_cpu;
    quiet_seconds += q.seconds;
    quiet_server_cpu += q.server_cpu;
  }
  const double server_share = attacked_server_cpu / attacked_seconds;
  const long ok = std::count_if(attacks.scrapes.begin(), attacks.scrapes.end(),
                                [](const Scrape& s) { return s.status == 200 && s.seconds < 1.0; });
  const bool scrapes_ok = ok == long(attacks.scrapes.size());
  const bool parameters_ok = same_parameters == int(segments.size());

  print_summary(attacks, std::cout, true);
  std::cout << std::setprecision(2) << "server thread (CPU " << side_cpu << "): " << attacked_server_cpu
            << " s of CPU in " << attacked_seconds << " s of attacked segments (" << 100 * server_share
            << " % of one core), " << quiet_server_cpu << " s in " << quiet_seconds << " s of quiet ones\n"
            << "training thread (CPU " << trainer_cpu << "): preempted " << attacked_preempted
            << " times in the attacked segments, " << quiet_preempted << " in the quiet ones\n"
            << "trained parameters: " << (parameters_ok ? "bit-identical in all " : "DIFFERENT in some of the ")
            << segments.size() << " segments\n"
            << "attacked/quiet over " << a.pairs << " pairs, median over the pairs:\n"
            << "  median step, wall:       " << wall.text() << '\n'
            << "  median step, thread CPU: " << thread_cpu.text() << '\n'
            << "  mean step, wall:         " << mean_wall.text() << '\n'
            << "  mean step, thread CPU:   " << mean_thread_cpu.text() << '\n'
            << "step-time summary: wall " << change(quantile(wall.ratios, 0.5)) << ", training-thread CPU "
            << change(quantile(thread_cpu.ratios, 0.5)) << " (attacked/quiet, median of " << a.pairs
            << " pairs of " << a.segment_steps << " steps); server thread " << 100 * server_share
            << " % of one core; scrapes " << ok << " of " << attacks.scrapes.size() << " 200 within 1 s\n";

  if (!a.json.empty()) {
    std::ofstream out(a.json);
    out << std::setprecision(6) << "{\"trainer_cpu\": " << trainer_cpu << ", \"side_cpu\": " << side_cpu
        << ", \"pairs\": " << a.pairs << ", \"segment_steps\": " << a.segment_steps << ",\n \"segments\": [";
    for (size_t i = 0; i < segments.size(); ++i) {
      const Segment& seg = segments[i];
      out << (i ? ",\n  " : "\n  ") << "{\"pair\": " << seg.pair << ", \"attacked\": " << std::boolalpha
          << seg.attacked << ", \"median_step_s\": " << seg.step_wall << ", \"median_step_thread_cpu_s\": "
          << seg.step_thread_cpu << ", \"mean_step_s\": " << seg.mean_wall
          << ", \"mean_step_thread_cpu_s\": " << seg.mean_thread_cpu << ", \"seconds\": " << seg.seconds
          << ", \"preempted\": " << seg.preempted << ", \"server_cpu_s\": " << seg.server_cpu << "}";
    }
    out << "],\n \"ratio_wall\": " << wall.json() << ",\n \"ratio_thread_cpu\": " << thread_cpu.json()
        << ",\n \"ratio_mean_wall\": " << mean_wall.json() << ",\n \"ratio_mean_thread_cpu\": " << mean_thread_cpu.json()
        << ",\n \"server_cpu_share\": " << server_share << ", \"scrapes\": " << attacks.scrapes.size()
        << ", \"scrapes_ok\": " << ok << ", \"scrape_p50_s\": " << percentile(attacks.scrapes, 50)
        << ", \"scrape_p99_s\": " << percentile(attacks.scrapes, 99) << ", \"scrape_max_s\": "
        << percentile(attacks.scrapes, 100) << ", \"parameters_identical\": " << parameters_ok << "}\n";
    if (!out) throw std::runtime_error("cannot write " + a.json);
  }
  if (!scrapes_ok) std::cout << "FAILED: a legitimate scrape was not answered 200 within 1 s\n";
  if (!parameters_ok) std::cout << "FAILED: a segment trained different parameters\n";
  return scrapes_ok && parameters_ok ? 0 : 1;
}

}  // namespace
}  // namespace ddp::metrics::load

int main(int argc, char** argv) {
  using namespace ddp::metrics::load;
  try {
    const Args a = parse_args(argc, argv);
    if (a.attack_port > 0) return run_attack(a);
    if (a.serve) return serve(a);
    if (a.serve_httplib) return serve_httplib(a);
    if (a.step_time) return run_step_time(a);
    return run_test(a);
  } catch (const std::exception& e) {
    std::cerr << "metrics_load: " << e.what() << '\n';
    return 2;
  }
}
