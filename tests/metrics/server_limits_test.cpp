// MetricsServer against broken and hostile clients: each malformed request
// gets its 4xx and the server keeps answering; slow and idle connections are
// closed at their deadline; at its connection limits the server evicts idle
// sockets for a scrape; one thread whatever the load.
// See Note [Metrics server under load].

#include <dirent.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/metrics/server.h"
#include "metrics/raw_http.h"

namespace ddp::metrics {
namespace {

using namespace std::chrono_literals;
using testing::Clock;
using testing::connect_loopback;
using testing::request_once;
using testing::read_until_closed;
using testing::scrape_request;
using testing::send_all;
using testing::status_of;

class ServerLimitsTest : public ::testing::Test {
 protected:
  ServerLimitsTest() { registry_.counter("steps_total", "Steps.").get().inc(3); }
  int scrape_status(int port, const char* source = "127.0.0.1") {
    return status_of(request_once(port, scrape_request(), 3000ms, source));
  }
  Registry registry_;
};

struct Fd {
  explicit Fd(int f) : fd(f) {}
  ~Fd() { if (fd >= 0) ::close(fd); }
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  int fd;
};

// True if the server closed fd within `within` (and sent nothing).
bool closed_within(int fd, std::chrono::milliseconds within) {
  bool closed = false;
  const std::string got = read_until_closed(fd, Clock::now() + within, &closed);
  return closed && got.empty();
}

TEST_F(ServerLimitsTest, MalformedRequestsGetAClear4xxAndTheServerGoesOn) {
  MetricsServer server(registry_, 0, "127.0.0.1");
  const int port = server.port();
  const std::string garbage = request_once(port, "\x16\x03\x01 hello\r\n\r\n");
  EXPECT_EQ(status_of(garbage), 400) << garbage;
  EXPECT_EQ(testing::body_of(garbage), "malformed request line\n");
  EXPECT_EQ(status_of(request_once(port, "GET /" + std::string(1 << 20, 'a') + " HTTP/1.1\r\n\r\n")), 414);
  EXPECT_EQ(status_of(request_once(port, "GET /metrics HTTP/1.1\r\nX: " + std::string(8 << 20, 'a') +
                                         "\r\n\r\n")),
            431);
  EXPECT_EQ(status_of(request_once(port, "GET /metrics HTTP/1.1\r\nContent-Length: 1000000000000\r\n\r\n"
                                     "body")),
            413);
  const std::string post = request_once(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(status_of(post), 405);
  EXPECT_NE(post.find("\r\nAllow: GET, HEAD\r\n"), std::string::npos) << post;
  // No file system behind it.
  EXPECT_EQ(status_of(request_once(port, "GET /../../etc/passwd HTTP/1.1\r\n\r\n")), 404);
  EXPECT_EQ(status_of(request_once(port, "GET /metrics HTTP/9.9\r\n\r\n")), 505);
  const std::string ok = request_once(port, scrape_request());
  EXPECT_EQ(status_of(ok), 200);
  EXPECT_EQ(testing::body_of(ok), registry_.expose());
}

TEST_F(ServerLimitsTest, HeadGetsTheHeadersOnly) {
  MetricsServer server(registry_, 0, "127.0.0.1");
  const std::string head = request_once(server.port(), "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(status_of(head), 200);
  EXPECT_NE(head.find("Content-Length: " + std::to_string(registry_.expose().size()) + "\r\n"),
            std::string::npos) << head;
  EXPECT_EQ(testing::body_of(head), "");
}

TEST_F(ServerLimitsTest, KeepAliveAndPipelinedRequestsAreAnswered) {
  MetricsServer server(registry_, 0, "127.0.0.1");
  Fd c(connect_loopback(server.port()));
  ASSERT_GE(c.fd, 0);
  // Two requests in one write; the second asks to close.
  ASSERT_TRUE(send_all(c.fd, "GET /metrics HTTP/1.1\r\n\r\nGET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n"));
  bool closed = false;
  const std::string both = read_until_closed(c.fd, Clock::now() + 3s, &closed);
  EXPECT_TRUE(closed);
  const std::string body = registry_.expose();
  size_t answers = 0;
  for (size_t at = both.find("HTTP/1.1 200 OK"); at != std::string::npos;
       at = both.find("HTTP/1.1 200 OK", at + 1))
    ++answers;
  EXPECT_EQ(answers, 2u) << both;
  EXPECT_NE(both.find("Connection: keep-alive"), std::string::npos);
}

TEST_F(ServerLimitsTest, ASlowRequestIsClosedAtTheRequestTimeout) {
  ServerLimits limits;
  limits.request_timeout = 300ms;
  MetricsServer server(registry_, 0, "127.0.0.1", limits);
  Fd c(connect_loopback(server.port()));
  ASSERT_GE(c.fd, 0);
  const auto start = Clock::now();
  // A header line every 100 ms never completes the request.
  ASSERT_TRUE(send_all(c.fd, "GET /metrics HTTP/1.1\r\n"));
  bool closed = false;
  while (!closed && Clock::now() - start < 3s) {
    (void)read_until_closed(c.fd, Clock::now() + 100ms, &closed);
    if (!closed) (void)send_all(c.fd, "X-Drip: 1\r\n");
  }
  const auto lasted = Clock::now() - start;
  EXPECT_TRUE(closed);
  EXPECT_GE(lasted, 250ms);
  EXPECT_LT(lasted, 2s);
}

TEST_F(ServerLimitsTest, AnIdleKeptAliveConnectionIsClosedAtTheIdleTimeout) {
  ServerLimits limits;
  limits.idle_timeout = 300ms;
  MetricsServer server(registry_, 0, "127.0.0.1", limits);
  Fd c(connect_loopback(server.port()));
  ASSERT_TRUE(send_all(c.fd, "GET /metrics HTTP/1.1\r\n\r\n"));
  bool closed = false;
  const auto start = Clock::now();
  const std::string answer = read_until_closed(c.fd, start + 3s, &closed);
  EXPECT_EQ(status_of(answer), 200);
  EXPECT_TRUE(closed);
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST_F(ServerLimitsTest, AnAddressAtItsLimitLosesItsOldestIdleConnection) {
  ServerLimits limits;
  limits.max_connections_per_address = 4;
  MetricsServer server(registry_, 0, "127.0.0.1", limits);
  std::vector<Fd> idle;
  for (int i = 0; i < 4; ++i) idle.emplace_back(connect_loopback(server.port(), "127.0.0.2"));
  std::this_thread::sleep_for(200ms);  // older than the eviction grace
  // A fifth from the same address: the oldest goes, the new one is served.
  Fd fifth(connect_loopback(server.port(), "127.0.0.2"));
  ASSERT_TRUE(send_all(fifth.fd, scrape_request()));
  EXPECT_EQ(status_of(read_until_closed(fifth.fd, Clock::now() + 3s)), 200);
  EXPECT_TRUE(closed_within(idle[0].fd, 1s));
  // The other address was never limited.
  EXPECT_EQ(scrape_status(server.port(), "127.0.0.1"), 200);
}

TEST_F(ServerLimitsTest, AFullServerEvictsIdleSocketsForAScrape) {
  ServerLimits limits;
  limits.max_connections = 8;
  MetricsServer server(registry_, 0, "127.0.0.1", limits);
  std::vector<Fd> idle;
  for (int i = 0; i < 8; ++i) {
    const std::string source = "127.0.0." + std::to_string(2 + i % 3);
    idle.emplace_back(connect_loopback(server.port(), source.c_str()));
    ASSERT_GE(idle.back().fd, 0);
  }
  std::this_thread::sleep_for(200ms);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(scrape_status(server.port()), 200) << "scrape " << i;
  EXPECT_TRUE(closed_within(idle[0].fd, 1s));
}

TEST_F(ServerLimitsTest, WithNothingToEvictANewConnectionGets503) {
  ServerLimits limits;
  limits.max_connections = 2;
  MetricsServer server(registry_, 0, "127.0.0.1", limits);
  // Two connections younger than the eviction grace (100 ms) cannot be
  // evicted; a loaded machine may delay the third past it, so try a few times.
  int refused = 0;
  for (int attempt = 0; attempt < 5 && refused == 0; ++attempt) {
    Fd a(connect_loopback(server.port())), b(connect_loopback(server.port()));
    const std::string third = request_once(server.port(), scrape_request(), 1000ms);
    if (status_of(third) == 503) ++refused;
    else EXPECT_EQ(status_of(third), 200) << third;
  }
  EXPECT_EQ(refused, 1);
}

TEST_F(ServerLimitsTest, OneThreadWhateverTheLoad) {
  auto threads = [] {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
      while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
      ::closedir(d);
    }
    return n;
  };
  const int before = threads();
  MetricsServer server(registry_, 0, "127.0.0.1");
  std::vector<Fd> idle;
  for (int i = 0; i < 100; ++i) {
    const std::string source = "127.0.0." + std::to_string(2 + i % 4);
    idle.emplace_back(connect_loopback(server.port(), source.c_str()));
  }
  EXPECT_EQ(scrape_status(server.port()), 200);
  EXPECT_EQ(threads(), before + 1);
}

TEST_F(ServerLimitsTest, RejectsLimitsBelowOne) {
  ServerLimits zero_connections;
  zero_connections.max_connections = 0;
  EXPECT_THROW(MetricsServer(registry_, 0, "127.0.0.1", zero_connections), ValueError);
  ServerLimits zero_timeout;
  zero_timeout.request_timeout = 0ms;
  EXPECT_THROW(MetricsServer(registry_, 0, "127.0.0.1", zero_timeout), ValueError);
}

}  // namespace
}  // namespace ddp::metrics
