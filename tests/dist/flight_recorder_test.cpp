// The flight recorder (Note [Flight recorder]), the tag scope, the desync
// report line (Note [Desync report]), the collective check's message (Note
// [Collective check mode]), the roll call's cost and its busy ranks (Note
// [Roll call cost]), and gloo's set_timeout. Multi-process desync runs are in
// tests/dist/collectives (pg_desync_main).

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>

#include "../../src/dist/collective_check.h"
#include "../../src/dist/desync_report.h"
#include "../../src/dist/roll_call.h"
#include "ddp/config.h"
#include "ddp/core/error.h"
#include "ddp/dist/flight_recorder.h"
#include "ddp/dist/process_group.h"
#include "store_test_util.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace ddp::dist;
using namespace ddp::dist::test;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(FlightRecorder, RingWrapsAroundKeepingTheNewest) {
  FlightRecorder r(3, 0, 2, "test");
  Tensor t = Tensor::zeros({2, 3});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r.record("allreduce", Tensors{t}), uint64_t(i + 1));
  auto es = r.entries();
  ASSERT_EQ(es.size(), 3u);
  EXPECT_EQ(es[0].seq, 3u);
  EXPECT_EQ(es[2].seq, 5u);
  EXPECT_EQ(es[2].numel, 6);
  ASSERT_EQ(es[2].shapes.size(), 1u);
  EXPECT_EQ(es[2].shapes[0], (Shape{2, 3}));
  EXPECT_EQ(es[2].state, CollectiveState::queued);
  // Reports about an overwritten entry are ignored, the live ones land.
  r.mark_finished(1, CollectiveState::failed, "late");
  r.mark_started(4);
  r.mark_finished(5, CollectiveState::completed);
  es = r.entries();
  EXPECT_EQ(es[1].state, CollectiveState::started);
  EXPECT_EQ(es[2].state, CollectiveState::completed);
  EXPECT_NE(es[2].ended, std::chrono::system_clock::time_point{});
  EXPECT_EQ(r.position(), "allreduce #3");
}

TEST(FlightRecorder, SizeZeroRecordsNothing) {
  FlightRecorder r(0, 1, 2, "test");
  EXPECT_FALSE(r.enabled());
  EXPECT_EQ(r.record("allreduce", Tensors{Tensor::zeros({4})}), 0u);
  r.mark_finished(0, CollectiveState::completed);
  EXPECT_TRUE(r.entries().empty());
  EXPECT_EQ(r.dump_to_file("x"), "");
  EXPECT_NE(r.dump_json().find("\"entries\":[]"), std::string::npos);
}

TEST(FlightRecorder, JsonHasEveryField) {
  FlightRecorder r(4, 2, 4, "gloo");
  {
    CollectiveTag tag("ddp bucket 1 of 2, iteration \"7\"");
    r.record("allreduce", Tensors{Tensor::zeros({4}), Tensor::zeros({2, 2}, DType::f32)});
  }
  r.record("barrier", Tensors{});
  r.mark_finished(1, CollectiveState::failed, "peer gone\nsecond line");
  const std::string j = r.dump_json("because");
  for (const char* want :
       {"{\"version\":1,\"rank\":2,\"size\":4,\"backend\":\"gloo\"", "\"reason\":\"because\"",
        "\"seq\":1,\"op\":\"allreduce\",\"dtype\":\"f32\",\"numel\":8,\"shapes\":[[4],[2,2]]",
        "\"tag\":\"ddp bucket 1 of 2, iteration \\\"7\\\"\"", "\"state\":\"failed\"",
        "\"error\":\"peer gone\"", "\"seq\":2,\"op\":\"barrier\"", "\"shapes\":[]",
        "\"state\":\"queued\"", "\"enqueued\":", "\"started\":", "\"ended\":"})
    EXPECT_NE(j.find(want), std::string::npos) << want << " not in " << j;
  EXPECT_EQ(j.back(), '\n');
  EXPECT_EQ(j.substr(j.size() - 4), "}]}\n");
}

TEST(FlightRecorder, DumpsToTheDirectoryOfTheEnvironment) {
  EnvGuard g("DDP_FLIGHT_RECORDER_DIR");
  const std::string dir = ::testing::TempDir();
  ::setenv("DDP_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
  FlightRecorder r(4, 0, 1, "test");
  r.record("broadcast", Tensors{Tensor::zeros({3})});
  const std::string path = r.dump_to_file("on purpose");
  ASSERT_EQ(path.rfind(dir, 0), 0u) << path;
  EXPECT_NE(slurp(path).find("\"reason\":\"on purpose\""), std::string::npos);
}

TEST(FlightRecorder, BadEnvironmentValuesNameTheVariable) {
  EnvGuard g("DDP_FLIGHT_RECORDER_SIZE");
  EXPECT_EQ(FlightRecorder::capacity_from_env(), 2000u);
  ::setenv("DDP_FLIGHT_RECORDER_SIZE", "0", 1);
  EXPECT_EQ(FlightRecorder::capacity_from_env(), 0u);
  for (const char* bad : {"abc", "-1", "12x", "99999999999"}) {
    ::setenv("DDP_FLIGHT_RECORDER_SIZE", bad, 1);
    try {
      FlightRecorder::capacity_from_env();
      ADD_FAILURE() << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("DDP_FLIGHT_RECORDER_SIZE"), std::string::npos);
    }
  }
  EnvGuard d("DDP_DEBUG");
  EXPECT_EQ(debug_level_from_env(), DebugLevel::off);
  ::setenv("DDP_DEBUG", "detail", 1);
  EXPECT_EQ(debug_level_from_env(), DebugLevel::detail);
  ::setenv("DDP_DEBUG", "verbose", 1);
  EXPECT_THROW(
      try { debug_level_from_env(); } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find("DDP_DEBUG='verbose'"), std::string::npos);
        throw;
      },
      ValueError);
}

// SIGUSR1 dumps every live recorder (the handler only writes to a pipe; a
// thread dumps).
TEST(FlightRecorder, Sigusr1DumpsEveryLiveRecorder) {
  struct sigaction current {};
  ASSERT_EQ(::sigaction(SIGUSR1, nullptr, &current), 0);
  install_sigusr1_dump();
  struct sigaction after {};
  ::sigaction(SIGUSR1, nullptr, &after);
  if (current.sa_handler != SIG_DFL && after.sa_handler == current.sa_handler)
    GTEST_SKIP() << "SIGUSR1 already has a handler in this process";
  EnvGuard g("DDP_FLIGHT_RECORDER_DIR");
  const std::string dir = ::testing::TempDir() + "sigusr1_" + std::to_string(::getpid());
  ASSERT_EQ(::system(("mkdir -p " + dir).c_str()), 0);
  ::setenv("DDP_FLIGHT_RECORDER_DIR", dir.c_str(), 1);
  FlightRecorder r(4, 3, 4, "sigtest");
  r.record("all_to_all", Tensors{Tensor::zeros({8})});
  ASSERT_EQ(::raise(SIGUSR1), 0);
  const std::string path =
      dir + "/ddp_flight_recorder_sigtest_rank3_" + std::to_string(::getpid()) + "_";
  std::string found;
  for (int i = 0; i < 200 && found.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int n = 0; n < 64 && found.empty(); ++n) {
      const std::string text = slurp(path + std::to_string(n) + ".json");
      if (text.find("\"reason\":\"SIGUSR1\"") != std::string::npos) found = text;
    }
  }
  EXPECT_NE(found.find("\"op\":\"all_to_all\""), std::string::npos) << "no dump under " << dir;
}

TEST(CollectiveTag, ScopesNestAndStayOnTheirThread) {
  EXPECT_EQ(CollectiveTag::current(), "");
  {
    CollectiveTag outer("outer");
    EXPECT_EQ(CollectiveTag::current(), "outer");
    {
      CollectiveTag inner("inner");
      EXPECT_EQ(CollectiveTag::current(), "inner");
      std::string other = std::async(std::launch::async, [] {
                            return CollectiveTag::current();
                          }).get();
      EXPECT_EQ(other, "");
    }
    EXPECT_EQ(CollectiveTag::current(), "outer");
  }
  EXPECT_EQ(CollectiveTag::current(), "");
}

// Work reports to its entry: completion, failure, a timed-out wait (whose
// error names the dump), and a Work completed before it was attached.
TEST(FlightRecorder, WorkReportsItsStateAndATimeoutNamesTheDump) {
  EnvGuard g("DDP_FLIGHT_RECORDER_DIR");
  ::setenv("DDP_FLIGHT_RECORDER_DIR", ::testing::TempDir().c_str(), 1);
  auto r = std::make_shared<FlightRecorder>(8, 0, 2, "test");
  auto ok = std::make_shared<Work>("allreduce");
  ok->attach_record(r, r->record("allreduce", Tensors{}));
  ok->mark_started();
  ok->mark_completed();
  auto bad = std::make_shared<Work>("broadcast");
  bad->mark_completed(std::make_exception_ptr(GlooError("boom")));
  bad->attach_record(r, r->record("broadcast", Tensors{}));
  auto stuck = std::make_shared<Work>("reduce");
  stuck->attach_record(r, r->record("reduce", Tensors{}));
  std::string what;
  try {
    stuck->wait(std::chrono::milliseconds(20));
  } catch (const TimeoutError& e) {
    what = e.what();
  }
  const auto es = r->entries();
  EXPECT_EQ(es[0].state, CollectiveState::completed);
  EXPECT_EQ(es[1].state, CollectiveState::failed);
  EXPECT_EQ(es[1].error, "boom");
  EXPECT_EQ(es[2].state, CollectiveState::timed_out);
  const auto at = what.find("flight recorder dumped to ");
  ASSERT_NE(at, std::string::npos) << what;
  const std::string path = what.substr(at + 26, what.find(')', at) - at - 26);
  EXPECT_NE(slurp(path).find("\"state\":\"timed out\""), std::string::npos) << path;
  stuck->mark_completed();  // late: stays "timed out"
  EXPECT_EQ(r->entries()[2].state, CollectiveState::timed_out);
}

TEST(CollectiveCheck, MismatchNamesEveryRankAndWhatItPassed) {
  const Tensors four{Tensor::zeros({4})}, five{Tensor::zeros({5})};
  const std::string a = ddp::dist::detail::describe_call("allreduce", "op=sum", four);
  const std::string b = ddp::dist::detail::describe_call("allreduce", "op=sum", five);
  EXPECT_EQ(a, "allreduce(op=sum; f32; [4])");
  EXPECT_EQ(ddp::dist::detail::decode_call(ddp::dist::detail::encode_call(a)), a);
  EXPECT_EQ(ddp::dist::detail::mismatch_message(3, {a, a, a}), "");
  EXPECT_EQ(ddp::dist::detail::mismatch_message(3, {a, b, a}),
            "collective #3 differs across ranks (DDP_DEBUG=detail): ranks 0, 2 passed "
            "allreduce(op=sum; f32; [4]); rank 1 passed allreduce(op=sum; f32; [5])");
  // Descriptions too long for the wire are cut, not overflowed.
  const std::string longer(1000, 'x');
  EXPECT_EQ(ddp::dist::detail::decode_call(ddp::dist::detail::encode_call(longer)).size(),
            ddp::dist::detail::kCallDescriptionBytes - 1);
}

TEST(DesyncReport, NamesWhoIsBehindAndWhere) {
  ddp::dist::detail::RollCall rc;
  rc.answered = {0, 2, 3};
  rc.missing = {1, 4};
  rc.busy = {1};
  rc.payloads = {{0, "allreduce #42 (ddp bucket 8 of 9, iteration 3)"},
                 {2, "allreduce #42 (ddp bucket 8 of 9, iteration 3)"},
                 {3, "barrier #42"},
                 {1, "allreduce #41 (ddp bucket 7 of 9, iteration 3) done, nothing issued since"}};
  EXPECT_EQ(ddp::dist::detail::desync_line(rc),
            "desync report: ranks 0, 2 wait in allreduce #42 (ddp bucket 8 of 9, iteration 3); "
            "rank 3 waits in barrier #42; rank 1 is alive but busy outside the roll call, at "
            "allreduce #41 (ddp bucket 7 of 9, iteration 3) done, nothing issued since; rank 4 "
            "is lost (no answer, no heartbeat)");
  EXPECT_EQ(ddp::dist::detail::describe_lost(rc, -1),
            "lost rank 4 (no answer to the roll call; ranks 0, 2, 3 answered)");
}

// Counts the requests every rank's store makes (Note [Roll call cost]).
class CountingStore : public Store {
 public:
  CountingStore(std::shared_ptr<Store> inner, std::atomic<int64_t>& count)
      : Store(inner->timeout()), inner_(std::move(inner)), count_(count) {}

 protected:
  void do_set(const std::string& k, const Bytes& v) override { ++count_, inner_->set(k, v); }
  Bytes do_get(const std::string& k, std::chrono::milliseconds t) override {
    return ++count_, inner_->get(k, t);
  }
  int64_t do_add(const std::string& k, int64_t d) override { return ++count_, inner_->add(k, d); }
  Bytes do_compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    return ++count_, inner_->compare_set(k, e, d);
  }
  bool do_check(const std::vector<std::string>& k) override { return ++count_, inner_->check(k); }
  void do_wait(const std::vector<std::string>& k, std::chrono::milliseconds t) override {
    ++count_, inner_->wait(k, t);
  }
  bool do_delete_key(const std::string& k) override { return ++count_, inner_->delete_key(k); }
  int64_t do_num_keys() override { return ++count_, inner_->num_keys(); }

 private:
  std::shared_ptr<Store> inner_;
  std::atomic<int64_t>& count_;
};

ddp::dist::detail::RollCall roll_call_of(std::shared_ptr<Store> store, int rank, int size,
                              std::chrono::milliseconds grace) {
  return ddp::dist::detail::roll_call(*store, "rc", rank, size, grace, rank == 0,
                           "position of " + std::to_string(rank), "hb");
}

TEST(RollCall, CostsLinearlyManyStoreRequests) {
  auto server = std::make_shared<TCPStore>(server_options(std::chrono::seconds(20)));
  constexpr int kSize = 8;
  std::atomic<int64_t> count{0};
  std::vector<std::future<ddp::dist::detail::RollCall>> fs;
  for (int r = 0; r < kSize; ++r) {
    std::shared_ptr<Store> inner =
        r == 0 ? std::shared_ptr<Store>(server)
               : std::make_shared<TCPStore>(client_options(server->port(), std::chrono::seconds(20)));
    fs.push_back(std::async(std::launch::async, [inner, r, &count] {
      return roll_call_of(std::make_shared<CountingStore>(inner, count), r, kSize,
                          std::chrono::seconds(10));
    }));
  }
  for (auto& f : fs) {
    auto rc = f.get();
    EXPECT_EQ(rc.answered.size(), size_t(kSize));
    EXPECT_TRUE(rc.missing.empty());
    EXPECT_EQ(rc.payloads.at(5), "position of 5");
  }
  // Each rank: an append (compare_set, retried when another rank appended
  // in between: at most kSize tries), polls of one key while others are
  // still coming, the done counter. Checking every other rank's key, as
  // before, costs kSize * kSize requests per round on its own.
  RecordProperty("store_requests", int(count.load()));
  EXPECT_LT(count.load(), int64_t(kSize) * 40) << count.load() << " requests";
}

TEST(RollCall, ABusyRankWithAHeartbeatIsNotLost) {
  auto server = std::make_shared<TCPStore>(server_options(std::chrono::seconds(20)));
  auto busy_store =
      std::make_shared<TCPStore>(client_options(server->port(), std::chrono::seconds(20)));
  // Rank 1 is alive (its heartbeat runs) but never takes the roll call;
  // rank 2 is gone.
  ddp::dist::detail::Heartbeat hb(busy_store, "hb", 1, std::chrono::milliseconds(200),
                       [] { return std::string("allreduce #3 done, nothing issued since"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto rc = roll_call_of(server, 0, 3, std::chrono::milliseconds(300));
  EXPECT_EQ(rc.answered, (std::vector<int>{0}));
  EXPECT_EQ(rc.busy, (std::vector<int>{1}));
  EXPECT_EQ(rc.payloads.at(1), "allreduce #3 done, nothing issued since");
  EXPECT_EQ(ddp::dist::detail::describe_lost(rc, -1),
            "lost rank 2 (no answer to the roll call; ranks 0 answered)");
  EXPECT_NE(ddp::dist::detail::desync_line(rc).find("rank 1 is alive but busy"), std::string::npos);
}

#if DDP_HAVE_GLOO
// set_timeout() reaches gloo's collectives, not only its creation-time value.
TEST(GlooTimeout, SetTimeoutReachesTheCollectives) {
  auto server = std::make_shared<TCPStore>(server_options(std::chrono::seconds(60)));
  auto client = std::make_shared<TCPStore>(client_options(server->port(), std::chrono::seconds(60)));
  GlooOptions o;
  o.timeout = std::chrono::seconds(60);
  o.roll_call_grace = std::chrono::milliseconds(300);
  auto f1 = std::async(std::launch::async, [&] { return ProcessGroupGloo::create(client, 1, 2, o); });
  auto pg0 = ProcessGroupGloo::create(server, 0, 2, o);
  auto pg1 = f1.get();
  pg0->set_timeout(std::chrono::milliseconds(500));
  EXPECT_EQ(pg0->timeout(), std::chrono::milliseconds(500));
  // Rank 1 stays busy: rank 0 times out after 0.5 s, not 60 s, and its error
  // carries the desync report.
  const auto t0 = std::chrono::steady_clock::now();
  std::string what;
  try {
    pg0->allreduce({Tensor::ones({4})})->wait();
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_LT(ms_since(t0), 500 + 300 + 2600 + kSlackMs) << what;
  EXPECT_NE(what.find("desync report: rank 0 waits in allreduce #1"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 1 is alive but busy"), std::string::npos) << what;
  EXPECT_EQ(pg0->flight_recorder().entries().at(0).state, CollectiveState::failed);
  pg1.reset();
  pg0.reset();
}
#endif

}  // namespace
