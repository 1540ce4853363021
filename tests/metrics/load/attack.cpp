#include "attack.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>
#include <thread>

#include "metrics/raw_http.h"

namespace ddp::metrics::load {
namespace {

using namespace std::chrono_literals;
using testing::Clock;

constexpr auto kScrapeTimeout = 5000ms;

// Sleeps in short steps so a stop is seen quickly; false once stopped.
bool pause(std::chrono::milliseconds d, const std::atomic<bool>& stop) {
  const auto until = Clock::now() + d;
  while (!stop && Clock::now() < until) std::this_thread::sleep_for(std::min<Clock::duration>(10ms, until - Clock::now()));
  return !stop;
}

Scrape scrape(int port) {
  const auto start = Clock::now();
  const std::string answer = testing::request_once(port, testing::scrape_request(), kScrapeTimeout);
  Scrape s;
  s.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  s.status = testing::status_of(answer);
  // A 200 counts only with a whole page: its last series ends the body.
  if (s.status == 200 && (testing::body_of(answer).empty() || answer.back() != '\n')) s.status = -1;
  return s;
}

void hold_idle_sockets(const AttackOptions& o, const std::atomic<bool>& stop,
                       const std::function<void()>& ready, AttackReport* report) {
  std::vector<int> fds(size_t(o.idle_sockets), -1);
  auto open = [&](size_t i) {
    const std::string source = "127.0.0." + std::to_string(2 + i % 8);
    fds[i] = testing::connect_loopback(o.port, source.c_str());
    if (fds[i] >= 0 && i % 2 == 1 && !testing::send_all(fds[i], "GET /metrics HTTP/1.1\r\nHost: x\r\n")) {
      ::close(fds[i]);
      fds[i] = -1;
    }
  };
  for (size_t i = 0; i < fds.size(); ++i) open(i);
  ready();
  auto next_drip = Clock::now() + 500ms;
  long samples = 0;
  double open_sum = 0;
  while (!stop) {
    std::vector<pollfd> p;
    for (int fd : fds) p.push_back({fd, POLLIN, 0});
    (void)::poll(p.data(), p.size(), 100);
    char buf[4096];
    for (size_t i = 0; i < fds.size(); ++i)
      if (fds[i] >= 0 && p[i].revents != 0 && ::recv(fds[i], buf, sizeof buf, MSG_DONTWAIT) <= 0) {
        ::close(fds[i]);
        fds[i] = -1;
      }
    const bool drip = Clock::now() >= next_drip;
    if (drip) next_drip += 500ms;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i] < 0) {
        open(i);
        ++report->idle_reopened;
      } else if (drip && i % 2 == 1 && !testing::send_all(fds[i], "X-Drip: 1\r\n")) {
        ::close(fds[i]);
        fds[i] = -1;
      }
    }
    open_sum += double(std::count_if(fds.begin(), fds.end(), [](int fd) { return fd >= 0; }));
    ++samples;
  }
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  report->idle_open_mean = samples > 0 ? open_sum / double(samples) : 0;
}

void send_malformed(int port, const std::atomic<bool>& stop, AttackReport* report) {
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"garbage-request-line", "\x16\x03\x01\x02\x00 \x01garbage\r\n\r\n"},
      {"8MiB-header", "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(8 << 20, 'a') + "\r\n\r\n"},
      {"huge-Content-Length",
       "POST /metrics HTTP/1.1\r\nContent-Length: 99999999999999\r\n\r\n" + std::string(64 << 10, 'b')},
      {"1MiB-URL", "GET /" + std::string(1 << 20, 'u') + " HTTP/1.1\r\n\r\n"},
  };
  for (size_t i = 0; pause(100ms, stop); ++i) {
    const auto& [kind, request] = kinds[i % kinds.size()];
    report->malformed[kind].push_back(
        testing::status_of(testing::request_once(port, request, 3000ms, "127.0.0.10")));
  }
}

}  // namespace

AttackReport attack(const AttackOptions& o, const std::atomic<bool>& stop,
                    const std::function<void()>& ready) {
  AttackReport idle_report, malformed_report, steady_report, burst_report;
  std::atomic<bool> idle_ready{false};
  std::thread idle([&] { hold_idle_sockets(o, stop, [&] { idle_ready = true; }, &idle_report); });
  while (!idle_ready && !stop) std::this_thread::sleep_for(1ms);
  std::thread malformed([&] { send_malformed(o.port, stop, &malformed_report); });
  std::thread steady([&] {
    while (pause(100ms, stop)) steady_report.scrapes.push_back(scrape(o.port));
  });
  std::thread bursts([&] {
    while (pause(500ms, stop)) {
      std::vector<Scrape> got(size_t(o.burst));
      std::vector<std::thread> clients;
      for (auto& g : got) clients.emplace_back([&g, &o] { g = scrape(o.port); });
      for (auto& c : clients) c.join();
      burst_report.scrapes.insert(burst_report.scrapes.end(), got.begin(), got.end());
    }
  });
  ready();
  for (std::thread* t : {&idle, &malformed, &steady, &bursts}) t->join();
  AttackReport all = std::move(idle_report);
  all.malformed = std::move(malformed_report.malformed);
  all.scrapes = std::move(steady_report.scrapes);
  all.scrapes.insert(all.scrapes.end(), burst_report.scrapes.begin(), burst_report.scrapes.end());
  return all;
}

std::string to_lines(const AttackReport& r) {
  std::ostringstream out;
  for (const Scrape& s : r.scrapes) out << "scrape " << s.status << ' ' << s.seconds << '\n';
  for (const auto& [kind, statuses] : r.malformed)
    for (int status : statuses) out << "malformed " << kind << ' ' << status << '\n';
  out << "idle " << r.idle_reopened << ' ' << r.idle_open_mean << '\n';
  return out.str();
}

AttackReport from_lines(const std::string& lines) {
  AttackReport r;
  std::istringstream in(lines);
  std::string what;
  while (in >> what) {
    if (what == "scrape") {
      Scrape s;
      in >> s.status >> s.seconds;
      r.scrapes.push_back(s);
    } else if (what == "malformed") {
      std::string kind;
      int status = 0;
      in >> kind >> status;
      r.malformed[kind].push_back(status);
    } else if (what == "idle") {
      in >> r.idle_reopened >> r.idle_open_mean;
    }
  }
  return r;
}

double percentile(std::vector<Scrape> scrapes, double p) {
  if (scrapes.empty()) return 0;
  std::sort(scrapes.begin(), scrapes.end(), [](const Scrape& a, const Scrape& b) { return a.seconds < b.seconds; });
  const size_t rank = size_t(std::ceil(p / 100.0 * double(scrapes.size())));
  return scrapes[std::min(scrapes.size() - 1, rank == 0 ? 0 : rank - 1)].seconds;
}

}  // namespace ddp::metrics::load
