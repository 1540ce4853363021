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
#include "ddp/io/checkpoint.h"
#include "ddp/nn/activation.h"
#include "ddp/nn/container.h"
#include "ddp/nn/functional/loss.h"
#include "ddp/nn/linear.h"
#include "ddp/optim/sgd.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/elastic.h"
#include "ddp/tensor/generator.h"
#include "ddp/tensor/ops.h"
#include "dist/store_test_util.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace std::chrono_literals;
using Model = nn::Sequential;
using parallel::ElasticGroup;
using parallel::ElasticOptions;

namespace {

#if DDP_HAVE_GLOO

constexpr double kLr = 0.05, kMomentum = 0.9;

// Threads share the default generator: one model at a time.
std::shared_ptr<Model> make_model(uint64_t seed, int hidden = 8) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  manual_seed(seed);
  auto m = std::make_shared<Model>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(5, hidden), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(hidden, 3)});
  m->to(DType::f64);
  return m;
}

// The batch of the replica at `rank` of `world` in step `step`: a pure
// function of the three, so a reference can recompute it.
std::pair<Tensor, Tensor> batch(int64_t step, int rank, int world) {
  Generator gen(7000 + 100 * uint64_t(step) + 10 * uint64_t(world) + uint64_t(rank));
  Tensor x = randn({4, 5}, TensorOptions(DType::f64), &gen);
  Tensor y = randn({4, 3}, TensorOptions(DType::f64), &gen);
  return {x, y};
}

std::vector<double> flat(const Tensors& ts) {
  std::vector<double> out;
  for (const Tensor& t : ts) {
    std::vector<double> v = t.contiguous().to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

struct Store {
  std::shared_ptr<dist::TCPStore> server =
      std::make_shared<dist::TCPStore>(dist::test::server_options(30s));
  std::shared_ptr<dist::Store> client() {
    return std::make_shared<dist::TCPStore>(dist::test::client_options(server->port(), 30s));
  }
};

ElasticOptions fast_options() {
  ElasticOptions o;
  o.timeout = 10s;
  o.settle = 300ms;
  o.join_timeout = 20s;
  return o;
}

// One replica: model, DDP on the elastic group, SGD with momentum, and the
// state a joiner receives.
struct Replica {
  std::shared_ptr<Model> model;
  std::unique_ptr<optim::SGD> opt;
  io::Checkpoint state{false};
  std::unique_ptr<ElasticGroup> elastic;
  std::unique_ptr<parallel::DistributedDataParallel<Model>> ddp;

  Replica(std::shared_ptr<dist::Store> store, int id, int world, uint64_t seed,
          ElasticOptions options = fast_options(), int hidden = 8) {
    model = make_model(seed, hidden);
    opt = std::make_unique<optim::SGD>(model->parameters(), kLr,
                                       optim::SGDOptions{.momentum = kMomentum});
    state.add("model", model).add("optimizer", *opt);
    elastic = std::make_unique<ElasticGroup>(store, id, world, state, options);
    parallel::DDPOptions d;
    d.bucket_cap_mb = 0.0005;  // several buckets
    d.fault_tolerant = true;
    ddp = std::make_unique<parallel::DistributedDataParallel<Model>>(model, elastic->group(), d);
    elastic->on_change([this] { ddp->reset_group(elastic->group()); });
  }

  // One attempt at the job's next step; true when it was committed.
  bool step() {
    const int64_t s = elastic->step();
    return elastic->run_step(
        [&] {
          auto [x, y] = batch(s, elastic->rank(), elastic->size());
          nn::functional::mse_loss((*ddp)(x), y).backward();
        },
        [&] {
          opt->step();
          opt->zero_grad();
        });
  }

  std::vector<double> parameters() const { return flat(model->parameters()); }
  std::vector<double> momentum() const {
    Tensors bufs;
    for (const auto& [name, t] : opt->state_dict()) bufs.push_back(t);
    return flat(bufs);
  }
};

// Runs fn(i) on n threads; the errors by thread ("" for none).
std::vector<std::string> on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        fn(i);
      } catch (const std::exception& e) {
        errors[size_t(i)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

// A single process's run of the same job: per step, the average over the
// world of each replica's gradient (worlds[s] replicas in step s).
std::vector<double> reference(const std::vector<int>& worlds, uint64_t seed) {
  auto model = make_model(seed);
  optim::SGD opt(model->parameters(), kLr, optim::SGDOptions{.momentum = kMomentum});
  for (size_t s = 0; s < worlds.size(); ++s) {
    std::vector<std::vector<double>> grads;
    Tensors sum;
    for (int r = 0; r < worlds[s]; ++r) {
      opt.zero_grad();
      auto [x, y] = batch(int64_t(s), r, worlds[s]);
      nn::functional::mse_loss((*model)(x), y).backward();
      Tensors params = model->parameters();
      for (size_t k = 0; k < params.size(); ++k) {
        Tensor g = params[k].grad().clone();
        if (sum.size() <= k)
          sum.push_back(g);
        else
          sum[k] = sum[k] + g;
      }
    }
    Tensors params = model->parameters();
    for (size_t k = 0; k < params.size(); ++k) params[k].set_grad(sum[k] * (1.0 / worlds[s]));
    opt.step();
  }
  opt.zero_grad();
  return flat(model->parameters());
}

void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

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
      rep = std::make_unique<Replica>(store.client(), i, 2, 31);
      while (rep->elastic->step() < kSteps) {
        if (rep->elastic->step() == 2) ++founders_at_step2;
        rep->step();
        std::this_thread::sleep_for(30ms);  // time for the joiner to ask
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
  EXPECT_GE(joined_at[2], 3);
  EXPECT_LT(joined_at[2], kSteps);
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
  io::Checkpoint per_rank(false);
  per_rank.add_per_rank(
      "shards", [] { return TensorDict(); }, [](const io::Checkpoint::RankFiles&) {},
      [](const TensorDict&) {});
  EXPECT_THROW(ElasticGroup(store.client(), 0, 1, per_rank, fast_options()), NotImplementedError);
}

#endif  // DDP_HAVE_GLOO

}  // namespace
