// Tests of the rendezvous store (ddp/dist/store.h, tcp_store.h,
// prefix_store.h, rendezvous.h): the Store semantics over a real TCPStore
// on 127.0.0.1, concurrency, PrefixStore, store_barrier. The hostile-peer
// tests are in tcp_store_hostile_test.cpp.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/dist/prefix_store.h"
#include "ddp/dist/rendezvous.h"
#include "ddp/dist/tcp_store.h"
#include "dist/store_test_util.h"

namespace ddp::dist {
namespace {

using namespace std::chrono_literals;
using test::ms_since;
using test::server_options;
using ::testing::HasSubstr;
using ::testing::Not;

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = std::make_shared<TCPStore>(server_options()); }
  std::unique_ptr<TCPStore> client(std::chrono::milliseconds timeout = 5s) {
    return std::make_unique<TCPStore>(test::client_options(server_->port(), timeout));
  }
  // The tests run with neither variable set, whatever the caller's shell has.
  test::EnvGuard token_env_{"DDP_STORE_TOKEN"};
  test::EnvGuard timeout_env_{"DDP_STORE_TIMEOUT_S"};
  std::shared_ptr<TCPStore> server_;
};

TEST_F(StoreTest, ServerPicksAFreePort) {
  EXPECT_NE(server_->port(), 0);
  EXPECT_TRUE(server_->is_server());
  auto c = client();
  EXPECT_FALSE(c->is_server());
  EXPECT_EQ(c->port(), server_->port());
}

TEST_F(StoreTest, SetGetBytesAndStrings) {
  auto c = client();
  server_->set("k", Bytes{0, 1, 2, 255});
  EXPECT_EQ(c->get("k"), (Bytes{0, 1, 2, 255}));
  c->set("s", std::string("hello"));
  EXPECT_EQ(server_->get_string("s"), "hello");
  c->set("s", std::string("again"));  // overwrite
  EXPECT_EQ(c->get_string("s"), "again");
  c->set("empty", Bytes{});
  EXPECT_TRUE(c->check({"empty"}));
  EXPECT_TRUE(c->get("empty").empty());
}

TEST_F(StoreTest, LargeValueRoundTrips) {
  // Bigger than socket buffers: exercises partial sends and receives.
  Bytes big(8 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = uint8_t(i * 131 + 7);
  auto c = client();
  c->set("big", big);
  EXPECT_EQ(server_->get("big"), big);
}

TEST_F(StoreTest, AddCountsInDecimalText) {
  EXPECT_EQ(server_->add("n", 5), 5);  // a missing key counts as 0
  EXPECT_EQ(server_->add("n", -2), 3);
  EXPECT_EQ(server_->get_string("n"), "3");
  server_->set("n2", std::string("40"));
  EXPECT_EQ(server_->add("n2", 2), 42);
  EXPECT_EQ(server_->add("n2", 0), 42);
}

TEST_F(StoreTest, AddToNonIntegerRaisesAndConnectionSurvives) {
  server_->set("text", std::string("abc"));
  try {
    server_->add("text", 1);
    FAIL() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'text'"));
    EXPECT_THAT(e.what(), HasSubstr("not an integer"));
  }
  server_->set("max", std::to_string(INT64_MAX));
  EXPECT_THROW(server_->add("max", 1), ValueError);
  EXPECT_EQ(server_->add("fine", 1), 1);
}

TEST_F(StoreTest, CompareSet) {
  auto& s = *server_;
  // Missing key, empty expected: sets it.
  EXPECT_EQ(s.compare_set("c", std::string(""), std::string("one")), "one");
  EXPECT_EQ(s.get_string("c"), "one");
  // Mismatch: unchanged, returns the current value.
  EXPECT_EQ(s.compare_set("c", std::string("zzz"), std::string("two")), "one");
  EXPECT_EQ(s.get_string("c"), "one");
  // Match: swapped.
  EXPECT_EQ(s.compare_set("c", std::string("one"), std::string("two")), "two");
  EXPECT_EQ(s.get_string("c"), "two");
  // Missing key, non-empty expected: nothing stored, empty result.
  EXPECT_EQ(s.compare_set("absent", std::string("x"), std::string("y")), "");
  EXPECT_FALSE(s.check({"absent"}));
}

TEST_F(StoreTest, CheckDeleteNumKeys) {
  auto c = client();
  EXPECT_EQ(c->num_keys(), 0);
  EXPECT_TRUE(c->check({}));
  c->set("a", std::string("1"));
  c->set("b", std::string("2"));
  EXPECT_TRUE(c->check({"a"}));
  EXPECT_TRUE(c->check({"a", "b"}));
  EXPECT_FALSE(c->check({"a", "zz"}));
  EXPECT_EQ(c->num_keys(), 2);
  EXPECT_TRUE(c->delete_key("a"));
  EXPECT_FALSE(c->delete_key("a"));
  EXPECT_FALSE(c->check({"a"}));
  EXPECT_EQ(server_->num_keys(), 1);
}

TEST_F(StoreTest, EmptyKeyIsAKey) {
  EXPECT_THROW(server_->wait({""}, 50ms), TimeoutError);
  server_->set("", std::string("x"));
  EXPECT_EQ(server_->get_string(""), "x");
  EXPECT_TRUE(server_->delete_key(""));
}

TEST_F(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto setter = client();
  const auto start = std::chrono::steady_clock::now();
  std::thread t([&] {
    std::this_thread::sleep_for(200ms);
    setter->set("late", std::string("here"));
  });
  EXPECT_EQ(server_->get_string("late"), "here");
  EXPECT_GE(ms_since(start), 150);
  t.join();
}

TEST_F(StoreTest, WaitWakesForKeysCreatedByAddAndCompareSet) {
  auto other = client();
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    other->add("counter", 1);
    std::this_thread::sleep_for(50ms);
    other->compare_set("cas", std::string(""), std::string("v"));
  });
  server_->wait({"counter", "cas"});
  EXPECT_EQ(server_->get_string("cas"), "v");
  t.join();
}

TEST_F(StoreTest, WaitSurvivesAKeyDeletedWhileWaiting) {
  // The waiter moves between missing keys; a key deleted again must be
  // waited for again (see Note [Waiting requests]).
  auto other = client();
  std::thread t([&] {
    std::this_thread::sleep_for(100ms);
    other->set("a", std::string("1"));
    other->delete_key("a");
    other->set("b", std::string("1"));
    std::this_thread::sleep_for(200ms);
    other->set("a", std::string("2"));
  });
  const auto start = std::chrono::steady_clock::now();
  server_->wait({"a", "b"});
  EXPECT_GE(ms_since(start), 250);
  EXPECT_EQ(server_->get_string("a"), "2");
  t.join();
}

TEST_F(StoreTest, WaitTimeoutNamesMissingKeys) {
  server_->set("present", std::string("1"));
  const auto start = std::chrono::steady_clock::now();
  try {
    server_->wait({"present", "never"}, 300ms);
    FAIL() << "no exception";
  } catch (const TimeoutError& e) {
    const auto ms = ms_since(start);
    EXPECT_GE(ms, 290);
    EXPECT_LT(ms, 300 + test::kSlackMs);
    EXPECT_THAT(e.what(), HasSubstr("key 'never' still missing after 0."));
    EXPECT_THAT(e.what(), Not(HasSubstr("'present' still missing")));
    EXPECT_THAT(e.what(), HasSubstr(fmt::format("127.0.0.1:{}", server_->port())));
  }
  // The connection is still in step afterwards.
  EXPECT_EQ(server_->get_string("present"), "1");
}

TEST_F(StoreTest, GetTimeoutUsesStoreTimeout) {
  server_->set_timeout(250ms);
  EXPECT_EQ(server_->timeout(), 250ms);
  const auto start = std::chrono::steady_clock::now();
  try {
    server_->get("absent");
    FAIL() << "no exception";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("get('absent')"));
    EXPECT_THAT(e.what(), HasSubstr("key 'absent' still missing"));
  }
  EXPECT_LT(ms_since(start), 250 + test::kSlackMs);
  // Zero timeout: present keys are returned, missing ones fail at once.
  server_->set("here", std::string("x"));
  EXPECT_EQ(server_->get_string("here", 0ms), "x");
  EXPECT_THROW(server_->get("absent", 0ms), TimeoutError);
  EXPECT_NO_THROW(server_->wait({}, 0ms));
}

TEST_F(StoreTest, AWaitingClientDoesNotBlockOthers) {
  auto waiter = client();
  std::atomic<bool> got{false};
  std::thread t([&] {
    EXPECT_EQ(waiter->get_string("gate", 10s), "open");
    got = true;
  });
  std::this_thread::sleep_for(50ms);
  auto other = client();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 50; ++i) other->set("k" + std::to_string(i), std::to_string(i));
  EXPECT_EQ(other->get_string("k49"), "49");
  EXPECT_LT(ms_since(start), 2000);
  EXPECT_FALSE(got.load());
  other->set("gate", std::string("open"));
  t.join();
  EXPECT_TRUE(got.load());
}

TEST_F(StoreTest, SixteenClientsAddConcurrently) {
  constexpr int kThreads = 16, kAdds = 200;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&] {
      auto c = client(20s);
      for (int j = 0; j < kAdds; ++j) c->add("counter", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(server_->add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(server_->get_string("counter"), std::to_string(kThreads * kAdds));
}

TEST_F(StoreTest, OneClientSharedByThreads) {
  auto c = client(20s);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      for (int j = 0; j < 100; ++j) {
        c->add("shared", 1);
        const std::string key = fmt::format("t{}/{}", i, j);
        c->set(key, key);
        EXPECT_EQ(c->get_string(key), key);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(c->add("shared", 0), 800);
}

TEST_F(StoreTest, PrefixStoreIsolatesKeys) {
  auto a = std::make_shared<PrefixStore>("pg0", server_);
  PrefixStore b("pg1", server_);
  a->set("x", std::string("from a"));
  EXPECT_FALSE(b.check({"x"}));
  EXPECT_EQ(server_->get_string("pg0/x"), "from a");
  b.set("x", std::string("from b"));
  EXPECT_EQ(a->get_string("x"), "from a");
  EXPECT_EQ(b.get_string("x"), "from b");
  EXPECT_EQ(a->add("n", 3), 3);
  EXPECT_EQ(b.add("n", 1), 1);
  EXPECT_EQ(a->compare_set("x", std::string("from a"), std::string("a2")), "a2");
  EXPECT_TRUE(b.delete_key("x"));
  EXPECT_TRUE(a->check({"x", "n"}));
  EXPECT_EQ(b.num_keys(), server_->num_keys());  // whole store, as in torch
  // Nested prefixes compose.
  PrefixStore nested("sub", a);
  nested.set("y", std::string("deep"));
  EXPECT_EQ(server_->get_string("pg0/sub/y"), "deep");
  // The view has its own timeout, and errors name the full key.
  EXPECT_EQ(b.timeout(), server_->timeout());
  b.set_timeout(200ms);
  EXPECT_EQ(server_->timeout(), 5s);
  try {
    b.get("never");
    FAIL() << "no exception";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'pg1/never'"));
  }
  EXPECT_THROW(PrefixStore("p", nullptr), ValueError);
}

TEST_F(StoreTest, BarrierReleasesAllRanksTogetherRepeatedly) {
  constexpr int kWorld = 4, kRounds = 3;
  std::atomic<int> arrived{0};
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r)
    ranks.emplace_back([&, r] {
      auto c = client(10s);
      for (int round = 0; round < kRounds; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10 * r));
        arrived++;
        store_barrier(*c, "init", r, kWorld, 10s);
        // Nobody leaves round `round` before everyone entered it.
        EXPECT_GE(arrived.load(), kWorld * (round + 1));
      }
    });
  for (auto& t : ranks) t.join();
  EXPECT_EQ(arrived.load(), kWorld * kRounds);
}

TEST_F(StoreTest, BarrierTimeoutNamesMissingRanks) {
  constexpr int kWorld = 4;
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)  // ranks 2 and 3 never come
    ranks.emplace_back([&, r] {
      auto c = client();
      try {
        store_barrier(*c, "init", r, kWorld, 1000ms);
      } catch (const TimeoutError& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (const auto& e : errors)
    EXPECT_THAT(e, HasSubstr("ranks 2, 3 of 4 did not arrive at 'init' within 1.0 s"));

  // One rank absent: singular, and the others pass after it comes.
  std::string err;
  std::thread late([&] {
    try {
      store_barrier(*client(), "again", 1, 3, 300ms);
    } catch (const TimeoutError& e) {
      err = e.what();
    }
  });
  try {
    store_barrier(*server_, "again", 0, 3, 300ms);
  } catch (const TimeoutError&) {
  }
  late.join();
  EXPECT_THAT(err, HasSubstr("rank 2 of 3 did not arrive at 'again'"));
  EXPECT_THROW(store_barrier(*server_, "bad", 3, 3, 1s), ValueError);
  EXPECT_THROW(store_barrier(*server_, "", 0, 1, 1s), ValueError);
  EXPECT_NO_THROW(store_barrier(*server_, "solo", 0, 1, 1s));
}

TEST(StoreTimeout, DefaultAndEnvOverride) {
  test::EnvGuard guard("DDP_STORE_TIMEOUT_S");
  EXPECT_EQ(Store::default_timeout(), std::chrono::milliseconds(300'000));
  ::setenv("DDP_STORE_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(Store::default_timeout(), std::chrono::milliseconds(2500));
  ::setenv("DDP_STORE_TIMEOUT_S", "abc", 1);
  EXPECT_THROW(Store::default_timeout(), ValueError);
  ::setenv("DDP_STORE_TIMEOUT_S", "-1", 1);
  EXPECT_THROW(Store::default_timeout(), ValueError);
}

TEST(StoreWorldSize, ServerWaitsForWorkers) {
  test::EnvGuard guard("DDP_STORE_TOKEN");
  // Pick the port first so the clients know it before the server exists:
  // they retry until it comes up.
  const uint16_t port = test::free_port();
  auto opts = server_options(10s);
  opts.port = port;
  opts.world_size = 3;
  std::vector<std::thread> workers;
  std::atomic<int> done{0};
  for (int i = 0; i < 2; ++i)
    workers.emplace_back([&] {
      auto o = test::client_options(port, 10s);
      o.world_size = 3;
      TCPStore c(o);
      done++;
      c.get("shutdown");  // keep the connection until the server side is done
    });
  std::this_thread::sleep_for(100ms);  // the clients start before the server
  TCPStore server(opts);
  EXPECT_EQ(server.num_keys(), 0);  // the join counter is not a user key
  server.set("shutdown", std::string("1"));
  for (auto& t : workers) t.join();
  EXPECT_EQ(done.load(), 2);

  auto lonely = server_options(300ms);
  lonely.world_size = 2;
  try {
    TCPStore s(lonely);
    FAIL() << "no exception";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), HasSubstr("only 1 of 2 workers joined"));
  }
}

TEST(StoreServer, StandaloneServerStartStop) {
  test::EnvGuard guard("DDP_STORE_TOKEN");
  auto opts = server_options();
  TCPStoreServer server(opts);
  server.start();
  EXPECT_THROW(server.start(), ValueError);
  {
    TCPStore c(test::client_options(server.port(), 5s));
    c.set("a", std::string("b"));
    EXPECT_EQ(c.get_string("a"), "b");
    server.stop();
    server.stop();  // idempotent
    // The server is gone: the next request fails fast, it does not hang.
    const auto start = std::chrono::steady_clock::now();
    EXPECT_ANY_THROW(c.get_string("a"));
    EXPECT_LT(ms_since(start), 5000 + test::kSlackMs);
  }
}

}  // namespace
}  // namespace ddp::dist
