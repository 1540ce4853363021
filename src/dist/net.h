#pragma once
// Small POSIX socket helpers shared by the TCPStore client and server.
// Internal: not installed.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <system_error>

#include "ddp/core/env.h"
#include "ddp/core/error.h"

namespace ddp::dist::net {

using Clock = std::chrono::steady_clock;

// Thread-safe strerror.
inline std::string errno_str(int e) { return std::error_code(e, std::system_category()).message(); }

// "5.0 s" for humans; sub-second timeouts keep their milliseconds.
inline std::string seconds_str(Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  return s < 1.0 ? fmt::format("{:.3f} s", s) : fmt::format("{:.1f} s", s);
}

// Milliseconds until deadline for poll(): >= 0, capped so a far deadline
// cannot overflow int.
inline int poll_ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 3'600'000 ? 3'600'000 : int(left);
}

// Adds a duration to now without overflowing the clock for "wait forever"
// sized timeouts (milliseconds::max() and such): capped at 30 days.
inline Clock::time_point deadline_after(std::chrono::milliseconds d) {
  constexpr std::chrono::milliseconds kCap{int64_t(30) * 24 * 3600 * 1000};
  if (d.count() < 0) d = std::chrono::milliseconds(0);
  return Clock::now() + (d > kCap ? kCap : d);
}

inline void set_nodelay(int fd) {
  int one = 1;
  // Requests are small and latency-bound; best effort.
  (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// "10.0.0.1:29500" / "[::1]:29500"
inline std::string sockaddr_str(const sockaddr* sa, socklen_t len) {
  char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
  (void)::getnameinfo(sa, len, host, sizeof(host), serv, sizeof(serv),
                      NI_NUMERICHOST | NI_NUMERICSERV);
  return sa->sa_family == AF_INET6 ? fmt::format("[{}]:{}", host, serv)
                                   : fmt::format("{}:{}", host, serv);
}

// The job token: the option, else DDP_STORE_TOKEN, else none.
inline std::string resolve_token(const std::string& option) {
  return option.empty() ? env_string("DDP_STORE_TOKEN", "") : option;
}

// Compares secrets in time independent of where they first differ.
inline bool equal_constant_time(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Listens on address:port (port 0: a free port, stored in *bound_port);
// returns the non-blocking listening socket. Raises IoError naming
// address:port when it cannot.
int listen_tcp(const std::string& address, uint16_t port, uint16_t* bound_port);

// One non-blocking connect attempt to ai, bounded by deadline; returns the
// connected non-blocking socket, or -1 with the reason in err.
int connect_tcp(const addrinfo* ai, Clock::time_point deadline, std::string& err);

// Closes fd on scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd = -1) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// The address of this machine that the kernel would use to reach host (a
// UDP "connect" sends nothing; it only picks the route). Empty when host does
// not resolve or is unreachable. This is how a rank finds the address its
// peers can reach it at, also inside a network namespace.
inline std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || !res) return "";
  std::string out;
  for (addrinfo* ai = res; ai && out.empty(); ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[NI_MAXHOST];
      if (::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, buf, sizeof(buf), nullptr, 0,
                        NI_NUMERICHOST) == 0)
        out = buf;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return out;
}

}  // namespace ddp::dist::net
