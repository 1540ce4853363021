#include "ddp/metrics/server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::metrics {

struct MetricsServer::Impl {
  httplib::Server http;
  std::thread thread;
  std::atomic<bool> loop_ended{false};
  std::string host;
  int port = 0;
};

MetricsServer::MetricsServer(const Registry& registry, int port, const std::string& host)
    : impl_(std::make_unique<Impl>()) {
  if (port < 0 || port > 65535)
    DDP_THROW(ValueError, "metrics server: port {} is outside 0..65535", port);
  impl_->host = host;
  httplib::Server& http = impl_->http;
  // Note [Exclusive metrics port]
  // cpp-httplib sets SO_REUSEPORT on its listening socket by default, which
  // lets a second process bind the same port and silently take half of the
  // scrapes: two jobs on one node would report each other's ranks. Only
  // SO_REUSEADDR is set here (a restarted job may rebind a port still in
  // TIME_WAIT), so a port in use is an error the user sees at start-up.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Two threads are plenty for a scraper or two and keep the server's share
  // of the CPU small; one request per connection, so an idle keep-alive
  // connection never holds a thread another scraper needs.
  http.new_task_queue = [] { return new httplib::ThreadPool(2); };
  http.set_keep_alive_max_count(1);
  http.Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.expose(), kTextContentType);
  });

  errno = 0;
  int bound = -1;
  if (port == 0) {
    bound = http.bind_to_any_port(host);
  } else if (http.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound < 0) {
    const int err = errno;
    if (err == EADDRINUSE)
      DDP_THROW(IoError, "metrics server: port {} is already in use (cannot listen on {}:{}); "
                "choose another port", port, host, port);
    DDP_THROW(IoError, "metrics server: cannot listen on {}:{} ({})", host, port,
              err != 0 ? std::strerror(err) : "bind failed");
  }
  impl_->port = bound;
  impl_->thread = std::thread([impl = impl_.get()] {
    impl->http.listen_after_bind();
    impl->loop_ended = true;
  });
  // stop() is a no-op until the listen loop runs, so wait for it here: the
  // destructor can then always stop the server.
  while (!impl_->http.is_running() && !impl_->loop_ended)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

MetricsServer::~MetricsServer() {
  try {
    impl_->http.stop();
    if (impl_->thread.joinable()) impl_->thread.join();
  } catch (const std::exception& e) {
    DDP_LOG_ERROR("metrics server on port {}: stopping failed: {}", impl_->port, e.what());
  }
}

int MetricsServer::port() const { return impl_->port; }
const std::string& MetricsServer::host() const { return impl_->host; }

}  // namespace ddp::metrics
