#include "dist/net.h"

#include <poll.h>

namespace ddp::dist::net {

int listen_tcp(const std::string& address, uint16_t port, uint16_t* bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_str = std::to_string(port);
  const std::string where = fmt::format("{}:{}", address, port);
  if (int rc = ::getaddrinfo(address.c_str(), port_str.c_str(), &hints, &res); rc != 0)
    DDP_THROW(IoError, "TCPStoreServer: cannot resolve bind address {}: {}", where,
              ::gai_strerror(rc));
  FdGuard listener;
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai && listener.get() < 0; ai = ai->ai_next) {
    FdGuard fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) {
      last_error = errno_str(errno);
      continue;
    }
    int one = 1;
    // Lets a restarted job reuse the port while old connections linger in
    // TIME_WAIT; it does not allow two live listeners on one port.
    (void)::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      last_error = errno_str(errno);
      continue;
    }
    listener.reset(fd.release());
  }
  ::freeaddrinfo(res);
  if (listener.get() < 0)
    DDP_THROW(IoError, "TCPStoreServer: cannot listen on {}: {}", where, last_error);

  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    DDP_THROW(IoError, "TCPStoreServer: getsockname on {} failed: {}", where, errno_str(errno));
  *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return listener.release();
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
