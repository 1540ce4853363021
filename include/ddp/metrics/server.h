#pragma once
// Serves a Registry over HTTP for Prometheus to scrape:
//
//   ddp::metrics::Registry registry(ddp::metrics::Labels{{"rank", "0"}});
//   ddp::metrics::MetricsServer server(registry, 9100);   // GET /metrics
//
// The server answers on its own threads (two), so scrapes never run on the
// training thread; See Note [Metrics never block a step]. Only GET /metrics
// is served (404 otherwise), in the text format 0.0.4.

#include <memory>
#include <string>

#include "ddp/metrics/registry.h"

namespace ddp::metrics {

class MetricsServer {
 public:
  // Listens on host:port before returning (port 0: any free port, see
  // port()). Raises ValueError for a port outside 0..65535 and IoError
  // naming host and port when it cannot listen (the port is taken, or
  // needs privileges). The registry must outlive the server.
  MetricsServer(const Registry& registry, int port, const std::string& host = "0.0.0.0");
  // Stops listening and joins the server thread; never throws.
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
