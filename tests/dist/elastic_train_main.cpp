// A fault-tolerant trainer for ddprun's elastic mode, end to end (driven by
// tests/dist/ddprun_test.cpp):
//
//   ddprun --nproc-per-node 2:3 --master-port 0 elastic_train_main STEPS VICTIM
//   ddprun --nnodes 1:2 ... elastic_train_main STEPS VICTIM GENERATION [launcher]
//
// Each worker joins the launcher's store (connect_store), builds an
// ElasticGroup from its launch environment (replica id = RANK, founders =
// WORLD_SIZE, DDP_ELASTIC_MIN/MAX, DDP_ELASTIC_TOKEN), prints "member of
// generation G size N" once it is in, and trains a small model with
// fault-tolerant DDP for STEPS steps; given GENERATION, also until the
// membership has reached that generation and run 5 steps in it, so that a
// test can wait for a node to join or leave without a sleep. (Steps and
// generations are the same on every member: all stop at one step.) The
// first worker of rank
// VICTIM SIGKILLs itself at its first step from step 3 on, or with
// "launcher" its launcher first (the whole node is lost): the survivors
// heal, and ddprun's replacement joins at a step boundary and receives the
// state from a peer. Every worker that finishes prints one line with its
// step, membership counts and a hash of its parameters' bits, which must be
// the same on every replica. Without gloo it prints "no gloo" and exits 0.

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ddp/config.h"
#include "ddp/core/error.h"
#include "ddp/dist/init.h"
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

using namespace ddp;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  if (argc < 3 || argc > 5) {
    std::fprintf(stderr, "usage: elastic_train_main STEPS VICTIM [GENERATION [launcher]]\n");
    return 2;
  }
#if !DDP_HAVE_GLOO
  std::printf("no gloo\n");
  return 0;
#else
  const int64_t steps = std::atoll(argv[1]);
  const int victim = std::atoi(argv[2]);
  const int64_t generation = argc > 3 ? std::atoll(argv[3]) : 0;
  const int64_t settle_steps = argc > 3 ? 5 : 0;  // in the last generation
  const bool kill_launcher = argc > 4 && std::strcmp(argv[4], "launcher") == 0;
  try {
    const dist::LaunchEnv env = dist::detect_launch_env();
    auto store = dist::connect_store(env, 30s);
    manual_seed(5);  // the founders agree anyway (rank 0's state is broadcast)
    auto model =
        std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule> >{
            std::make_shared<nn::Linear>(5, 8), std::make_shared<nn::GELU>(),
            std::make_shared<nn::Linear>(8, 3)});
    model->to(DType::f64);
    optim::SGD opt(model->parameters(), 0.05, optim::SGDOptions{.momentum = 0.9});
    io::Checkpoint state(false);
    state.add("model", model).add("optimizer", opt);
    parallel::ElasticOptions eo;
    eo.min_size = env.elastic_min;
    eo.max_size = env.elastic_max;
    eo.timeout = 10s;
    eo.settle = 300ms;
    eo.join_timeout = 20s;
    parallel::ElasticGroup elastic(store, env.rank, env.world_size, state, eo);
    parallel::DDPOptions d;
    d.fault_tolerant = true;
    parallel::DistributedDataParallel<nn::Sequential> ddp(model, elastic.group(), d);
    int64_t generation_began = elastic.step();
    elastic.on_change([&] {
      ddp.reset_group(elastic.group());
      generation_began = elastic.step();
    });
    std::printf("member of generation %lld size %d\n", (long long)elastic.generation(),
                elastic.size());
    std::fflush(stdout);
    while (elastic.step() < steps || elastic.generation() < generation ||
           elastic.step() < generation_began + settle_steps) {
      const int64_t s = elastic.step();
      if (env.rank == victim && env.restart_count == 0 && s >= 3) {
        if (kill_launcher) ::kill(::getppid(), SIGKILL);
        std::raise(SIGKILL);
      }
      elastic.run_step(
          [&] {
            Generator gen(1000 + 10 * uint64_t(s) + uint64_t(elastic.rank()));
            Tensor x = randn({4, 5}, TensorOptions(DType::f64), &gen);
            Tensor y = randn({4, 3}, TensorOptions(DType::f64), &gen);
            nn::functional::mse_loss(ddp(x), y).backward();
          },
          [&] {
            opt.step();
            opt.zero_grad();
          });
      std::this_thread::sleep_for(40ms);  // time for the replacement to join
    }
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over the parameters' bits
    for (const Tensor& p : model->parameters())
      for (double v : p.contiguous().to_vector<double>()) {
        uint64_t bits;
        std::memcpy(&bits, &v, sizeof(bits));
        for (int i = 0; i < 8; ++i) hash = (hash ^ ((bits >> (8 * i)) & 0xff)) * 1099511628211ull;
      }
    std::printf("done step %lld size %d heals %lld joins %lld restart %d hash %016llx\n",
                (long long)elastic.step(), elastic.size(), (long long)elastic.heals(),
                (long long)elastic.joins(), env.restart_count, (unsigned long long)hash);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_train_main: %s\n", e.what());
    return 1;
  }
#endif
}
