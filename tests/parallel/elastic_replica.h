#pragma once
// Replicas of a small f64 job as threads, for the ElasticGroup tests
// (elastic_test.cpp, elastic_backend_test.cpp): a model, DDP on the elastic
// group, SGD with momentum and the state a joiner receives; one TCPStore
// that outlives them, as a launcher's would.

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <thread>

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

namespace ddp::test::elastic {

using namespace std::chrono_literals;
using Model = nn::Sequential;
using parallel::ElasticGroup;
using parallel::ElasticOptions;

inline constexpr double kLr = 0.05, kMomentum = 0.9;

// Threads share the default generator: one model at a time.
inline std::shared_ptr<Model> make_model(uint64_t seed, int hidden = 8) {
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
inline std::pair<Tensor, Tensor> batch(int64_t step, int rank, int world) {
  Generator gen(7000 + 100 * uint64_t(step) + 10 * uint64_t(world) + uint64_t(rank));
  Tensor x = randn({4, 5}, TensorOptions(DType::f64), &gen);
  Tensor y = randn({4, 3}, TensorOptions(DType::f64), &gen);
  return {x, y};
}

inline std::vector<double> flat(const Tensors& ts) {
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

inline ElasticOptions fast_options(const std::string& backend = "gloo") {
  ElasticOptions o;
  o.timeout = 10s;
  // Each heal waits this long for the lost replica; long enough that a
  // survivor slowed by a loaded machine is not left out.
  o.settle = 1s;
  o.join_timeout = 20s;
  o.backend = backend;
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
inline std::vector<std::string> on_threads(int n, const std::function<void(int)>& fn) {
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
inline std::vector<double> reference(const std::vector<int>& worlds, uint64_t seed) {
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

inline void expect_near(const std::vector<double>& a, const std::vector<double>& b, double tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], tol) << "element " << i;
}

}  // namespace ddp::test::elastic
