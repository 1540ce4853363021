#include "dist/net.h"

#include "core/tcp_listen.h"

#include <poll.h>

namespace ddp::dist::net {

int listen_tcp(const std::string& address, uint16_t port, uint16_t* bound_port) {
  const std::string where = fmt::format("{}:{}", address, port);
  const ddp::detail::TcpListener l = ddp::detail::listen_tcp(address, port);
  if (!l.resolved)
    DDP_THROW(IoError, "TCPStoreServer: cannot resolve bind address {}: {}", where, l.error_text);
  if (l.fd < 0) DDP_THROW(IoError, "TCPStoreServer: cannot listen on {}: {}", where, l.error_text);
  *bound_port = l.port;
  return l.fd;
}

int connect_tcp(const addrinfo* ai, Clock::time_point deadline, std::string& err) {
  FdGuard fd(
      ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
  if (fd.get() < 0) {
    err = errno_str(errno);
    return -1;
  }
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      err = errno_str(errno);
      return -1;
    }
    pollfd p{fd.get(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, poll_ms_until(deadline));
    } while (rc < 0 && errno == EINTR);
    if (rc <= 0) {
      err = rc == 0 ? "connect timed out" : errno_str(errno);
      return -1;
    }
    int soerr = 0;
    socklen_t len = sizeof(soerr);
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len) != 0) soerr = errno;
    if (soerr != 0) {
      err = errno_str(soerr);
      return -1;
    }
  }
  set_nodelay(fd.get());
  return fd.release();
}

}  // namespace ddp::dist::net
