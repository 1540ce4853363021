// Hostile and broken peers against the TCPStore server (See Note [Hostile
// peers] in src/dist/tcp_store_server.cpp): each must lose only its own
// connection while the server and the well-behaved clients carry on. Also
// the job token and clients that find no server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "ddp/core/error.h"
#include "ddp/dist/tcp_store.h"
#include "dist/store_test_util.h"

namespace ddp::dist {
namespace {

using namespace std::chrono_literals;
using test::Msg;
using test::RawPeer;
using ::testing::HasSubstr;

class HostileTest : public ::testing::Test {
 protected:
  void start(const std::string& token = "") {
    auto o = test::server_options();
    o.token = token;
    server_ = std::make_unique<TCPStore>(o);
  }
  // A well-behaved client still gets full service.
  void expect_server_healthy() {
    auto o = test::client_options(server_->port(), 5s);
    o.token = token_;
    TCPStore c(o);
    c.set("health", std::string("ok"));
    EXPECT_EQ(c.get_string("health"), "ok");
    EXPECT_EQ(server_->get_string("health"), "ok");
  }
  test::EnvGuard token_env_{"DDP_STORE_TOKEN"};
  std::string token_;
  std::unique_ptr<TCPStore> server_;
};

TEST_F(HostileTest, OversizedLengthBeforeHelloIsDropped) {
  start();
  RawPeer p(server_->port());
  ASSERT_TRUE(p.connected());
  ASSERT_TRUE(p.send(std::vector<uint8_t>{0xFF, 0xFF, 0xFF, 0xFF}));
  EXPECT_TRUE(p.closed_by_server());
  expect_server_healthy();
}

TEST_F(HostileTest, OversizedLengthAfterHelloIsDropped) {
  auto o = test::server_options();
  o.max_message_bytes = 4096;
  server_ = std::make_unique<TCPStore>(o);
  RawPeer p(server_->port());
  ASSERT_TRUE(p.send(test::hello()));
  auto r = p.reply();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ((*r)[0], 0);  // OK
  // Just over the limit: rejected from the header alone, no payload sent.
  ASSERT_TRUE(p.send(std::vector<uint8_t>{0x01, 0x10, 0x00, 0x00}));
  EXPECT_TRUE(p.closed_by_server());
  expect_server_healthy();
  // A client refuses to send what the server would refuse to read.
  auto co = test::client_options(server_->port(), 5s);
  co.max_message_bytes = 4096;
  TCPStore c(co);
  EXPECT_THROW(c.set("big", Bytes(8192)), ValueError);
  c.set("small", Bytes(100));  // and the connection is unharmed
  EXPECT_EQ(c.get("small").size(), 100u);
}

TEST_F(HostileTest, GarbageIsDropped) {
  start();
  {
    RawPeer http(server_->port());
    ASSERT_TRUE(http.send(std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n")));
    EXPECT_TRUE(http.closed_by_server());
  }
  {
    RawPeer no_hello(server_->port());  // a valid SET, but no HELLO first
    ASSERT_TRUE(no_hello.send(Msg().u8(test::kSet).str("k").str("v").frame()));
    EXPECT_TRUE(no_hello.closed_by_server());
  }
  {
    RawPeer zero(server_->port());  // an empty frame
    ASSERT_TRUE(zero.send(std::vector<uint8_t>{0, 0, 0, 0}));
    EXPECT_TRUE(zero.closed_by_server());
  }
  {
    RawPeer unknown(server_->port());
    ASSERT_TRUE(unknown.send(test::hello()));
    ASSERT_TRUE(unknown.reply().has_value());
    ASSERT_TRUE(unknown.send(Msg().u8(0x7F).str("k").frame()));
    EXPECT_TRUE(unknown.closed_by_server());
  }
  {
    // A field length running past the end of its frame.
    RawPeer truncated(server_->port());
    ASSERT_TRUE(truncated.send(test::hello()));
    ASSERT_TRUE(truncated.reply().has_value());
    ASSERT_TRUE(truncated.send(Msg().u8(test::kSet).u32(1000).frame()));
    EXPECT_TRUE(truncated.closed_by_server());
  }
  {
    // Bytes left over after the last field.
    RawPeer trailing(server_->port());
    ASSERT_TRUE(trailing.send(test::hello()));
    ASSERT_TRUE(trailing.reply().has_value());
    ASSERT_TRUE(trailing.send(Msg().u8(test::kSet).str("k").str("v").u8(0).frame()));
    EXPECT_TRUE(trailing.closed_by_server());
  }
  {
    RawPeer twice(server_->port());  // a second HELLO
    ASSERT_TRUE(twice.send(test::hello()));
    ASSERT_TRUE(twice.reply().has_value());
    ASSERT_TRUE(twice.send(test::hello()));
    EXPECT_TRUE(twice.closed_by_server());
  }
  EXPECT_FALSE(server_->check({"k"}));  // none of them stored anything
  expect_server_healthy();
}

TEST_F(HostileTest, DisconnectMidMessage) {
  start();
  {
    RawPeer p(server_->port());
    ASSERT_TRUE(p.send(test::hello()));
    ASSERT_TRUE(p.reply().has_value());
    auto frame = Msg().u8(test::kSet).str("half").str(std::string(100, 'x')).frame();
    frame.resize(frame.size() / 2);
    ASSERT_TRUE(p.send(frame));
  }  // closed here, mid-message
  {
    RawPeer p(server_->port());
    ASSERT_TRUE(p.send(std::vector<uint8_t>{0x10, 0x00}));  // half a length prefix
  }
  expect_server_healthy();
  EXPECT_FALSE(server_->check({"half"}));
}

TEST_F(HostileTest, WaiterThatDisconnectsIsForgotten) {
  start();
  {
    RawPeer p(server_->port());
    ASSERT_TRUE(p.send(test::hello()));
    ASSERT_TRUE(p.reply().has_value());
    ASSERT_TRUE(p.send(Msg().u8(test::kGet).str("later").i64(60'000).frame()));
    std::this_thread::sleep_for(100ms);  // parked on the server now
  }
  std::this_thread::sleep_for(100ms);
  // Creating the key must not try to answer the departed client.
  server_->set("later", std::string("v"));
  expect_server_healthy();
}

TEST_F(HostileTest, PipelinedRequestsAreServedInOrder) {
  start();
  RawPeer p(server_->port());
  auto bytes = test::hello();
  for (const auto& f : {Msg().u8(test::kSet).str("p").str("1").frame(),
                        Msg().u8(test::kGet).str("p").i64(1000).frame(),
                        // Parks, times out after 200 ms, then the SET behind it runs.
                        Msg().u8(test::kGet).str("q").i64(200).frame(),
                        Msg().u8(test::kSet).str("q").str("2").frame()})
    bytes.insert(bytes.end(), f.begin(), f.end());
  ASSERT_TRUE(p.send(bytes));
  auto ok = p.reply();
  ASSERT_TRUE(ok && (*ok)[0] == 0);  // HELLO
  ok = p.reply();
  ASSERT_TRUE(ok && (*ok)[0] == 0);  // SET
  auto got = p.reply();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (std::vector<uint8_t>{0, 1, 0, 0, 0, '1'}));  // OK, bytes "1"
  auto timeout = p.reply();
  ASSERT_TRUE(timeout.has_value());
  EXPECT_EQ((*timeout)[0], 2);  // TIMEOUT, listing 'q'
  ok = p.reply();
  ASSERT_TRUE(ok && (*ok)[0] == 0);
  EXPECT_EQ(server_->get_string("q"), "2");
}

TEST_F(HostileTest, TokenIsRequired) {
  token_ = "s3cret";
  start(token_);
  {
    RawPeer wrong(server_->port());
    ASSERT_TRUE(wrong.send(test::hello("guess")));
    EXPECT_TRUE(wrong.closed_by_server());
  }
  {
    RawPeer none(server_->port());
    ASSERT_TRUE(none.send(test::hello()));
    EXPECT_TRUE(none.closed_by_server());
  }
  {
    RawPeer right(server_->port());
    ASSERT_TRUE(right.send(test::hello(token_)));
    auto r = right.reply();
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ((*r)[0], 0);
  }
  auto o = test::client_options(server_->port(), 2s);
  o.token = "guess";
  try {
    TCPStore c(o);
    FAIL() << "no exception";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("wrong job token"));
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", server_->port())));
  }
  expect_server_healthy();
}

TEST_F(HostileTest, TokenFromEnvironment) {
  ::setenv("DDP_STORE_TOKEN", "from-env", 1);
  start();      // the server reads it
  token_ = "";  // the client too
  expect_server_healthy();
  RawPeer none(server_->port());
  ASSERT_TRUE(none.send(test::hello()));
  EXPECT_TRUE(none.closed_by_server());
}

TEST_F(HostileTest, SilentPeerIsDroppedAfterTheTimeout) {
  auto o = test::server_options(300ms);
  server_ = std::make_unique<TCPStore>(o);
  RawPeer silent(server_->port());
  ASSERT_TRUE(silent.connected());
  EXPECT_TRUE(silent.closed_by_server(300 + test::kSlackMs));
  expect_server_healthy();
}

TEST(NoServer, ConnectFailsWithinTheTimeout) {
  test::EnvGuard guard("DDP_STORE_TOKEN");
  const uint16_t port = test::free_port();
  ASSERT_NE(port, 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    TCPStore c(test::client_options(port, 500ms));
    FAIL() << "no exception";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", port)));
    EXPECT_THAT(e.what(), HasSubstr("could not connect"));
  }
  EXPECT_LT(test::ms_since(start), 500 + test::kSlackMs);
  EXPECT_THROW(TCPStore(test::client_options(0, 500ms)), ValueError);  // a client needs a port
}

TEST(NoServer, BindConflictRaisesIoError) {
  test::EnvGuard guard("DDP_STORE_TOKEN");
  TCPStore first(test::server_options());
  auto o = test::server_options();
  o.port = first.port();
  try {
    TCPStore second(o);
    FAIL() << "no exception";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", first.port())));
  }
}

}  // namespace
}  // namespace ddp::dist
