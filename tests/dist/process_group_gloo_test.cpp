// ProcessGroupGloo in one process: a world of one, ranks as threads, the
// connect timeout, bad addresses; and init_process_group's choices. The
// multi-process runs are tests/dist/collectives (ddprun, 2-4 ranks).

#include <gtest/gtest.h>

#include <signal.h>

#include <future>
#include <thread>

#include "ddp/config.h"
#include "ddp/dist/init.h"
#include "ddp/tensor/cuda.h"
#include "store_test_util.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace ddp::dist;
using namespace ddp::dist::test;

namespace {

constexpr std::chrono::milliseconds kWait{60'000};

#if DDP_HAVE_GLOO

std::shared_ptr<TCPStore> server_store() {
  return std::make_shared<TCPStore>(server_options(std::chrono::seconds(20)));
}

TEST(GlooWorldOfOne, CollectivesAreLocal) {
  auto pg = ProcessGroupGloo::create(server_store(), 0, 1);
  EXPECT_EQ(pg->backend_name(), "gloo");
  Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3});
  pg->allreduce({t}, ReduceOp::avg)->wait(kWait);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor out = Tensor::zeros({3});
  pg->allgather({out}, t)->wait(kWait);
  EXPECT_EQ(out.to_vector<float>(), t.to_vector<float>());
  Tensor rs = Tensor::zeros({3});
  pg->reduce_scatter(rs, {t})->wait(kWait);
  EXPECT_EQ(rs.to_vector<float>(), t.to_vector<float>());
  Tensor a2a = Tensor::zeros({3});
  pg->all_to_all(a2a, t)->wait(kWait);
  EXPECT_EQ(a2a.to_vector<float>(), t.to_vector<float>());
  pg->barrier()->wait(kWait);
  pg->broadcast({t})->wait(kWait);
  EXPECT_THROW(pg->send(t, 0), ValueError);  // to itself
}

// Note [Tensor version counter]: every tensor a collective writes counts a
// write (whatever the backend: the check is in ProcessGroup); its inputs
// count none.
TEST(GlooWorldOfOne, CollectivesCountAWriteToWhatTheyWrite) {
  auto pg = ProcessGroupGloo::create(server_store(), 0, 1);
  Tensor t = Tensor::from_vector<float>({1, 2, 3}, {3});
  auto expect_written = [](const Tensor& x, uint64_t before, const char* op) {
    EXPECT_EQ(x.version(), before + 1) << op;
  };
  uint64_t v = t.version();
  pg->allreduce({t})->wait(kWait);
  expect_written(t, v, "allreduce");
  v = t.version();
  pg->broadcast({t})->wait(kWait);
  expect_written(t, v, "broadcast");
  Tensor out = Tensor::zeros({3});
  uint64_t vo = out.version();
  v = t.version();
  pg->allgather({out}, t)->wait(kWait);
  expect_written(out, vo, "allgather");
  EXPECT_EQ(t.version(), v) << "allgather's input is only read";
  Tensor rs = Tensor::zeros({3});
  vo = rs.version();
  pg->reduce_scatter(rs, {t})->wait(kWait);
  expect_written(rs, vo, "reduce_scatter");
  EXPECT_EQ(t.version(), v) << "reduce_scatter's inputs are only read";
  Tensor a2a = Tensor::zeros({3});
  vo = a2a.version();
  pg->all_to_all(a2a, t)->wait(kWait);
  expect_written(a2a, vo, "all_to_all");
  EXPECT_EQ(t.version(), v) << "all_to_all's input is only read";
  // A refused call counts nothing.
  vo = out.version();
  EXPECT_THROW(pg->allgather({out, out}, t), ShapeError);
  EXPECT_EQ(out.version(), vo);
}

TEST(GlooThreads, TwoRanksInOneProcess) {
  auto server = server_store();
  auto client = std::make_shared<TCPStore>(client_options(server->port(), std::chrono::seconds(20)));
  auto run = [](std::shared_ptr<Store> store, int rank) {
    auto pg = ProcessGroupGloo::create(store, rank, 2);
    Tensor t = Tensor::full({1000}, double(rank + 1));
    pg->allreduce({t})->wait(kWait);
    Tensor h = Tensor::full({5}, double(rank), TensorOptions(DType::f16));
    pg->allreduce({h}, ReduceOp::max)->wait(kWait);
    Tensor msg = Tensor::full({4}, 7.0);
    if (rank == 0) pg->send(msg, 1, 5)->wait(kWait);
    else pg->recv(msg.zero_(), 0, 5)->wait(kWait);
    return std::make_tuple(t.to_vector<float>()[999], h.to_vector<float>()[0],
                           msg.to_vector<float>()[3]);
  };
  auto f0 = std::async(std::launch::async, run, server, 0);
  auto f1 = std::async(std::launch::async, run, client, 1);
  for (auto* f : {&f0, &f1}) {
    auto [sum, mx, got] = f->get();
    EXPECT_EQ(sum, 3.0f);
    EXPECT_EQ(mx, 1.0f);
    EXPECT_EQ(got, 7.0f);
  }
}

// Note [SIGPIPE]: a group of two or more ranks makes a write to a dead peer
// an error instead of a kill, but leaves an application's own handler alone.
void two_ranks_in_threads() {
  auto server = server_store();
  auto client = std::make_shared<TCPStore>(client_options(server->port(), std::chrono::seconds(20)));
  auto f1 = std::async(std::launch::async, [&] { return ProcessGroupGloo::create(client, 1, 2); });
  auto pg0 = ProcessGroupGloo::create(server, 0, 2);
  auto pg1 = f1.get();
}

void on_sigpipe(int) {}

TEST(GlooCreate, IgnoresSigpipeOnlyWhenAtItsDefault) {
  struct sigaction dfl {}, old {}, now {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ASSERT_EQ(::sigaction(SIGPIPE, &dfl, &old), 0);
  two_ranks_in_threads();
  ::sigaction(SIGPIPE, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_IGN);

  struct sigaction mine {};
  mine.sa_handler = on_sigpipe;
  sigemptyset(&mine.sa_mask);
  ::sigaction(SIGPIPE, &mine, nullptr);
  two_ranks_in_threads();
  ::sigaction(SIGPIPE, nullptr, &now);
  EXPECT_EQ(now.sa_handler, &on_sigpipe);
  ::sigaction(SIGPIPE, &old, nullptr);
}

TEST(GlooCreate, ARankThatNeverComesTimesOutNamingIt) {
  GlooOptions o;
  o.timeout = std::chrono::milliseconds(800);
  auto t0 = std::chrono::steady_clock::now();
  try {
    ProcessGroupGloo::create(server_store(), 0, 3, o);
    FAIL() << "connected to ranks that do not exist";
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    // Gloo waits for each rank's address key: the missing ranks are named.
    EXPECT_NE(msg.find('1'), std::string::npos) << msg;
  }
  EXPECT_LT(ms_since(t0), 800 + kSlackMs);
}

TEST(GlooCreate, BadArgumentsAndAddresses) {
  auto store = server_store();
  EXPECT_THROW(ProcessGroupGloo::create(nullptr, 0, 1), ValueError);
  EXPECT_THROW(ProcessGroupGloo::create(store, 2, 2), ValueError);
  EXPECT_THROW(ProcessGroupGloo::create(store, -1, 2), ValueError);
  GlooOptions o;
  o.iface = "no-such-if0";
  try {
    ProcessGroupGloo::create(store, 0, 2, o);
    FAIL() << "bound a missing interface";
  } catch (const GlooError& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-if0"), std::string::npos) << e.what();
  }
}

#endif  // DDP_HAVE_GLOO

// init_process_group without any launcher variables: a job of one.
class InitTest : public ::testing::Test {
  EnvGuard g1_{"RANK"}, g2_{"WORLD_SIZE"}, g3_{"OMPI_COMM_WORLD_RANK"}, g4_{"OMPI_COMM_WORLD_SIZE"},
      g5_{"SLURM_PROCID"}, g6_{"SLURM_NTASKS"}, g7_{"MASTER_ADDR"}, g8_{"MASTER_PORT"},
      g9_{"LOCAL_RANK"}, g10_{"LOCAL_WORLD_SIZE"};
};

TEST_F(InitTest, SingleProcessGetsAGroupOfOne) {
  if (!DDP_HAVE_GLOO) GTEST_SKIP() << "built without gloo";
  InitOptions o;
  o.device = Device::cpu();
  World w = init_process_group(o);
  EXPECT_EQ(w.rank(), 0);
  EXPECT_EQ(w.size(), 1);
  EXPECT_EQ(w.group->backend_name(), "gloo");
  EXPECT_EQ(w.env.launcher, "single");
  ASSERT_TRUE(w.store);
  Tensor t = Tensor::ones({4});
  w.group->allreduce({t})->wait(kWait);
  EXPECT_EQ(t.to_vector<float>()[0], 1.0f);
}

TEST_F(InitTest, ExplicitRankAndWorldSize) {
  if (!DDP_HAVE_GLOO) GTEST_SKIP() << "built without gloo";
  InitOptions o;
  o.backend = "gloo";
  o.rank = 0;
  o.world_size = 1;
  World w = init_process_group(o);
  EXPECT_EQ(w.env.launcher, "explicit");
  EXPECT_EQ(w.device, Device::cpu());
}

TEST_F(InitTest, BadOptionsRaise) {
  InitOptions o;
  o.backend = "carrier-pigeon";
  try {
    init_process_group(o);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("carrier-pigeon"), std::string::npos);
  }
  o = {};
  o.rank = 1;  // without world_size
  EXPECT_THROW(init_process_group(o), ValueError);
  o = {};
  o.rank = 3;
  o.world_size = 2;
  EXPECT_THROW(init_process_group(o), ValueError);
  o = {};
  o.backend = "nccl";
  o.device = Device::cpu();
  EXPECT_THROW(init_process_group(o), ValueError);  // nccl needs CUDA (or is not built)
  o = {};
  o.backend = "gloo";
  o.rank = 1;
  o.world_size = 2;  // no MASTER_ADDR for the store
  if (DDP_HAVE_GLOO) {
    try {
      init_process_group(o);
      FAIL();
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
    }
  }
  o = {};
  o.backend = "mpi";
  if (DDP_HAVE_MPI) EXPECT_THROW(init_process_group(o), ValueError);  // not under mpirun
  o = {};
  o.device = Device::cuda(0);
  if (!cuda::is_available()) EXPECT_THROW(init_process_group(o), DeviceError);
}

TEST(InitBackends, ListsWhatThisBuildHas) {
  auto b = available_backends();
  EXPECT_EQ(std::find(b.begin(), b.end(), "gloo") != b.end(), bool(DDP_HAVE_GLOO));
  EXPECT_EQ(std::find(b.begin(), b.end(), "mpi") != b.end(), bool(DDP_HAVE_MPI));
  EXPECT_EQ(std::find(b.begin(), b.end(), "nccl") != b.end(), bool(DDP_HAVE_NCCL));
}

}  // namespace
