#pragma once
// The metrics server's event loop: one thread, poll() over the listening
// socket and every connection. Internal: not installed.
//
// Note [Metrics server under load]
// The endpoint must keep answering Prometheus while other clients are
// broken or hostile: hundreds of sockets that connect and send nothing, or a
// header line now and then; requests with a garbage request line, an 8 MiB
// header, a huge Content-Length or a 1 MiB URL; bursts of concurrent
// scrapes. cpp-httplib, used before, gives each connection a pool thread
// until its request has arrived, so a handful of slow sockets took both
// threads and every scrape queued behind them (measured in docs/metrics.md,
// "The endpoint under load"). Hence one thread and non-blocking sockets:
//   - a connection costs a slot and at most max_head_bytes of buffer until
//     its request is complete, never a thread;
//   - every connection has a deadline (request_timeout to send a whole
//     request, idle_timeout between kept-alive requests, write_timeout to
//     read the answer); past it, the connection is closed;
//   - at max_connections (or max_connections_per_address from one
//     address), a new connection evicts the oldest one that has not sent a
//     complete request and is older than 100 ms: a client that sends its
//     request at once (any scraper) is answered within one pass of the
//     loop, so the sockets that idle are the ones that go. Only when no
//     slot can be freed is the new one refused (503). The per-address limit
//     (64) keeps a burst of concurrent scrapes from one Prometheus whole
//     and confines a hostile address to its own slots; a scraper behind
//     the same address (NAT) as the attacker competes for those slots;
//   - requests are parsed as their bytes arrive and refused early (Note
//     [Metrics request limits]); after an error answer the socket is shut
//     down for writing and drained for a moment, so the client reads the
//     4xx instead of a reset.
// A scrape is rendered on this thread, as before: it costs ~0.25 ms
// (docs/benchmarks.md, "Metrics serving cost"), and the loop is the only
// thread the server adds, so training keeps its CPU.

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "ddp/metrics/registry.h"
#include "ddp/metrics/server.h"
#include "http_request.h"

namespace ddp::metrics {

class ServerLoop {
 public:
  // Takes ownership of listen_fd (non-blocking, listening).
  ServerLoop(const Registry& registry, int listen_fd, const ServerLimits& limits);
  ~ServerLoop();
  ServerLoop(const ServerLoop&) = delete;
  ServerLoop& operator=(const ServerLoop&) = delete;

  // Serves until stop(); closes every connection before returning.
  void run();
  // Thread-safe; run() returns soon after.
  void stop();

 private:
  using Clock = std::chrono::steady_clock;
  enum class State { kReading, kWriting, kDraining };
  struct Connection {
    int fd = -1;
    std::string address;  // the client's address, for the per-address limit
    State state = State::kReading;
    std::string in;       // received and not yet answered (at most max_head_bytes + a read)
    std::string out;      // the answer not yet sent
    size_t sent = 0;
    bool close_after_answer = true;
    bool idle = false;  // kept alive after an answer, no byte of the next request yet
    Clock::time_point opened;
    Clock::time_point deadline;
  };

  void accept_new(Clock::time_point now);
  bool make_room_for(const std::string& address, Clock::time_point now);
  void on_readable(Connection& c, Clock::time_point now);
  void drain(Connection& c);
  void serve(Connection& c, Clock::time_point now);
  bool start_answer(Connection& c, Clock::time_point now);
  void flush(Connection& c, Clock::time_point now);
  void close_connection(Connection& c);
  int poll_timeout_ms(Clock::time_point now) const;

  const Registry& registry_;
  const ServerLimits limits_;
  const http::RequestLimits request_limits_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd stop() writes to
  Clock::time_point accept_paused_until_{};
  std::vector<Connection> connections_;
  std::vector<char> drain_buffer_;  // what refused clients still send goes here, unread
};

}  // namespace ddp::metrics
