#pragma once
// Serves a Registry over HTTP for Prometheus to scrape:
//
//   ddp::metrics::Registry registry(ddp::metrics::Labels{{"rank", "0"}});
//   ddp::metrics::MetricsServer server(registry, 9100);   // GET /metrics
//
// The server answers on its own thread (one, an event loop), so scrapes
// never run on the training thread; See Note [Metrics never block a step].
// Only GET and HEAD /metrics are served, in the text format 0.0.4; other
// paths get 404, other methods 405. A broken or hostile client cannot keep
// it from answering: See Note [Metrics server under load].

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "ddp/metrics/registry.h"

namespace ddp::metrics {

// What one client may cost the server; the defaults hold against hundreds
// of idle sockets (docs/metrics.md, "The endpoint under load").
struct ServerLimits {
  int max_connections = 512;             // open at once, all clients together
  int max_connections_per_address = 64;  // open at once from one client address
  size_t max_target_bytes = 1024;        // the URL: longer is 414
  size_t max_head_bytes = 8192;          // request line + headers: longer is 431
  // A new connection must have sent its whole request within this ...
  std::chrono::milliseconds request_timeout{2000};
  // ... a kept-alive connection may wait this long for its next request ...
  std::chrono::milliseconds idle_timeout{5000};
  // ... and a client must have read the answer within this.
  std::chrono::milliseconds write_timeout{5000};
};

class MetricsServer {
 public:
  // Listens on host:port before returning (port 0: any free port, see
  // port()). Raises ValueError for a port outside 0..65535 or limits below
  // 1, and IoError naming host and port when it cannot listen (the port is
  // taken, or needs privileges). The registry must outlive the server.
  MetricsServer(const Registry& registry, int port, const std::string& host = "0.0.0.0",
                const ServerLimits& limits = {});
  // Stops listening, closes every connection and joins the server thread;
  // never throws.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;  // the port listened on
  const std::string& host() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::metrics
