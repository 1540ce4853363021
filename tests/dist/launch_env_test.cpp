// detect_launch_env over each launcher's variables, their precedence, Slurm
// node lists, and the bad values that must raise ValueError; ddprun's elastic
// variables and connect_store under the launcher's store.

#include "ddp/dist/launch_env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "ddp/core/error.h"
#include "ddp/dist/init.h"
#include "ddp/dist/tcp_store.h"

namespace ddp::dist {
namespace {

// Every variable detect_launch_env reads. Each test starts with all of them
// unset (the suite may itself run under mpirun or srun) and gets the
// originals back when it ends.
const char* const kVars[] = {"RANK",
                             "WORLD_SIZE",
                             "LOCAL_RANK",
                             "LOCAL_WORLD_SIZE",
                             "GROUP_RANK",
                             "NODE_RANK",
                             "MASTER_ADDR",
                             "MASTER_PORT",
                             "TORCHELASTIC_RESTART_COUNT",
                             "DDP_RESTART_COUNT",
                             "DDPRUN",
                             "TORCHELASTIC_USE_AGENT_STORE",
                             "DDP_ELASTIC",
                             "DDP_ELASTIC_MIN",
                             "DDP_ELASTIC_MAX",
                             "DDP_ELASTIC_TOKEN",
                             "OMPI_COMM_WORLD_RANK",
                             "OMPI_COMM_WORLD_SIZE",
                             "OMPI_COMM_WORLD_LOCAL_RANK",
                             "OMPI_COMM_WORLD_LOCAL_SIZE",
                             "SLURM_PROCID",
                             "SLURM_NTASKS",
                             "SLURM_NPROCS",
                             "SLURM_LOCALID",
                             "SLURM_NTASKS_PER_NODE",
                             "SLURM_TASKS_PER_NODE",
                             "SLURM_NNODES",
                             "SLURM_JOB_NUM_NODES",
                             "SLURM_NODEID",
                             "SLURM_NODELIST",
                             "SLURM_STEP_NODELIST",
                             "SLURM_JOB_NODELIST"};

class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved_[v] = old ? std::optional<std::string>(old) : std::nullopt;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const auto& [k, v] : saved_) {
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
    }
  }
  static void set(const char* k, const std::string& v) { ::setenv(k, v.c_str(), 1); }

  void torchrun(int rank, int world, int local, int local_world) {
    set("RANK", std::to_string(rank));
    set("WORLD_SIZE", std::to_string(world));
    set("LOCAL_RANK", std::to_string(local));
    set("LOCAL_WORLD_SIZE", std::to_string(local_world));
  }

  // The message of the ValueError detect_launch_env raises.
  static std::string error_of_detect() {
    try {
      detect_launch_env();
    } catch (const ValueError& e) {
      return e.what();
    }
    ADD_FAILURE() << "detect_launch_env did not raise ValueError";
    return {};
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(LaunchEnvTest, SingleProcessWithoutLauncher) {
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.launcher, "single");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.node_rank, 0);
  EXPECT_EQ(e.master_addr, "");
  EXPECT_EQ(e.master_port, 0);
  EXPECT_EQ(e.restart_count, 0);
}

TEST_F(LaunchEnvTest, Torchrun) {
  torchrun(5, 8, 1, 4);
  set("GROUP_RANK", "1");
  set("MASTER_ADDR", "node0");
  set("MASTER_PORT", "29500");
  set("TORCHELASTIC_RESTART_COUNT", "2");
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.launcher, "torchrun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "node0");
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.restart_count, 2);
}

TEST_F(LaunchEnvTest, DdprunAndItsRestartCount) {
  torchrun(2, 4, 2, 4);
  set("DDPRUN", "1");
  set("DDP_RESTART_COUNT", "3");
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.launcher, "ddprun");
  EXPECT_EQ(e.restart_count, 3);
  // Without GROUP_RANK the node follows from the ranks.
  EXPECT_EQ(e.node_rank, 0);
}

TEST_F(LaunchEnvTest, TorchrunWithOnlyRankAndWorldSizeIsOneNode) {
  set("RANK", "3");
  set("WORLD_SIZE", "4");
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.local_rank, 3);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 0);
}

TEST_F(LaunchEnvTest, TorchrunNodeRankDerivedFromRanks) {
  torchrun(6, 8, 2, 4);
  EXPECT_EQ(detect_launch_env().node_rank, 1);
}

TEST_F(LaunchEnvTest, OpenMpi) {
  set("OMPI_COMM_WORLD_RANK", "3");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.launcher, "mpirun");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "");
  EXPECT_EQ(e.master_port, 0);
  set("MASTER_ADDR", "head");
  set("MASTER_PORT", "1234");
  e = detect_launch_env();
  EXPECT_EQ(e.master_addr, "head");
  EXPECT_EQ(e.master_port, 1234);
}

TEST_F(LaunchEnvTest, Slurm) {
  set("SLURM_PROCID", "5");
  set("SLURM_NTASKS", "8");
  set("SLURM_LOCALID", "1");
  set("SLURM_NTASKS_PER_NODE", "4");
  set("SLURM_NODEID", "1");
  set("SLURM_NODELIST", "gpu[07-08]");
  LaunchEnv e = detect_launch_env();
  EXPECT_EQ(e.launcher, "srun");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.node_rank, 1);
  EXPECT_EQ(e.master_addr, "gpu07");
  EXPECT_EQ(e.master_port, 0);
}

TEST_F(LaunchEnvTest, SlurmLocalWorldSizeFromTasksPerNode) {
  set("SLURM_PROCID", "6");
  set("SLURM_NTASKS", "7");
  set("SLURM_LOCALID", "0");
  set("SLURM_NODEID", "3");
  set("SLURM_TASKS_PER_NODE", "2(x3),1");
  EXPECT_EQ(detect_launch_env().local_world_size, 1);
  set("SLURM_NODEID", "2");
  EXPECT_EQ(detect_launch_env().local_world_size, 2);
  set("SLURM_TASKS_PER_NODE", "2(x3");
  EXPECT_NE(error_of_detect().find("SLURM_TASKS_PER_NODE"), std::string::npos);
}

TEST_F(LaunchEnvTest, SlurmLocalWorldSizeFromNodeCount) {
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "8");
  set("SLURM_NNODES", "2");
  EXPECT_EQ(detect_launch_env().local_world_size, 4);
}

TEST_F(LaunchEnvTest, SlurmMasterAddrOverride) {
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "1");
  set("SLURM_NODELIST", "a,b");
  set("MASTER_ADDR", "elsewhere");
  EXPECT_EQ(detect_launch_env().master_addr, "elsewhere");
}

TEST_F(LaunchEnvTest, PrecedenceTorchrunOverMpiOverSlurm) {
  set("SLURM_PROCID", "1");
  set("SLURM_NTASKS", "2");
  EXPECT_EQ(detect_launch_env().launcher, "srun");
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "3");
  EXPECT_EQ(detect_launch_env().launcher, "mpirun");
  EXPECT_EQ(detect_launch_env().world_size, 3);
  torchrun(1, 6, 1, 6);
  EXPECT_EQ(detect_launch_env().launcher, "torchrun");
  EXPECT_EQ(detect_launch_env().world_size, 6);
}

TEST_F(LaunchEnvTest, NodelistExpansion) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("node[01-03,07],gpu5"),
            (V{"node01", "node02", "node03", "node07", "gpu5"}));
  EXPECT_EQ(expand_slurm_nodelist("single"), V{"single"});
  EXPECT_EQ(expand_slurm_nodelist(""), V{});
  EXPECT_EQ(expand_slurm_nodelist("n[8-10]"), (V{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("n[08-10]"), (V{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("a[1-2]-ib,b[3]"), (V{"a1-ib", "a2-ib", "b3"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]n[1-2]"), (V{"r1n1", "r1n2", "r2n1", "r2n2"}));
}

TEST_F(LaunchEnvTest, NodelistMalformed) {
  for (const char* bad :
       {"node[01-03", "node]1", "node[3-1]", "node[a-b]", "node[]", "a,,b", "n[1-2-3]"})
    EXPECT_THROW(expand_slurm_nodelist(bad), ValueError) << bad;
}

TEST_F(LaunchEnvTest, RankNotBelowWorldSize) {
  torchrun(4, 4, 0, 4);
  std::string msg = error_of_detect();
  EXPECT_NE(msg.find("RANK"), std::string::npos) << msg;
  EXPECT_NE(msg.find("WORLD_SIZE"), std::string::npos) << msg;
}

TEST_F(LaunchEnvTest, NonNumberNamesTheVariable) {
  torchrun(0, 2, 0, 2);
  set("LOCAL_RANK", "one");
  EXPECT_NE(error_of_detect().find("LOCAL_RANK"), std::string::npos);
  set("LOCAL_RANK", "0");
  set("MASTER_PORT", "http");
  EXPECT_NE(error_of_detect().find("MASTER_PORT"), std::string::npos);
  set("MASTER_PORT", "70000");
  EXPECT_NE(error_of_detect().find("MASTER_PORT"), std::string::npos);
}

TEST_F(LaunchEnvTest, NegativeValues) {
  torchrun(-1, 2, 0, 2);
  EXPECT_NE(error_of_detect().find("RANK"), std::string::npos);
  torchrun(0, 0, 0, 1);
  EXPECT_NE(error_of_detect().find("WORLD_SIZE"), std::string::npos);
  torchrun(0, 2, 0, 2);
  set("GROUP_RANK", "-2");
  EXPECT_NE(error_of_detect().find("GROUP_RANK"), std::string::npos);
}

TEST_F(LaunchEnvTest, MissingHalfOfTorchrun) {
  set("RANK", "0");
  EXPECT_NE(error_of_detect().find("WORLD_SIZE"), std::string::npos);
}

TEST_F(LaunchEnvTest, LocalValuesInconsistent) {
  torchrun(0, 4, 2, 2);
  EXPECT_NE(error_of_detect().find("LOCAL_RANK"), std::string::npos);
  torchrun(0, 4, 0, 8);
  EXPECT_NE(error_of_detect().find("LOCAL_WORLD_SIZE"), std::string::npos);
}

TEST_F(LaunchEnvTest, BadMpiAndSlurmNameTheirVariables) {
  set("OMPI_COMM_WORLD_RANK", "2");
  set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_NE(error_of_detect().find("OMPI_COMM_WORLD_RANK"), std::string::npos);
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
  set("SLURM_PROCID", "0");
  EXPECT_NE(error_of_detect().find("SLURM_NTASKS"), std::string::npos);
  set("SLURM_NTASKS", "x");
  EXPECT_NE(error_of_detect().find("SLURM_NTASKS"), std::string::npos);
}

TEST_F(LaunchEnvTest, ElasticFromDdprun) {
  // What ddprun --nproc-per-node 2:3 hands slot 1 (Note [ddprun elastic]).
  torchrun(1, 3, 1, 3);
  set("DDPRUN", "1");
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  set("DDP_ELASTIC", "1");
  set("DDP_ELASTIC_MIN", "2");
  set("DDP_ELASTIC_MAX", "3");
  set("DDP_ELASTIC_TOKEN", "0123abcd");
  LaunchEnv e = detect_launch_env();
  EXPECT_TRUE(e.agent_store);
  EXPECT_TRUE(e.elastic);
  EXPECT_EQ(e.elastic_min, 2);
  EXPECT_EQ(e.elastic_max, 3);
  EXPECT_EQ(e.elastic_token, "0123abcd");
  // Not elastic: the job needs all of its ranks; torchrun's "False".
  set("DDP_ELASTIC", "0");
  set("TORCHELASTIC_USE_AGENT_STORE", "False");
  e = detect_launch_env();
  EXPECT_FALSE(e.agent_store);
  EXPECT_FALSE(e.elastic);
  EXPECT_EQ(e.elastic_min, 3);
  EXPECT_EQ(e.elastic_max, 3);
  EXPECT_EQ(e.elastic_token, "");
  EXPECT_EQ(LaunchEnv().elastic_min, 1);
}

TEST_F(LaunchEnvTest, BadElasticVariablesNameThemselves) {
  torchrun(0, 3, 0, 3);
  set("TORCHELASTIC_USE_AGENT_STORE", "maybe");
  EXPECT_NE(error_of_detect().find("TORCHELASTIC_USE_AGENT_STORE"), std::string::npos);
  set("TORCHELASTIC_USE_AGENT_STORE", "true");
  set("DDP_ELASTIC", "1");
  set("DDP_ELASTIC_MIN", "4");
  set("DDP_ELASTIC_MAX", "3");
  EXPECT_NE(error_of_detect().find("DDP_ELASTIC_MIN=4"), std::string::npos);
  set("DDP_ELASTIC_MIN", "0");
  EXPECT_NE(error_of_detect().find("DDP_ELASTIC_MIN"), std::string::npos);
  set("DDP_ELASTIC_MIN", "1");
  set("DDP_ELASTIC_MAX", "2");
  EXPECT_NE(error_of_detect().find("DDP_ELASTIC_MAX=2"), std::string::npos);  // below WORLD_SIZE
}

TEST_F(LaunchEnvTest, AgentStoreMakesRankZeroAClient) {
  // The launcher's store (ddprun's elastic mode): rank 0 must not try to host
  // one itself, and what it writes reaches the launcher's server.
  TCPStoreOptions so;
  so.bind_address = "127.0.0.1";
  TCPStoreServer server(so);
  server.start();
  torchrun(0, 2, 0, 2);
  set("MASTER_ADDR", "127.0.0.1");
  set("MASTER_PORT", std::to_string(server.port()));
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  auto store = connect_store(detect_launch_env(), std::chrono::milliseconds(5000));
  auto* tcp = dynamic_cast<TCPStore*>(store.get());
  ASSERT_NE(tcp, nullptr);
  EXPECT_FALSE(tcp->is_server());
  store->set("from_rank0", std::string("hello"));
  so.port = server.port();
  TCPStore other(so);
  EXPECT_EQ(other.get_string("from_rank0"), "hello");
  store.reset();  // a client's end leaves the launcher's store up
  EXPECT_EQ(other.get_string("from_rank0"), "hello");
}

TEST_F(LaunchEnvTest, SelectLocalDevice) {
  LaunchEnv e;
  e.local_rank = 5;
  EXPECT_EQ(select_local_device(e, 8), 5);
  EXPECT_EQ(select_local_device(e, 2), 1);
  EXPECT_EQ(select_local_device(e, 1), 0);
  EXPECT_THROW(select_local_device(e, 0), ValueError);
}

}  // namespace
}  // namespace ddp::dist
