// The TCPStore client. See Note [TCPStore framing] (wire.h) for the format
// and tcp_store_server.cpp for the server.
//
// Note [TCPStore client connection]
// A client holds one connection and sends one request at a time under mu_,
// so several threads may share the object. The connection is made in the
// constructor, retrying with backoff until the store timeout, because ranks
// start in any order and the server may come up after its clients. Every
// send and receive polls with a deadline: the store timeout, plus for get()
// and wait() the time the server may legitimately park the request (it
// answers TIMEOUT itself when that runs out; see Note [Waiting requests]).
// Any failure in the middle of an exchange leaves the stream in an unknown
// state, so the connection is closed and the error raised; the next request
// reconnects. Requests are not retried: an add() that failed may or may not
// have been applied, and only the caller knows whether repeating it is safe.

#include "ddp/dist/tcp_store.h"

#include <poll.h>

#include <algorithm>
#include <thread>

#include "ddp/core/logging.h"
#include "dist/net.h"
#include "dist/wire.h"

namespace ddp::dist {

using net::Clock;
using wire::Cmd;
using wire::Status;

namespace {

constexpr std::string_view kJoinedKey = "__ddp_store/joined";
constexpr std::string_view kAllJoinedKey = "__ddp_store/all_joined";

wire::Writer command(Cmd cmd) {
  wire::Writer w;
  w.u8(uint8_t(cmd));
  return w;
}

// Timeouts are clamped so that adding two of them cannot overflow.
std::chrono::milliseconds clamp_timeout(std::chrono::milliseconds t) {
  constexpr std::chrono::milliseconds kCap{int64_t(30) * 24 * 3600 * 1000};
  return std::clamp(t, std::chrono::milliseconds(0), kCap);
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 16;
  std::string s;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i)
    s += fmt::format("{}'{}'", i ? ", " : "", keys[i]);
  if (keys.size() > kShown) s += fmt::format(" and {} more", keys.size() - kShown);
  return s;
}

// Waits until fd is ready for `events` or the deadline passes.
void wait_ready(int fd, short events, Clock::time_point deadline, const std::string& ctx,
                Clock::time_point start) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, net::poll_ms_until(deadline));
    if (rc > 0) return;  // ready, or an error the next send/recv will report
    if (rc < 0 && errno != EINTR)
      DDP_THROW(IoError, "{}: poll failed: {}", ctx, net::errno_str(errno));
    if (rc == 0 && Clock::now() >= deadline)
      DDP_THROW(TimeoutError, "{}: no response from the server after {}", ctx,
                net::seconds_str(Clock::now() - start));
  }
}

void send_all(int fd, const std::vector<uint8_t>& buf, Clock::time_point deadline,
              const std::string& ctx, Clock::time_point start) {
  size_t off = 0;
  while (off < buf.size()) {
    const ssize_t n = ::send(fd, buf.data() + off, buf.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += size_t(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT, deadline, ctx, start);
    } else if (!(n < 0 && errno == EINTR)) {
      DDP_THROW(IoError, "{}: send failed: {}", ctx, net::errno_str(errno));
    }
  }
}

void recv_exact(int fd, uint8_t* p, size_t n, Clock::time_point deadline, const std::string& ctx,
                Clock::time_point start) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= size_t(k);
    } else if (k == 0) {
      DDP_THROW(IoError,
                "{}: the server closed the connection (it stopped, or dropped this client "
                "for a wrong token or a malformed or oversized message)",
                ctx);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, deadline, ctx, start);
    } else if (errno != EINTR) {
      DDP_THROW(IoError, "{}: recv failed: {}", ctx, net::errno_str(errno));
    }
  }
}

// Sends one frame and reads the reply frame; returns the reply payload.
std::vector<uint8_t> exchange(int fd, const std::vector<uint8_t>& frame, size_t max_bytes,
                              Clock::time_point deadline, const std::string& ctx,
                              Clock::time_point start) {
  send_all(fd, frame, deadline, ctx, start);
  uint8_t header[wire::kHeaderBytes];
  recv_exact(fd, header, sizeof(header), deadline, ctx, start);
  const uint32_t len = wire::load_u32(header);
  if (len == 0 || len > max_bytes)
    DDP_THROW(IoError, "{}: malformed reply (length {}, limit {})", ctx, len, max_bytes);
  std::vector<uint8_t> payload(len);
  recv_exact(fd, payload.data(), len, deadline, ctx, start);
  return payload;
}

// The message of an ERROR reply.
std::string error_message(const std::vector<uint8_t>& reply) {
  try {
    return wire::Reader(reply.data() + 1, reply.size() - 1).str();
  } catch (const wire::ProtocolError&) {
    return "(unreadable error message)";
  }
}

}  // namespace

TCPStore::TCPStore(TCPStoreOptions options)
    : Store(clamp_timeout(options.timeout.value_or(Store::default_timeout()))),
      options_(std::move(options)) {
  DDP_CHECK(options_.max_message_bytes >= 64 && options_.max_message_bytes <= 0xFFFFFFFFu,
            "TCPStore: max_message_bytes must be in [64, 2^32-1], got {}",
            options_.max_message_bytes);
  DDP_CHECK(!options_.world_size || *options_.world_size >= 1,
            "TCPStore: world_size must be >= 1, got {}", options_.world_size.value_or(0));
  options_.token = net::resolve_token(options_.token);
  if (options_.is_server) {
    server_ = std::make_unique<TCPStoreServer>(options_);
    server_->start();
    port_ = server_->port();
  } else {
    DDP_CHECK(options_.port != 0, "TCPStore: a client needs the server's port (got port 0 for {})",
              options_.host);
    port_ = options_.port;
  }
  try {
    {
      std::lock_guard<std::mutex> g(mu_);
      ensure_connected_locked(net::deadline_after(timeout()));
    }
    join_workers();
  } catch (...) {
    // The destructor does not run for a failed constructor.
    close_locked();
    server_.reset();
    throw;
  }
}

TCPStore::~TCPStore() {
  close_locked();
  server_.reset();  // stops and joins; logs rather than throws
}

std::string TCPStore::where() const { return fmt::format("{}:{}", options_.host, port_); }

void TCPStore::close_locked() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TCPStore::ensure_connected_locked(Clock::time_point deadline) {
  if (fd_ >= 0) return;
  const auto start = Clock::now();
  const std::string ctx = fmt::format("TCPStore at {}", where());
  const std::string port_str = std::to_string(port_);
  auto backoff = std::chrono::milliseconds(10);
  std::string last_error = "none";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(options_.host.c_str(), port_str.c_str(), &hints, &res); rc != 0) {
      // Retried: in a fresh cluster allocation names may not resolve yet.
      last_error = fmt::format("cannot resolve '{}': {}", options_.host, ::gai_strerror(rc));
    } else {
      for (addrinfo* ai = res; ai && fd_ < 0; ai = ai->ai_next)
        fd_ = net::connect_tcp(ai, deadline, last_error);
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) break;
    const auto now = Clock::now();
    if (now >= deadline)
      DDP_THROW(TimeoutError,
                "{}: could not connect within {} (last error: {}); is the store server (rank 0) "
                "running and reachable?",
                ctx, net::seconds_str(now - start), last_error);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  // HELLO: the token and the protocol version. See Note [Hostile peers].
  try {
    const auto reply =
        exchange(fd_, command(Cmd::Hello).str(options_.token).u32(wire::kProtocolVersion).finish(),
                 options_.max_message_bytes, deadline, ctx, start);
    const auto status = static_cast<Status>(reply[0]);
    if (status == Status::Error)
      DDP_THROW(IoError, "{}: the server refused this client: {}", ctx, error_message(reply));
    if (status != Status::Ok || reply.size() != 1)
      DDP_THROW(IoError, "{}: malformed HELLO reply", ctx);
  } catch (...) {
    close_locked();
    throw;
  }
}

std::vector<uint8_t> TCPStore::request(std::vector<uint8_t> frame, const std::string& what,
                                       std::chrono::milliseconds wait) {
  const std::string ctx = fmt::format("TCPStore {} at {}", what, where());
  const size_t payload = frame.size() - wire::kHeaderBytes;
  DDP_CHECK(payload <= options_.max_message_bytes,
            "{}: request of {} bytes exceeds max_message_bytes ({})", ctx, payload,
            options_.max_message_bytes);
  std::lock_guard<std::mutex> g(mu_);
  const auto start = Clock::now();
  const auto t = clamp_timeout(timeout());
  try {
    ensure_connected_locked(start + t);
    const auto deadline = start + t + clamp_timeout(wait);
    auto reply = exchange(fd_, frame, options_.max_message_bytes, deadline, ctx, start);
    const auto status = static_cast<Status>(reply[0]);
    // ERROR: the server understood and refused (e.g. add to a non-integer);
    // the connection is still in step.
    if (status == Status::Error) DDP_THROW(ValueError, "{}: {}", ctx, error_message(reply));
    if (status != Status::Ok && status != Status::Timeout)
      DDP_THROW(IoError, "{}: malformed reply (status {})", ctx, int(status));
    return reply;
  } catch (const ValueError&) {
    throw;
  } catch (...) {
    close_locked();
    throw;
  }
}

namespace {

bool timed_out(const std::vector<uint8_t>& reply) { return Status(reply[0]) == Status::Timeout; }

// Runs f on the reply's fields (after the status byte), turning a malformed
// reply into IoError.
template <class F>
auto parse(const std::vector<uint8_t>& reply, const std::string& ctx, F&& f) {
  try {
    wire::Reader r(reply.data() + 1, reply.size() - 1);
    auto v = f(r);
    r.expect_end();
    return v;
  } catch (const wire::ProtocolError& e) {
    DDP_THROW(IoError, "{}: malformed reply: {}", ctx, e.what);
  }
}

}  // namespace

void TCPStore::do_set(const std::string& key, const Bytes& value) {
  request(command(Cmd::Set).str(key).bytes(value).finish(), fmt::format("set('{}')", key));
}

Bytes TCPStore::do_get(const std::string& key, std::chrono::milliseconds timeout) {
  timeout = clamp_timeout(timeout);
  const std::string what = fmt::format("get('{}')", key);
  const auto start = Clock::now();
  auto resp = request(command(Cmd::Get).str(key).i64(timeout.count()).finish(), what, timeout);
  const std::string ctx = fmt::format("TCPStore {} at {}", what, where());
  if (timed_out(resp))
    DDP_THROW(TimeoutError, "{}: key '{}' still missing after {} (timeout {})", ctx, key,
              net::seconds_str(Clock::now() - start), net::seconds_str(timeout));
  return parse(resp, ctx, [](wire::Reader& r) { return r.bytes(); });
}

int64_t TCPStore::do_add(const std::string& key, int64_t delta) {
  const std::string what = fmt::format("add('{}', {})", key, delta);
  auto resp = request(command(Cmd::Add).str(key).i64(delta).finish(), what);
  return parse(resp, what, [](wire::Reader& r) { return r.i64(); });
}

Bytes TCPStore::do_compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) {
  const std::string what = fmt::format("compare_set('{}')", key);
  auto resp =
      request(command(Cmd::CompareSet).str(key).bytes(expected).bytes(desired).finish(), what);
  return parse(resp, what, [](wire::Reader& r) { return r.bytes(); });
}

bool TCPStore::do_check(const std::vector<std::string>& keys) {
  const std::string what = fmt::format("check({})", quoted_keys(keys));
  auto resp = request(command(Cmd::Check).keys(keys).finish(), what);
  return parse(resp, what, [](wire::Reader& r) { return r.u8() != 0; });
}

void TCPStore::do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  timeout = clamp_timeout(timeout);
  const std::string what = fmt::format("wait({})", quoted_keys(keys));
  const auto start = Clock::now();
  auto resp = request(command(Cmd::Wait).keys(keys).i64(timeout.count()).finish(), what, timeout);
  const std::string ctx = fmt::format("TCPStore {} at {}", what, where());
  if (timed_out(resp)) {
    auto missing = parse(resp, ctx, [](wire::Reader& r) { return r.keys(); });
    DDP_THROW(TimeoutError, "{}: key{} {} still missing after {} (timeout {})", ctx,
              missing.size() == 1 ? "" : "s", quoted_keys(missing),
              net::seconds_str(Clock::now() - start), net::seconds_str(timeout));
  }
  parse(resp, ctx, [](wire::Reader&) { return 0; });
}

bool TCPStore::do_delete_key(const std::string& key) {
  const std::string what = fmt::format("delete_key('{}')", key);
  auto resp = request(command(Cmd::Delete).str(key).finish(), what);
  return parse(resp, what, [](wire::Reader& r) { return r.u8() != 0; });
}

int64_t TCPStore::do_num_keys() {
  auto resp = request(command(Cmd::NumKeys).finish(), "num_keys()");
  return parse(resp, "num_keys()", [](wire::Reader& r) { return r.i64(); });
}

void TCPStore::join_workers() {
  if (!options_.world_size) return;
  const int world = *options_.world_size;
  const int64_t joined = add(std::string(kJoinedKey), 1);
  if (joined == world) set(std::string(kAllJoinedKey), std::string("1"));
  if (joined > world)
    DDP_LOG_WARNING("TCPStore at {}: {} clients joined a store for world_size {}", where(), joined,
                    world);
  if (!server_ || !options_.wait_for_workers) return;
  try {
    wait({std::string(kAllJoinedKey)});
  } catch (const TimeoutError&) {
    const int64_t now_joined = add(std::string(kJoinedKey), 0);
    DDP_THROW(TimeoutError, "TCPStore at {}: only {} of {} workers joined within {}", where(),
              now_joined, world, net::seconds_str(timeout()));
  }
}

void TCPStore::serve(const TCPStoreOptions& options,
                     const std::function<void(uint16_t)>& on_listening) {
  TCPStoreServer server(options);
  DDP_LOG_INFO("TCPStore server listening on {}:{}", options.bind_address, server.port());
  if (on_listening) on_listening(server.port());
  server.run();
}

}  // namespace ddp::dist
