// MetricsServer: serves /metrics over HTTP, and a port in use is an error
// naming the port.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ddp/core/error.h"
#include "ddp/metrics/server.h"

namespace ddp::metrics {
namespace {

// A plain listening socket on 127.0.0.1 (port 0: the kernel picks), closed
// at the end of the test.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 4) != 0)
      ADD_FAILURE() << "cannot listen";
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

TEST(MetricsServer, ServesTheRegistryAtSlashMetrics) {
  Registry r(Labels{{"rank", "1"}});
  Counter& c = r.counter("steps_total", "Steps.").get();
  MetricsServer server(r, 0, "127.0.0.1");
  ASSERT_GT(server.port(), 0);
  EXPECT_EQ(server.host(), "127.0.0.1");
  httplib::Client client("127.0.0.1", server.port());
  auto res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), kTextContentType);
  EXPECT_EQ(res->body, "# HELP steps_total Steps.\n# TYPE steps_total counter\n"
                       "steps_total{rank=\"1\"} 0\n");
  c.inc(5);  // every scrape renders the current values
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_NE(res->body.find("steps_total{rank=\"1\"} 5\n"), std::string::npos) << res->body;
  res = client.Get("/other");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(MetricsServer, StopsListeningWhenDestroyed) {
  Registry r;
  int port = 0;
  {
    MetricsServer server(r, 0, "127.0.0.1");
    port = server.port();
  }
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  EXPECT_FALSE(client.Get("/metrics"));
  // ... and the port can be taken again at once.
  EXPECT_NO_THROW(MetricsServer(r, port, "127.0.0.1"));
}

TEST(MetricsServer, PortInUseIsAnErrorNamingThePort) {
  Registry r;
  Listener other;
  try {
    MetricsServer server(r, other.port(), "127.0.0.1");
    FAIL() << "expected IoError for port " << other.port();
  } catch (const IoError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(other.port())), std::string::npos) << msg;
    EXPECT_NE(msg.find("already in use"), std::string::npos) << msg;
  }
}

// cpp-httplib's default SO_REUSEPORT would let a second server share the
// port; See Note [Exclusive metrics port].
TEST(MetricsServer, SecondServerOnTheSamePortIsRefused) {
  Registry r;
  MetricsServer first(r, 0, "127.0.0.1");
  EXPECT_THROW(MetricsServer(r, first.port(), "127.0.0.1"), IoError);
}

TEST(MetricsServer, RejectsPortsOutOfRange) {
  Registry r;
  EXPECT_THROW(MetricsServer(r, -1), ValueError);
  EXPECT_THROW(MetricsServer(r, 65536), ValueError);
}

}  // namespace
}  // namespace ddp::metrics
