#include "core/tcp_listen.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace ddp::detail {
namespace {

std::string errno_text(int e) { return std::error_code(e, std::system_category()).message(); }

}  // namespace

TcpListener listen_tcp(const std::string& address, uint16_t port) {
  TcpListener out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(),
                                   &hints, &found);
      rc != 0) {
    out.resolved = false;
    out.error_text = ::gai_strerror(rc);
    return out;
  }
  out.error_text = "no address";
  for (addrinfo* a = found; a != nullptr && out.fd < 0; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      out.error = errno;
      out.error_text = errno_text(out.error);
      continue;
    }
    // Note [Exclusive metrics port]
    // SO_REUSEADDR lets a restarted job bind a port whose old connections
    // linger in TIME_WAIT. SO_REUSEPORT (cpp-httplib's default, which the
    // metrics server once used) is never set: it would let a second process
    // bind the same port and silently take half of the connections, so two
    // jobs on one node would report each other's ranks. A port in use is
    // thus an error the user sees at start-up.
    int one = 1;
    (void)::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      out.error = errno;
      out.error_text = errno_text(out.error);
      ::close(fd);
      continue;
    }
    out.fd = fd;
  }
  ::freeaddrinfo(found);
  if (out.fd < 0) return out;
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(out.fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    out.error = errno;
    out.error_text = "getsockname failed: " + errno_text(out.error);
    ::close(out.fd);
    out.fd = -1;
    return out;
  }
  out.port = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  out.error = 0;
  out.error_text.clear();
  return out;
}

}  // namespace ddp::detail
