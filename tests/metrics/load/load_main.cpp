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
//   metrics_load --attack PORT [--seconds S] [--idle N] [--burst N]
//       only the attack, on 127.0.0.1:PORT: for S seconds, or until stdin
//       closes; prints the report's lines on stdout and a summary on stderr.
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
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#include "attack.h"
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

// CPU seconds (user + system) the server's thread ("ddp-metrics") has used.
double server_thread_cpu_seconds() {
  DIR* tasks = ::opendir("/proc/self/task");
  double seconds = -1;
  while (const dirent* e = tasks ? ::readdir(tasks) : nullptr) {
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(dir + "/comm");
    std::string name;
    if (!std::getline(comm, name) || name != "ddp-metrics") continue;
    std::ifstream stat(dir + "/stat");
    std::string line;
    std::getline(stat, line);
    std::istringstream fields(line.substr(line.rfind(')') + 2));  // after "pid (comm) "
    std::string skip;
    for (int i = 3; i < 14; ++i) fields >> skip;  // fields 3..13
    double utime = 0, stime = 0;
    fields >> utime >> stime;
    seconds = (utime + stime) / double(::sysconf(_SC_CLK_TCK));
  }
  if (tasks) ::closedir(tasks);
  return seconds;
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

void print_summary(const AttackReport& r, std::ostream& out) {
  const long ok = std::count_if(r.scrapes.begin(), r.scrapes.end(),
                                [](const Scrape& s) { return s.status == 200 && s.seconds < 1.0; });
  out << "legitimate scrapes: " << r.scrapes.size() << ", answered 200 within 1 s: " << ok << " ("
      << (r.scrapes.empty() ? 0.0 : 100.0 * double(ok) / double(r.scrapes.size())) << " %)"
      << ", p50 " << percentile(r.scrapes, 50) * 1e3 << " ms, p99 " << percentile(r.scrapes, 99) * 1e3
      << " ms, max " << percentile(r.scrapes, 100) * 1e3 << " ms\n";
  for (const auto& [kind, statuses] : r.malformed) {
    out << "malformed " << kind << ":";
    for (int s : statuses) out << ' ' << s;
    out << '\n';
  }
  out << "idle sockets: " << r.idle_open_mean << " open on average, " << r.idle_reopened
      << " reopened after the server closed them\n";
}

int run_attack(const Args& a) {
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

  Attacker(int port, const Args& a) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    const std::string port_s = std::to_string(port), idle = std::to_string(a.idle), burst = std::to_string(a.burst);
    const char* argv[] = {"metrics_load", "--attack", port_s.c_str(), "--idle", idle.c_str(),
                          "--burst", burst.c_str(), nullptr};
    const int rc = posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, const_cast<char**>(argv), environ);
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

}  // namespace
}  // namespace ddp::metrics::load

int main(int argc, char** argv) {
  using namespace ddp::metrics::load;
  try {
    const Args a = parse_args(argc, argv);
    if (a.attack_port > 0) return run_attack(a);
    if (a.serve) return serve(a);
    if (a.serve_httplib) return serve_httplib(a);
    return run_test(a);
  } catch (const std::exception& e) {
    std::cerr << "metrics_load: " << e.what() << '\n';
    return 2;
  }
}
