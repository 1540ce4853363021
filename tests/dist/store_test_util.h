#pragma once
// Helpers shared by the store tests: options on 127.0.0.1, an environment
// guard, and a raw socket for playing a hostile peer.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "ddp/dist/tcp_store.h"

namespace ddp::dist::test {

// Timing bounds allow this much on top of a timeout: the suite runs on
// loaded machines.
constexpr int64_t kSlackMs = 2000;

inline int64_t ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t)
      .count();
}

// Unsets an environment variable for the guard's lifetime.
class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    ::unsetenv(name);
  }
  ~EnvGuard() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

inline TCPStoreOptions server_options(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  TCPStoreOptions o;
  o.host = "127.0.0.1";
  o.bind_address = "127.0.0.1";
  o.port = 0;
  o.is_server = true;
  o.timeout = timeout;
  return o;
}

inline TCPStoreOptions client_options(uint16_t port, std::chrono::milliseconds timeout) {
  TCPStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = timeout;
  return o;
}

// A port nobody listens on (bound, read back and released).
inline uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    return 0;
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

// The wire format spelled out independently of src/dist/wire.h, so the
// tests also pin the protocol down.
enum : uint8_t { kHello = 1, kSet = 2, kGet = 3 };
constexpr uint32_t kVersion = 1;

struct Msg {
  std::vector<uint8_t> b;
  Msg& u8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Msg& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) b.push_back(uint8_t(v >> (8 * i)));
    return *this;
  }
  Msg& i64(int64_t v) {
    for (int i = 0; i < 8; ++i) b.push_back(uint8_t(uint64_t(v) >> (8 * i)));
    return *this;
  }
  Msg& str(const std::string& s) {
    u32(uint32_t(s.size()));
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  // The framed message: u32 little-endian length, then the payload.
  std::vector<uint8_t> frame() const {
    Msg f;
    f.u32(uint32_t(b.size()));
    f.b.insert(f.b.end(), b.begin(), b.end());
    return f.b;
  }
};

inline std::vector<uint8_t> hello(const std::string& token = "") {
  return Msg().u8(kHello).str(token).u32(kVersion).frame();
}

// A blocking raw connection to 127.0.0.1:port.
class RawPeer {
 public:
  explicit RawPeer(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~RawPeer() { close(); }
  RawPeer(const RawPeer&) = delete;
  RawPeer& operator=(const RawPeer&) = delete;

  bool connected() const { return connected_; }
  bool send(const std::vector<uint8_t>& bytes) {
    return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size());
  }
  bool send(const std::string& bytes) {
    return send(std::vector<uint8_t>(bytes.begin(), bytes.end()));
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Reads one framed reply; nullopt on EOF, error or timeout.
  std::optional<std::vector<uint8_t>> reply(int timeout_ms = 5000) {
    uint8_t h[4];
    if (!read_exact(h, 4, timeout_ms)) return std::nullopt;
    const uint32_t n =
        uint32_t(h[0]) | uint32_t(h[1]) << 8 | uint32_t(h[2]) << 16 | uint32_t(h[3]) << 24;
    if (n > (1u << 20)) return std::nullopt;
    std::vector<uint8_t> p(n);
    if (!read_exact(p.data(), n, timeout_ms)) return std::nullopt;
    return p;
  }
  // True when the server closes the connection (EOF or reset) within the
  // time; whatever it sends first (an error reply) is skipped.
  bool closed_by_server(int timeout_ms = 5000) {
    const auto start = std::chrono::steady_clock::now();
    uint8_t buf[4096];
    while (ms_since(start) < timeout_ms) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) return true;
    }
    return false;
  }

 private:
  bool read_exact(uint8_t* p, size_t n, int timeout_ms) {
    const auto start = std::chrono::steady_clock::now();
    while (n > 0) {
      pollfd pf{fd_, POLLIN, 0};
      if (ms_since(start) > timeout_ms) return false;
      if (::poll(&pf, 1, 100) <= 0) continue;
      const ssize_t k = ::recv(fd_, p, n, 0);
      if (k <= 0) return false;
      p += k;
      n -= size_t(k);
    }
    return true;
  }
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace ddp::dist::test
