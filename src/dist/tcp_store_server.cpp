// The TCPStore server: one thread, poll() over the listening socket, a wake
// pipe and every client. See Note [TCPStore framing] (wire.h).
//
// Note [Hostile peers]
// The store listens on the network (0.0.0.0 by default), so anything may
// connect: a port scanner, a health check, a rank of another job, a client of
// a different build. Whatever such a peer does, only its own connection
// suffers:
// - The length prefix is checked the moment its 4 bytes arrive; a frame of 0
//   bytes or above the limit drops the client before any payload is read or
//   allocated. Until a client has said HELLO the limit is kMaxHelloBytes, so
//   an unauthenticated peer cannot make the server buffer 64 MiB.
// - Payloads are parsed with bounds-checked readers; an unknown command, a
//   field running past the frame, or bytes left over drop the client.
// - A client that has not completed HELLO within the store timeout, that
//   disconnects mid-message, or whose socket errors, is dropped; its parked
//   request (if any) is forgotten.
// - With a token, the first frame must be a HELLO carrying it; otherwise the
//   server answers ERROR and closes. Without a token the HELLO is still
//   required (it carries the protocol version).
// - Sockets are non-blocking and each client has its own input and output
//   buffer: a peer that stops reading only fills its own output buffer, and
//   the server reads no further request from it until that is flushed, so
//   memory per client stays bounded by about one frame each way.
// Dropping is logged as a warning naming the peer's address and the reason.
//
// Note [Waiting requests]
// GET of a missing key and WAIT are parked, not served by blocking: the
// client's waiter (its keys, its deadline) is registered on ONE missing key.
// When a request creates that key (SET, ADD, COMPARE_SET), the waiter is
// re-examined: if all its keys exist it is answered, otherwise it moves to
// the next missing key. Registering on one key at a time keeps the
// bookkeeping exact even when keys are deleted again in between, and costs
// nothing for the common single-key case. Each poll() is bounded by the
// nearest deadline, and a waiter whose deadline passed is answered TIMEOUT
// with its missing keys, so the client learns which keys never came and its
// connection stays in step. A parked client sends nothing else (our client
// has one request in flight), so the server stops reading from it but keeps
// watching for hang-up (POLLRDHUP) to forget the waiter of a client that
// went away.

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <optional>
#include <unordered_map>

#include "ddp/core/logging.h"
#include "ddp/dist/tcp_store.h"
#include "dist/net.h"
#include "dist/wire.h"

namespace ddp::dist {

namespace {

using net::Clock;
using wire::Cmd;
using wire::Status;

// The most a client may send before its HELLO was accepted.
constexpr size_t kMaxHelloBytes = 64 << 10;
// Keys under this prefix belong to the store itself (the join counter) and
// are left out of num_keys().
constexpr std::string_view kReservedPrefix = "__ddp_store/";

struct Waiter {
  Cmd cmd;  // Get or Wait
  std::vector<std::string> keys;
  Clock::time_point deadline;
  std::optional<std::string> registered;  // the missing key it is parked on
};

struct Client {
  uint64_t id = 0;
  int fd = -1;
  std::string peer;
  std::vector<uint8_t> in;  // received, not yet consumed
  size_t in_off = 0;
  std::vector<uint8_t> out;  // to send
  size_t out_off = 0;
  bool authenticated = false;
  bool closing = false;  // close once `out` is flushed
  bool dead = false;
  Clock::time_point hello_deadline;
  std::optional<Waiter> waiter;

  ~Client() {
    if (fd >= 0) ::close(fd);
  }
  bool reading() const { return !dead && !closing && !waiter && out_off == out.size(); }
};

wire::Writer with_status(Status s) {
  wire::Writer w;
  w.u8(uint8_t(s));
  return w;
}
wire::Writer ok() { return with_status(Status::Ok); }

std::optional<int64_t> parse_int(const Bytes& v) {
  int64_t x = 0;
  const char* b = reinterpret_cast<const char*>(v.data());
  const char* e = b + v.size();
  auto [p, ec] = std::from_chars(b, e, x);
  if (ec != std::errc() || p != e || v.empty()) return std::nullopt;
  return x;
}

}  // namespace

struct TCPStoreServer::Impl {
  Impl(const TCPStoreOptions& o);

  void run();
  void request_stop() {
    stop_.store(true);
    const char b = 1;
    // A full pipe already holds a wake-up; nothing else can fail here.
    (void)!::write(wake_wr_.get(), &b, 1);
  }

  void accept_all();
  void on_events(Client& c, short revents);
  void read_some(Client& c);
  void pump(Client& c);
  void handle_frame(Client& c, const uint8_t* p, size_t n);
  void flush(Client& c);
  void drop(Client& c, const std::string& why, bool hostile);
  void reply(Client& c, std::vector<uint8_t> frame);
  void reply_error(Client& c, const std::string& msg);
  void park(Client& c, Cmd cmd, std::vector<std::string> keys, int64_t timeout_ms);
  bool register_waiter(Client& c);  // false: nothing missing any more
  void unregister_waiter(Client& c);
  void finish_waiter(Client& c, bool timed_out);
  void key_created(const std::string& key);
  void expire(Clock::time_point now);
  int poll_timeout_ms() const;
  Client* find(uint64_t id) {
    auto it = clients_.find(id);
    return it == clients_.end() || it->second->dead ? nullptr : it->second.get();
  }

  // The wake pipe lets stop() interrupt poll() from another thread.
  net::FdGuard listen_fd_, wake_rd_, wake_wr_;
  uint16_t port_ = 0;
  std::string where_;
  std::string token_;
  size_t max_message_bytes_;
  std::chrono::milliseconds hello_timeout_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> running_{false};

  std::unordered_map<std::string, Bytes> data_;
  std::unordered_map<uint64_t, std::unique_ptr<Client>> clients_;
  std::unordered_map<std::string, std::vector<uint64_t>> waiting_on_;
  std::vector<uint64_t> ready_;  // clients that may have buffered requests to serve
  uint64_t next_id_ = 1;
  std::vector<uint8_t> scratch_ = std::vector<uint8_t>(64 << 10);
};

TCPStoreServer::Impl::Impl(const TCPStoreOptions& o)
    : token_(net::resolve_token(o.token)),
      max_message_bytes_(o.max_message_bytes),
      hello_timeout_(o.timeout.value_or(Store::default_timeout())) {
  DDP_CHECK(max_message_bytes_ >= 64 && max_message_bytes_ <= 0xFFFFFFFFu,
            "TCPStoreServer: max_message_bytes must be in [64, 2^32-1], got {}",
            max_message_bytes_);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    DDP_THROW(IoError, "TCPStoreServer: pipe2 failed: {}", net::errno_str(errno));
  wake_rd_.reset(fds[0]);
  wake_wr_.reset(fds[1]);
  listen_fd_.reset(net::listen_tcp(o.bind_address, o.port, &port_));
  where_ = fmt::format("{}:{}", o.bind_address, port_);
}

int TCPStoreServer::Impl::poll_timeout_ms() const {
  bool any = false;
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [id, c] : clients_) {
    if (c->dead) continue;
    if (c->waiter) next = std::min(next, c->waiter->deadline), any = true;
    if (!c->authenticated) next = std::min(next, c->hello_deadline), any = true;
  }
  return any ? net::poll_ms_until(next) : -1;
}

void TCPStoreServer::Impl::run() {
  DDP_CHECK(!running_.exchange(true), "TCPStoreServer at {}: already serving", where_);
  std::vector<pollfd> pfds;
  std::vector<uint64_t> ids;
  while (!stop_.load()) {
    pfds.clear();
    ids.clear();
    pfds.push_back({wake_rd_.get(), POLLIN, 0});
    pfds.push_back({listen_fd_.get(), POLLIN, 0});
    for (const auto& [id, c] : clients_) {
      short ev = POLLRDHUP;
      if (c->reading()) ev |= POLLIN;
      if (c->out_off < c->out.size()) ev |= POLLOUT;
      pfds.push_back({c->fd, ev, 0});
      ids.push_back(id);
    }
    const int n = ::poll(pfds.data(), pfds.size(), poll_timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      // ENOMEM and the like: transient at best; do not spin.
      DDP_LOG_ERROR("TCPStoreServer at {}: poll failed: {}", where_, net::errno_str(errno));
      ::usleep(10'000);
      continue;
    }
    if (pfds[0].revents) {
      char buf[64];
      while (::read(wake_rd_.get(), buf, sizeof(buf)) > 0) {
      }
    }
    if (stop_.load()) break;
    if (pfds[1].revents & POLLIN) accept_all();
    for (size_t i = 2; i < pfds.size(); ++i)
      if (pfds[i].revents)
        if (Client* c = find(ids[i - 2])) on_events(*c, pfds[i].revents);
    expire(Clock::now());
    // Serving one client's request may answer another's parked one, whose
    // buffered requests are then served in turn; each round consumes frames.
    while (!ready_.empty()) {
      auto batch = std::move(ready_);
      ready_.clear();
      for (uint64_t id : batch)
        if (Client* c = find(id)) pump(*c);
    }
    std::erase_if(clients_, [](const auto& kv) { return kv.second->dead; });
  }
  // Clients see the connection close and raise IoError on their next request.
  clients_.clear();
  waiting_on_.clear();
}

void TCPStoreServer::Impl::accept_all() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = ::accept4(listen_fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // EMFILE and friends: the pending connection stays queued; back off so
        // the listener's readiness does not turn the loop into a spin.
        DDP_LOG_WARNING("TCPStoreServer at {}: accept failed: {}", where_, net::errno_str(errno));
        ::usleep(10'000);
      }
      return;
    }
    net::set_nodelay(fd);
    auto c = std::make_unique<Client>();
    c->id = next_id_++;
    c->fd = fd;
    c->peer = net::sockaddr_str(reinterpret_cast<sockaddr*>(&ss), len);
    c->hello_deadline = net::deadline_after(hello_timeout_);
    DDP_LOG_DEBUG("TCPStoreServer at {}: client {} connected", where_, c->peer);
    clients_.emplace(c->id, std::move(c));
  }
}

void TCPStoreServer::Impl::on_events(Client& c, short revents) {
  if (revents & (POLLERR | POLLNVAL)) return drop(c, "socket error", false);
  if (revents & POLLOUT) {
    flush(c);
    if (c.dead) return;
    pump(c);  // a flushed response lets buffered requests through
    if (c.dead) return;
  }
  if (c.reading() && (revents & (POLLIN | POLLHUP | POLLRDHUP))) {
    read_some(c);  // sees EOF itself
  } else if (revents & (POLLHUP | POLLRDHUP)) {
    drop(c, c.waiter ? "disconnected while waiting" : "disconnected", false);
  }
}

void TCPStoreServer::Impl::read_some(Client& c) {
  const ssize_t n = ::recv(c.fd, scratch_.data(), scratch_.size(), 0);
  if (n == 0) {
    // EOF between frames is a normal goodbye; inside one it is not.
    const bool partial = c.in.size() > c.in_off;
    return drop(c, partial ? "disconnected in the middle of a message" : "disconnected", partial);
  }
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
    return drop(c, fmt::format("recv failed: {}", net::errno_str(errno)), false);
  }
  c.in.insert(c.in.end(), scratch_.begin(), scratch_.begin() + n);
  pump(c);
}

void TCPStoreServer::Impl::pump(Client& c) {
  while (c.reading()) {
    const size_t avail = c.in.size() - c.in_off;
    if (avail < wire::kHeaderBytes) break;
    const uint32_t len = wire::load_u32(c.in.data() + c.in_off);
    const size_t limit = c.authenticated ? max_message_bytes_ : kMaxHelloBytes;
    if (len == 0 || len > limit)
      return drop(c, fmt::format("message of {} bytes (limit {})", len, limit), true);
    if (avail < wire::kHeaderBytes + len) break;
    const uint8_t* payload = c.in.data() + c.in_off + wire::kHeaderBytes;
    c.in_off += wire::kHeaderBytes + len;
    try {
      handle_frame(c, payload, len);
    } catch (const wire::ProtocolError& e) {
      return drop(c, fmt::format("malformed message: {}", e.what), true);
    } catch (const std::exception& e) {
      // Out of memory for a large value, say: that request fails, not the
      // server (an exception escaping run() would end it for everyone).
      DDP_LOG_ERROR("TCPStoreServer at {}: request of client {} failed: {}", where_, c.peer,
                    e.what());
      return drop(c, "request failed", false);
    }
  }
  if (c.dead) return;
  if (c.in_off > 0) {
    c.in.erase(c.in.begin(), c.in.begin() + c.in_off);
    c.in_off = 0;
  }
  // Keep the capacity of a large finished frame from pinning memory.
  if (c.in.empty() && c.in.capacity() > (1u << 20)) c.in.shrink_to_fit();
}

void TCPStoreServer::Impl::handle_frame(Client& c, const uint8_t* p, size_t n) {
  wire::Reader r(p, n);
  const auto cmd = static_cast<Cmd>(r.u8());
  if (!c.authenticated) {
    if (cmd != Cmd::Hello) throw wire::ProtocolError{"first message is not HELLO"};
    const std::string token = r.str();
    const uint32_t version = r.u32();
    r.expect_end();
    if (version != wire::kProtocolVersion) {
      DDP_LOG_WARNING("TCPStoreServer at {}: dropping client {}: protocol version {} (server: {})",
                      where_, c.peer, version, wire::kProtocolVersion);
      c.closing = true;  // before the reply: flushing it then closes
      return reply_error(c, fmt::format("protocol version {} does not match the server's {}",
                                        version, wire::kProtocolVersion));
    }
    if (!token_.empty() && !net::equal_constant_time(token, token_)) {
      DDP_LOG_WARNING("TCPStoreServer at {}: dropping client {}: wrong job token", where_, c.peer);
      c.closing = true;
      return reply_error(c, "wrong job token (DDP_STORE_TOKEN / TCPStoreOptions::token differ)");
    }
    c.authenticated = true;
    return reply(c, ok().finish());
  }
  switch (cmd) {
    case Cmd::Set: {
      std::string key = r.str();
      Bytes value = r.bytes();
      r.expect_end();
      const bool created = data_.insert_or_assign(key, std::move(value)).second;
      reply(c, ok().finish());
      if (created) key_created(key);
      return;
    }
    case Cmd::Get: {
      std::string key = r.str();
      const int64_t timeout_ms = r.i64();
      r.expect_end();
      if (auto it = data_.find(key); it != data_.end())
        return reply(c, ok().bytes(it->second).finish());
      return park(c, Cmd::Get, {std::move(key)}, timeout_ms);
    }
    case Cmd::Add: {
      std::string key = r.str();
      const int64_t delta = r.i64();
      r.expect_end();
      auto it = data_.find(key);
      const bool existed = it != data_.end();
      int64_t value = 0;
      if (existed) {
        auto cur = parse_int(it->second);
        if (!cur) return reply_error(c, fmt::format("the value of '{}' is not an integer", key));
        value = *cur;
      }
      if (__builtin_add_overflow(value, delta, &value))
        return reply_error(c, fmt::format("'{}' overflows int64 (adding {})", key, delta));
      const std::string text = std::to_string(value);
      data_[key] = Bytes(text.begin(), text.end());
      reply(c, ok().i64(value).finish());
      if (!existed) key_created(key);
      return;
    }
    case Cmd::CompareSet: {
      std::string key = r.str();
      Bytes expected = r.bytes();
      Bytes desired = r.bytes();
      r.expect_end();
      auto it = data_.find(key);
      if (it == data_.end()) {
        if (!expected.empty())  // nothing stored, nothing swapped
          return reply(c, ok().bytes(Bytes{}).finish());
        data_.emplace(key, desired);
        reply(c, ok().bytes(desired).finish());
        return key_created(key);
      }
      if (it->second == expected) it->second = std::move(desired);
      return reply(c, ok().bytes(it->second).finish());
    }
    case Cmd::Check: {
      auto keys = r.keys();
      r.expect_end();
      const bool all = std::all_of(keys.begin(), keys.end(),
                                   [&](const std::string& k) { return data_.count(k) != 0; });
      return reply(c, ok().u8(all ? 1 : 0).finish());
    }
    case Cmd::Wait: {
      auto keys = r.keys();
      const int64_t timeout_ms = r.i64();
      r.expect_end();
      return park(c, Cmd::Wait, std::move(keys), timeout_ms);
    }
    case Cmd::Delete: {
      std::string key = r.str();
      r.expect_end();
      const bool existed = data_.erase(key) != 0;
      return reply(c, ok().u8(existed ? 1 : 0).finish());
    }
    case Cmd::NumKeys: {
      r.expect_end();
      int64_t count = 0;
      for (const auto& [k, v] : data_) count += k.rfind(kReservedPrefix, 0) != 0;
      return reply(c, ok().i64(count).finish());
    }
    case Cmd::Hello:
      throw wire::ProtocolError{"HELLO sent twice"};
  }
  throw wire::ProtocolError{"unknown command"};
}

void TCPStoreServer::Impl::reply(Client& c, std::vector<uint8_t> frame) {
  if (c.out_off == c.out.size()) {
    c.out = std::move(frame);
    c.out_off = 0;
  } else {
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  flush(c);
}

void TCPStoreServer::Impl::reply_error(Client& c, const std::string& msg) {
  reply(c, with_status(Status::Error).str(msg).finish());
}

void TCPStoreServer::Impl::flush(Client& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_off += size_t(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;  // poll() reports POLLOUT when there is room again
    } else {
      return drop(c, fmt::format("send failed: {}", net::errno_str(errno)), false);
    }
  }
  c.out.clear();
  c.out_off = 0;
  if (c.out.capacity() > (1u << 20)) c.out.shrink_to_fit();
  if (c.closing) drop(c, "closed after an error reply", false);
}

void TCPStoreServer::Impl::drop(Client& c, const std::string& why, bool hostile) {
  if (c.dead) return;
  if (hostile)
    DDP_LOG_WARNING("TCPStoreServer at {}: dropping client {}: {}", where_, c.peer, why);
  else
    DDP_LOG_DEBUG("TCPStoreServer at {}: client {} {}", where_, c.peer, why);
  unregister_waiter(c);
  c.waiter.reset();
  c.dead = true;
  // Closing now (not when reaped) tells the peer at once; the fd number is
  // not looked at again, clients are found by id.
  ::shutdown(c.fd, SHUT_RDWR);
}

void TCPStoreServer::Impl::park(Client& c, Cmd cmd, std::vector<std::string> keys,
                                int64_t timeout_ms) {
  c.waiter =
      Waiter{cmd, std::move(keys),
             net::deadline_after(std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms))),
             std::nullopt};
  if (!register_waiter(c)) return finish_waiter(c, false);
  if (timeout_ms <= 0) finish_waiter(c, true);
}

bool TCPStoreServer::Impl::register_waiter(Client& c) {
  for (const auto& k : c.waiter->keys) {
    if (data_.count(k)) continue;
    c.waiter->registered = k;
    waiting_on_[k].push_back(c.id);
    return true;
  }
  return false;
}

void TCPStoreServer::Impl::unregister_waiter(Client& c) {
  if (!c.waiter || !c.waiter->registered) return;
  auto it = waiting_on_.find(*c.waiter->registered);
  c.waiter->registered.reset();
  if (it == waiting_on_.end()) return;
  std::erase(it->second, c.id);
  if (it->second.empty()) waiting_on_.erase(it);
}

void TCPStoreServer::Impl::finish_waiter(Client& c, bool timed_out) {
  unregister_waiter(c);
  Waiter w = std::move(*c.waiter);
  c.waiter.reset();
  if (timed_out) {
    std::vector<std::string> missing;
    for (auto& k : w.keys)
      if (!data_.count(k)) missing.push_back(std::move(k));
    reply(c, with_status(Status::Timeout).keys(missing).finish());
  } else if (w.cmd == Cmd::Get) {
    reply(c, ok().bytes(data_.at(w.keys[0])).finish());
  } else {
    reply(c, ok().finish());
  }
  ready_.push_back(c.id);
}

void TCPStoreServer::Impl::key_created(const std::string& key) {
  auto it = waiting_on_.find(key);
  if (it == waiting_on_.end()) return;
  const std::vector<uint64_t> ids = std::move(it->second);
  waiting_on_.erase(it);
  for (uint64_t id : ids) {
    Client* c = find(id);
    if (!c || !c->waiter || c->waiter->registered != key) continue;
    c->waiter->registered.reset();
    if (!register_waiter(*c)) finish_waiter(*c, false);
  }
}

void TCPStoreServer::Impl::expire(Clock::time_point now) {
  for (auto& [id, c] : clients_) {
    if (c->dead) continue;
    if (c->waiter && c->waiter->deadline <= now) finish_waiter(*c, true);
    if (!c->authenticated && c->hello_deadline <= now)
      drop(*c, "sent no HELLO within the store timeout", true);
  }
}

// ---------------------------------------------------------------------------

TCPStoreServer::TCPStoreServer(const TCPStoreOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}

TCPStoreServer::~TCPStoreServer() {
  try {
    stop();
  } catch (const std::exception& e) {
    DDP_LOG_ERROR("TCPStoreServer: error while stopping: {}", e.what());
  } catch (...) {
    DDP_LOG_ERROR("TCPStoreServer: unknown error while stopping");
  }
}

uint16_t TCPStoreServer::port() const { return impl_->port_; }

void TCPStoreServer::start() {
  std::lock_guard<std::mutex> g(mu_);
  DDP_CHECK(!thread_.joinable() && !impl_->running_.load() && !impl_->stop_.load(),
            "TCPStoreServer at {}: start() on a server that is running or stopped", impl_->where_);
  thread_ = std::thread([impl = impl_.get()] {
    try {
      impl->run();
    } catch (const std::exception& e) {
      // Nothing inside run() is expected to throw; if it does, clients see
      // the connections close rather than the process dying.
      DDP_LOG_ERROR("TCPStoreServer at {}: stopped by an error: {}", impl->where_, e.what());
    }
  });
}

void TCPStoreServer::run() {
  DDP_CHECK(!impl_->stop_.load(), "TCPStoreServer at {}: run() on a stopped server", impl_->where_);
  impl_->run();
}

void TCPStoreServer::stop() {
  impl_->request_stop();
  std::lock_guard<std::mutex> g(mu_);
  if (thread_.joinable()) thread_.join();
}

}  // namespace ddp::dist
