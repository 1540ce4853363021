// ElasticGroup (ddp/parallel/elastic.h): replicas as threads on gloo, one
// TCPStore that outlives them (as the launcher's would). A replica "dies" by
// leaving its loop and destroying its groups, which closes its connections
// as a killed process's would. Checked: no failure equals plain DDP bit for
// bit; after a loss the survivors go on with the gradients averaged over
// themselves (1e-12 of a single-process reference) and stay bit-identical;
// a joiner gets the whole state (parameters, momentum, step) from a peer;
// bad joiners and too few survivors are named.

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "ddp/config.h"
#include "parallel/elastic_replica.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace ddp::test::elastic;

namespace {

#if DDP_HAVE_GLOO

TEST(Elastic, WithoutFailuresItEqualsPlainDdp) {
  constexpr int kWorld = 3, kSteps = 5;
  Store store;
  std::vector<std::vector<double>> elastic_params(kWorld), plain_params(kWorld);
  auto errors = on_threads(kWorld, [&](int r) {
    Replica rep(store.client(), r, kWorld, 11);
    while (rep.elastic->step() < kSteps) ASSERT_TRUE(rep.step());
    elastic_params[size_t(r)] = rep.parameters();
    EXPECT_EQ(rep.elastic->heals(), 0);
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  Store store2;
  errors = on_threads(kWorld, [&](int r) {
    auto model = make_model(11);
    optim::SGD opt(model->parameters(), kLr, optim::SGDOptions{.momentum = kMomentum});
    auto group = dist::ProcessGroupGloo::create(store2.client(), r, kWorld);
    parallel::DDPOptions d;
    d.bucket_cap_mb = 0.0005;
    parallel::DistributedDataParallel<Model> ddp(model, group, d);
    for (int s = 0; s < kSteps; ++s) {
      auto [x, y] = batch(s, r, kWorld);
      nn::functional::mse_loss(ddp(x), y).backward();
      opt.step();
      opt.zero_grad();
    }
    plain_params[size_t(r)] = flat(model->parameters());
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(elastic_params[size_t(r)], plain_params[0]);
}

// Replica 2 dies before its forward of step 3; the others are then blocked
// in that step's allreduce, heal without it and redo step 3 at world 2.
TEST(Elastic, SurvivorsHealAndGoOnWithTheirAverage) {
  constexpr int kWorld = 3, kSteps = 6, kDiesAt = 3;
  Store store;
  std::vector<std::vector<double>> params(kWorld);
  std::vector<int64_t> heals(kWorld), generations(kWorld), sizes(kWorld);
  auto errors = on_threads(kWorld, [&](int r) {
    auto rep = std::make_unique<Replica>(store.client(), r, kWorld, 21);
    while (rep->elastic->step() < kSteps) {
      if (r == 2 && rep->elastic->step() == kDiesAt) {
        rep.reset();  // closes its connections, as a killed process's close
        return;
      }
      rep->step();
    }
    params[size_t(r)] = rep->parameters();
    heals[size_t(r)] = rep->elastic->heals();
    generations[size_t(r)] = rep->elastic->generation();
    sizes[size_t(r)] = rep->elastic->size();
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(heals[size_t(r)], 1);
    EXPECT_EQ(generations[size_t(r)], 1);
    EXPECT_EQ(sizes[size_t(r)], 2);
  }
  EXPECT_EQ(params[0], params[1]);  // the survivors are bit-identical
  std::vector<int> worlds = {3, 3, 3, 2, 2, 2};
  expect_near(params[0], reference(worlds, 21), 1e-12);
}

// Two founders train; a joiner with other initial weights is admitted at a
// step boundary and receives parameters, momentum and the step count.
TEST(Elastic, AJoinerReceivesTheStateFromAPeer) {
  constexpr int kSteps = 8;
  Store store;
  std::vector<std::vector<double>> params(3), momentum(3);
  std::vector<int64_t> joined_at(3, -1), sizes(3);
  std::atomic<int> founders_at_step2{0};
  auto errors = on_threads(3, [&](int i) {
    std::unique_ptr<Replica> rep;
    if (i < 2) {
      auto probe = store.client();
      rep = std::make_unique<Replica>(store.client(), i, 2, 31);
      while (rep->elastic->step() < kSteps) {
        if (rep->elastic->step() == 2) ++founders_at_step2;
        // Both founders wait before step 4 until the join request is
        // written, so that step 4's decider admits it whatever the load.
        if (rep->elastic->step() == 4)
          while (!probe->check({"ddp/elastic/join/0"})) std::this_thread::sleep_for(1ms);
        rep->step();
      }
    } else {
      while (founders_at_step2 < 2) std::this_thread::sleep_for(1ms);
      rep = std::make_unique<Replica>(store.client(), 9, 2, /*seed*/ 999);
      joined_at[2] = rep->elastic->step();
      while (rep->elastic->step() < kSteps) rep->step();
    }
    params[size_t(i)] = rep->parameters();
    momentum[size_t(i)] = rep->momentum();
    sizes[size_t(i)] = rep->elastic->size();
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  EXPECT_GE(joined_at[2], 3);  // asked once the founders reached step 2
  EXPECT_LE(joined_at[2], 5);  // admitted by step 4's commit at the latest
  for (int i = 0; i < 3; ++i) EXPECT_EQ(sizes[size_t(i)], 3);
  EXPECT_EQ(params[0], params[1]);
  EXPECT_EQ(params[0], params[2]);
  EXPECT_EQ(momentum[0], momentum[2]);
  EXPECT_FALSE(momentum[2].empty());
  std::vector<int> worlds;
  for (int s = 0; s < kSteps; ++s) worlds.push_back(s < joined_at[2] ? 2 : 3);
  expect_near(params[0], reference(worlds, 31), 1e-12);
}

// Refused joiners: another model (named, both shapes), another job's token, a
// state ahead of the job. The founders never notice.
TEST(Elastic, BadJoinersAreRefusedAndChangeNothing) {
  constexpr int kSteps = 30;
  Store store;
  std::atomic<bool> started{false}, joiners_done{false};
  std::vector<std::string> refusals;
  std::vector<std::vector<double>> params(2);
  auto errors = on_threads(3, [&](int i) {
    if (i < 2) {
      Replica rep(store.client(), i, 2, 41);
      started = true;
      while (rep.elastic->step() < kSteps || !joiners_done) {
        rep.step();
        std::this_thread::sleep_for(5ms);
      }
      params[size_t(i)] = rep.parameters();
      EXPECT_EQ(rep.elastic->size(), 2);
      return;
    }
    while (!started) std::this_thread::sleep_for(1ms);
    auto attempt = [&](int hidden, std::string token, int64_t resume) {
      ElasticOptions o = fast_options();
      o.job_token = std::move(token);
      o.resume_step = resume;
      try {
        Replica rep(store.client(), 5, 2, 1, o, hidden);
        refusals.push_back("admitted");
      } catch (const ValueError& e) {
        refusals.push_back(e.what());
      }
    };
    attempt(/*hidden*/ 6, "", -1);
    attempt(8, "another-job", -1);
    attempt(8, "", 1'000'000);
    joiners_done = true;
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  ASSERT_EQ(refusals.size(), 3u);
  EXPECT_NE(refusals[0].find("different model"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[0].find("[8,5]"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[0].find("[6,5]"), std::string::npos) << refusals[0];
  EXPECT_NE(refusals[1].find("token"), std::string::npos) << refusals[1];
  EXPECT_NE(refusals[2].find("ahead of the job"), std::string::npos) << refusals[2];
  EXPECT_EQ(params[0], params[1]);
}

// A founder that died after it was counted and before the job formed: its
// restarted process (the same replica id) takes its place, and the job
// forms with all three.
TEST(Elastic, ARestartedFounderTakesThePlaceOfTheOneThatDied) {
  Store store;
  store.client()->set("ddp/elastic/g0/candidates", "1:0");  // counted, then lost
  std::vector<int64_t> sizes(3), heals(3);
  std::vector<std::vector<double>> params(3);
  auto errors = on_threads(3, [&](int r) {
    Replica rep(store.client(), r, 3, 61);
    while (rep.elastic->step() < 3) rep.step();
    sizes[size_t(r)] = rep.elastic->size();
    heals[size_t(r)] = rep.elastic->heals();
    params[size_t(r)] = rep.parameters();
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(sizes[size_t(r)], 3);
    EXPECT_EQ(heals[size_t(r)], 0);
    EXPECT_EQ(params[size_t(r)], params[0]);
  }
}

TEST(Elastic, FewerSurvivorsThanMinSizeStopEveryRankNamingTheLost) {
  Store store;
  ElasticOptions o = fast_options();
  o.min_size = 2;
  auto errors = on_threads(2, [&](int r) {
    auto rep = std::make_unique<Replica>(store.client(), r, 2, 51, o);
    while (rep->elastic->step() < 5) {
      if (r == 1 && rep->elastic->step() == 2) return;  // dies
      rep->step();
    }
  });
  EXPECT_NE(errors[0].find("losing replica(s) 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("min_size 2"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");
}

TEST(Elastic, BadOptionsAreNamed) {
  Store store;
  io::Checkpoint state(false);
  ElasticOptions o = fast_options();
  o.min_size = 0;
  EXPECT_THROW(ElasticGroup(store.client(), 0, 1, state, o), ValueError);
  o = fast_options();
  o.max_size = 1;
  o.min_size = 2;
  EXPECT_THROW(ElasticGroup(store.client(), 0, 2, state, o), ValueError);
  EXPECT_THROW(ElasticGroup(store.client(), -1, 1, state, fast_options()), ValueError);
}

#endif  // DDP_HAVE_GLOO

}  // namespace
