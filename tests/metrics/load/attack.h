#pragma once
// The load test's attacker: what issue 30 saw blind the endpoint, against
// 127.0.0.1:port, until told to stop:
//   - idle sockets (from 127.0.0.2-9): half send nothing after connecting,
//     half send a request line and then a header line every 500 ms; the
//     server closing one gets it reopened within 100 ms;
//   - malformed requests in turn (from 127.0.0.10): a garbage request line,
//     an 8 MiB header, a huge Content-Length with a body, a 1 MiB URL;
//   - legitimate scrapes (from 127.0.0.1): one every 100 ms, and a burst of
//     `burst` concurrent ones every 500 ms; each timed to its last byte.

#include <atomic>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ddp::metrics::load {

struct AttackOptions {
  int port = 0;
  int idle_sockets = 200;
  int burst = 32;
};

struct Scrape {
  int status = 0;  // 0: no answer within 5 s
  double seconds = 0;
};

struct AttackReport {
  std::vector<Scrape> scrapes;                        // the legitimate ones
  std::map<std::string, std::vector<int>> malformed;  // kind -> the statuses answered (0: none)
  long idle_reopened = 0;                             // idle sockets the server closed and we reopened
  double idle_open_mean = 0;                          // idle sockets open, averaged over the attack
};

// Attacks until `stop` is true; calls `ready` once every idle socket is open.
AttackReport attack(const AttackOptions& options, const std::atomic<bool>& stop,
                    const std::function<void()>& ready);

// The report as lines ("scrape 200 0.0012", "malformed 1MiB-URL 414", ...)
// for the parent process, and back.
std::string to_lines(const AttackReport& report);
AttackReport from_lines(const std::string& lines);

// Percentile (0..100) of the scrape times, in seconds.
double percentile(std::vector<Scrape> scrapes, double p);

}  // namespace ddp::metrics::load
