#include "ddp/metrics/server.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "server_loop.h"

namespace ddp::metrics {
namespace {

// A non-blocking socket listening on host:port (port 0: any free port);
// *bound: the port. Raises IoError naming host:port when it cannot.
int listen_on(const std::string& host, int port, int* bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0)
    DDP_THROW(IoError, "metrics server: cannot listen on {}:{} ({})", host, port, ::gai_strerror(rc));
  int err = 0;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // Note [Exclusive metrics port]
    // SO_REUSEPORT would let a second process bind the same port and
    // silently take half of the scrapes: two jobs on one node would report
    // each other's ranks. Only SO_REUSEADDR is set (a restarted job may
    // rebind a port still in TIME_WAIT), so a port in use is an error the
    // user sees at start-up.
    int yes = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    if (err == EADDRINUSE)
      DDP_THROW(IoError, "metrics server: port {} is already in use (cannot listen on {}:{}); "
                "choose another port", port, host, port);
    DDP_THROW(IoError, "metrics server: cannot listen on {}:{} ({})", host, port,
              err != 0 ? std::strerror(err) : "no address");
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  *bound = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return fd;
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
