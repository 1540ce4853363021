#pragma once
// A raw-socket HTTP client for the metrics server's tests: it sends exactly
// the bytes a test gives (malformed ones included), from a chosen loopback
// address, and reads the answer with a deadline. Loopback only.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <string_view>

namespace ddp::metrics::testing {

using Clock = std::chrono::steady_clock;

// A connected socket to 127.0.0.1:port from `source` (any 127.x.y.z: Linux
// routes all of 127/8 to the loopback device), or -1.
inline int connect_loopback(int port, const char* source = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(uint16_t(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Sends all of `bytes` unless the peer closes first; false then.
inline bool send_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    bytes.remove_prefix(size_t(n));
  }
  return true;
}

// Reads until the peer closes or the deadline passes. `closed`: whether
// the peer closed (EOF or reset) before the deadline.
inline std::string read_until_closed(int fd, Clock::time_point deadline, bool* closed = nullptr) {
  std::string got;
  char buf[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed != nullptr) *closed = true;
      return got;
    }
    got.append(buf, size_t(n));
  }
  if (closed != nullptr) *closed = false;
  return got;
}

// The status code of an answer ("HTTP/1.1 404 Not Found\r\n..."), or 0.
inline int status_of(std::string_view answer) {
  constexpr std::string_view kPrefix = "HTTP/1.1 ";
  if (answer.size() < kPrefix.size() + 3 || answer.substr(0, kPrefix.size()) != kPrefix) return 0;
  return std::stoi(std::string(answer.substr(kPrefix.size(), 3)));
}

// The body of a complete answer (after the blank line).
inline std::string body_of(std::string_view answer) {
  const size_t end = answer.find("\r\n\r\n");
  return end == std::string_view::npos ? std::string() : std::string(answer.substr(end + 4));
}

// One request on a fresh connection: sends it (as much as the server
// takes), then reads the answer until the server closes. Returns the answer.
inline std::string request_once(int port, std::string_view request,
                            std::chrono::milliseconds timeout = std::chrono::milliseconds(3000),
                            const char* source = "127.0.0.1") {
  const int fd = connect_loopback(port, source);
  if (fd < 0) return {};
  // A server that stops reading must not block the client for ever.
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  (void)send_all(fd, request);
  std::string answer = read_until_closed(fd, Clock::now() + timeout);
  ::close(fd);
  return answer;
}

inline std::string scrape_request() {
  return "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
}

}  // namespace ddp::metrics::testing
