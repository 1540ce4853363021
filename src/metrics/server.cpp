#include "ddp/metrics/server.h"

#include <cerrno>
#include <thread>

#include "core/tcp_listen.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "server_loop.h"

namespace ddp::metrics {
namespace {

// A non-blocking socket listening on host:port (port 0: any free port);
// *bound: the port. Raises IoError naming host:port when it cannot.
int listen_on(const std::string& host, int port, int* bound) {
  const ddp::detail::TcpListener l = ddp::detail::listen_tcp(host, uint16_t(port));
  if (l.fd < 0) {
    if (l.error == EADDRINUSE)
      DDP_THROW(IoError, "metrics server: port {} is already in use (cannot listen on {}:{}); "
                "choose another port", port, host, port);
    DDP_THROW(IoError, "metrics server: cannot listen on {}:{} ({})", host, port, l.error_text);
  }
  *bound = l.port;
  return l.fd;
}

void check_limits(const ServerLimits& l) {
  using std::chrono::milliseconds;
  if (l.max_connections < 1 || l.max_connections_per_address < 1 || l.max_target_bytes < 1 ||
      l.max_head_bytes < 1 || l.request_timeout <= milliseconds(0) ||
      l.idle_timeout <= milliseconds(0) || l.write_timeout <= milliseconds(0))
    DDP_THROW(ValueError, "metrics server: every limit must be at least 1 (connections {}, per "
              "address {}, target {} B, head {} B, timeouts {}/{}/{} ms)", l.max_connections,
              l.max_connections_per_address, l.max_target_bytes, l.max_head_bytes,
              l.request_timeout.count(), l.idle_timeout.count(), l.write_timeout.count());
}

}  // namespace

struct MetricsServer::Impl {
  std::unique_ptr<ServerLoop> loop;
  std::thread thread;
  std::string host;
  int port = 0;
};

MetricsServer::MetricsServer(const Registry& registry, int port, const std::string& host,
                             const ServerLimits& limits)
    : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535)
    DDP_THROW(ValueError, "metrics server: port {} is outside 0..65535", port);
  check_limits(limits);
  impl_->host = host;
  const int fd = listen_on(host, port, &impl_->port);
  impl_->loop = std::make_unique<ServerLoop>(registry, fd, limits);
  impl_->thread = std::thread([loop = impl_->loop.get()] { loop->run(); });
}

MetricsServer::~MetricsServer() {
  try {
    impl_->loop->stop();
    if (impl_->thread.joinable()) impl_->thread.join();
  } catch (const std::exception& e) {
    DDP_LOG_ERROR("metrics server on port {}: stopping failed: {}", impl_->port, e.what());
  }
}

int MetricsServer::port() const { return impl_->port; }
const std::string& MetricsServer::host() const { return impl_->host; }

}  // namespace ddp::metrics
