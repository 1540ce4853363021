#include "server_loop.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"

namespace ddp::metrics {
namespace {

// After an error answer: how long the rest of the request is read and
// dropped so the client sees the answer, not a reset.
constexpr std::chrono::milliseconds kDrainTime{1000};
// A full file table (EMFILE) leaves the listening socket readable; wait this
// long before accepting again instead of spinning.
constexpr std::chrono::milliseconds kAcceptPause{100};
// A connection this young is never evicted: it may not have had the time to
// send its request yet (a scraper sends it at once, on any network).
constexpr std::chrono::milliseconds kEvictionGrace{100};
// Connections accepted per pass, so a flood cannot starve the others.
constexpr int kAcceptsPerPass = 64;
constexpr size_t kReadChunk = 4096;
constexpr size_t kDrainPerPass = size_t(1) << 20;

std::string client_address(const sockaddr_storage& addr, socklen_t len) {
  char host[NI_MAXHOST] = "?";
  (void)::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, nullptr, 0,
                      NI_NUMERICHOST);
  return host;
}

std::string answer_head(int status, size_t content_length, std::string_view content_type,
                        bool keep_alive) {
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n",
                                 status, http::status_text(status), content_type, content_length);
  if (status == 405) head += "Allow: GET, HEAD\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

std::string error_answer(int status, std::string_view why) {
  const std::string body = std::string(why) + "\n";
  return answer_head(status, body.size(), "text/plain; charset=utf-8", false) + body;
}

}  // namespace

ServerLoop::ServerLoop(const Registry& registry, int listen_fd, const ServerLimits& limits)
    : registry_(registry),
      limits_(limits),
      request_limits_{limits.max_target_bytes, limits.max_head_bytes, 64},
      listen_fd_(listen_fd),
      drain_buffer_(size_t(64) << 10) {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    const int err = errno;
    ::close(listen_fd_);
    DDP_THROW(IoError, "metrics server: eventfd failed ({})", std::strerror(err));
  }
  connections_.reserve(size_t(limits_.max_connections));
}

ServerLoop::~ServerLoop() {
  for (Connection& c : connections_) close_connection(c);
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void ServerLoop::stop() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
}

void ServerLoop::run() {
  // A name for top -H, gdb and the load test's CPU accounting.
  (void)::pthread_setname_np(::pthread_self(), "ddp-metrics");
  std::vector<pollfd> fds;
  for (;;) {
    Clock::time_point now = Clock::now();
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    for (const Connection& c : connections_)
      fds.push_back({c.fd, short(c.state == State::kWriting ? POLLOUT : POLLIN), 0});

    const int n = ::poll(fds.data(), fds.size(), poll_timeout_ms(now));
    if (n < 0 && errno != EINTR) {
      DDP_LOG_ERROR("metrics server: poll failed ({}); no longer serving", std::strerror(errno));
      break;
    }
    if (fds[0].revents != 0) break;
    now = Clock::now();
    // fds[i + 2] belongs to connections_[i]; connections accepted below
    // come after them and are looked at in the next pass.
    const size_t polled = fds.size() - 2;
    for (size_t i = 0; i < polled; ++i) {
      Connection& c = connections_[i];
      const short ev = fds[i + 2].revents;
      if (c.fd < 0 || ev == 0) continue;
      if (c.state == State::kWriting && (ev & (POLLOUT | POLLERR | POLLHUP))) {
        flush(c, now);
        if (c.fd >= 0 && !c.in.empty()) serve(c, now);  // a pipelined request
      } else if (ev & (POLLIN | POLLERR | POLLHUP)) on_readable(c, now);
    }
    if (n > 0 && fds[1].revents != 0) accept_new(now);
    for (Connection& c : connections_)
      if (c.fd >= 0 && now >= c.deadline) close_connection(c);
    std::erase_if(connections_, [](const Connection& c) { return c.fd < 0; });
  }
}

int ServerLoop::poll_timeout_ms(Clock::time_point now) const {
  Clock::time_point next = now + std::chrono::seconds(1);
  if (now < accept_paused_until_) next = std::min(next, accept_paused_until_);
  for (const Connection& c : connections_) next = std::min(next, c.deadline);
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
  return ms < 0 ? 0 : int(ms);
}

void ServerLoop::accept_new(Clock::time_point now) {
  for (int i = 0; i < kAcceptsPerPass; ++i) {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        accept_paused_until_ = now + kAcceptPause;
      return;  // EAGAIN: all accepted
    }
    std::string address = client_address(addr, len);
    if (!make_room_for(address, now)) {
      // Every slot is answering a request: say so, best effort, and go.
      const std::string busy = error_answer(503, "too many connections");
      (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      continue;
    }
    int one = 1;
    (void)::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Connection c;
    c.fd = fd;
    c.address = std::move(address);
    c.opened = now;
    c.deadline = now + limits_.request_timeout;
    connections_.push_back(std::move(c));
  }
}

// See Note [Metrics server under load]: evicts the oldest connection that
// has no complete request (from `address` if it is at its limit, else from
// anyone if the server is full). False: nothing could be evicted.
bool ServerLoop::make_room_for(const std::string& address, Clock::time_point now) {
  auto evict_oldest = [this, now](auto&& among) {
    Connection* oldest = nullptr;
    for (Connection& c : connections_)
      if (c.fd >= 0 && c.state != State::kWriting && now - c.opened >= kEvictionGrace && among(c) &&
          (oldest == nullptr || c.opened < oldest->opened))
        oldest = &c;
    if (oldest == nullptr) return false;
    close_connection(*oldest);
    return true;
  };
  const auto open_count = [this](auto&& among) {
    return std::count_if(connections_.begin(), connections_.end(),
                         [&](const Connection& c) { return c.fd >= 0 && among(c); });
  };
  const auto same_address = [&address](const Connection& c) { return c.address == address; };
  const auto any = [](const Connection&) { return true; };
  if (open_count(same_address) >= limits_.max_connections_per_address && !evict_oldest(same_address))
    return false;
  if (open_count(any) >= limits_.max_connections && !evict_oldest(any)) return false;
  return true;
}

void ServerLoop::on_readable(Connection& c, Clock::time_point now) {
  if (c.state == State::kDraining) return drain(c);
  char buf[kReadChunk];
  const ssize_t got = ::recv(c.fd, buf, sizeof buf, 0);
  if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
    close_connection(c);  // the client went away
    return;
  }
  if (got < 0) return;
  if (c.idle) {  // a kept-alive connection's next request: request_timeout to complete it
    c.idle = false;
    c.deadline = now + limits_.request_timeout;
  }
  c.in.append(buf, size_t(got));
  serve(c, now);
}

// Drops what a refused client still sends, in large reads: an 8 MiB header
// read 4 KiB per pass of the loop would cost 2,000 passes over every socket.
void ServerLoop::drain(Connection& c) {
  for (size_t dropped = 0; dropped < kDrainPerPass;) {
    const ssize_t got = ::recv(c.fd, drain_buffer_.data(), drain_buffer_.size(), 0);
    if (got > 0) {
      dropped += size_t(got);
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    close_connection(c);  // the client read our answer and went away
    return;
  }
}

void ServerLoop::serve(Connection& c, Clock::time_point now) {
  // Pipelined requests are answered a few at a time; the rest wait for the
  // next readable event, so one client cannot hold the loop.
  constexpr int kAnswersPerPass = 4;
  for (int i = 0; i < kAnswersPerPass && c.fd >= 0 && c.state == State::kReading; ++i) {
    if (!start_answer(c, now)) return;
    flush(c, now);
  }
}

bool ServerLoop::start_answer(Connection& c, Clock::time_point now) {
  const http::ParsedRequest req = http::parse_request(c.in, request_limits_);
  if (req.status == 0) return false;
  if (req.status == 200) {
    const std::string body = registry_.expose();
    c.out = answer_head(200, body.size(), kTextContentType, req.keep_alive);
    if (!req.head) c.out += body;
    c.close_after_answer = !req.keep_alive;
    c.in.erase(0, req.head_bytes);
  } else {
    c.out = error_answer(req.status, req.why);
    c.close_after_answer = true;
    c.in.clear();
  }
  c.sent = 0;
  c.idle = false;
  c.state = State::kWriting;
  c.deadline = now + limits_.write_timeout;
  return true;
}

void ServerLoop::flush(Connection& c, Clock::time_point now) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) close_connection(c);
      return;  // the socket is full: poll for POLLOUT
    }
    c.sent += size_t(n);
  }
  std::string().swap(c.out);
  if (c.close_after_answer) {
    ::shutdown(c.fd, SHUT_WR);
    c.in.clear();
    c.state = State::kDraining;
    c.deadline = now + kDrainTime;
    return;
  }
  c.state = State::kReading;
  c.opened = now;  // for eviction, a kept-alive connection is as old as its last answer
  c.idle = c.in.empty();
  c.deadline = now + (c.idle ? limits_.idle_timeout : limits_.request_timeout);
}

void ServerLoop::close_connection(Connection& c) {
  if (c.fd < 0) return;
  ::close(c.fd);
  c.fd = -1;
  std::string().swap(c.in);
  std::string().swap(c.out);
}

}  // namespace ddp::metrics
