// Drives the built ddprun binary with small shell-script workers: the
// environment contract, output prefixing, exit statuses, stopping a failed
// group, restarts, signals and preemption, a two-node job on localhost, and
// bad arguments.
//
// The binary's path comes from the compile definition DDPRUN_PATH, or else
// from the environment variable DDPRUN_PATH; without either the tests skip.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "shell_util.h"

namespace {

using Clock = std::chrono::steady_clock;

std::string ddprun_path() {
#ifdef DDPRUN_PATH
  return DDPRUN_PATH;
#else
  const char* p = std::getenv("DDPRUN_PATH");
  return p ? p : "";
#endif
}

using Result = ddp::dist::test::ShellResult;
using ddp::dist::test::sh;

class DdprunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = ddprun_path();
    if (bin_.empty()) GTEST_SKIP() << "DDPRUN_PATH is not set";
  }
  // ddprun <args> /bin/sh -c '<script>'
  Result launch(const std::string& args, const std::string& script) {
    return sh(bin_ + " " + args + " /bin/sh -c '" + script + "'");
  }
  static bool has(const Result& r, const std::string& s) {
    return r.output.find(s) != std::string::npos;
  }

  std::string bin_;
};

// A port unlikely to collide with a parallel run of this suite.
int test_port() { return 20000 + int(::getpid() % 10000) * 4; }

TEST_F(DdprunTest, PrefixedLinesForEveryRank) {
  Result r = launch("--nproc-per-node 3", "echo $RANK $WORLD_SIZE $LOCAL_RANK");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: 0 3 0\n")) << r.output;
  EXPECT_TRUE(has(r, "[1]: 1 3 1\n")) << r.output;
  EXPECT_TRUE(has(r, "[2]: 2 3 2\n")) << r.output;
}

TEST_F(DdprunTest, EnvironmentContract) {
  Result r = launch("--nproc-per-node 2 --master-port 23456",
                    "echo $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $DDPRUN "
                    "$TORCHELASTIC_RESTART_COUNT $DDP_RESTART_COUNT");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[1]: 2 0 127.0.0.1 23456 1 0 0\n")) << r.output;
}

TEST_F(DdprunTest, PortZeroPicksAFreePort) {
  Result r = launch("--nproc-per-node 1 --master-port 0", "echo port=$MASTER_PORT");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: port=")) << r.output;
  EXPECT_FALSE(has(r, "port=0\n")) << r.output;
}

TEST_F(DdprunTest, StderrAndPartialLinesArePrefixed) {
  Result r = launch("--nproc-per-node 1", "echo oops >&2; printf \"no newline\"");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: oops\n")) << r.output;
  EXPECT_TRUE(has(r, "[0]: no newline\n")) << r.output;
}

TEST_F(DdprunTest, ExitStatusPropagates) {
  Result r = launch("--nproc-per-node 1", "exit 3");
  EXPECT_EQ(r.status, 3) << r.output;
  r = launch("--nproc-per-node 1", "kill -9 $$");
  EXPECT_EQ(r.status, 128 + 9) << r.output;
}

TEST_F(DdprunTest, FailureStopsSleepingSiblings) {
  Result r = launch("--nproc-per-node 3", "if [ $RANK = 1 ]; then exit 7; fi; sleep 30");
  EXPECT_EQ(r.status, 7) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
  EXPECT_TRUE(has(r, "rank 1")) << r.output;
}

TEST_F(DdprunTest, SiblingIgnoringSigtermIsKilledAfterGracePeriod) {
  Result r = launch("--nproc-per-node 2",
                    "if [ $RANK = 0 ]; then sleep 0.2; exit 5; fi; trap \"\" TERM; sleep 30");
  EXPECT_EQ(r.status, 5) << r.output;
  EXPECT_GT(r.seconds, 4.5) << r.output;
  EXPECT_LT(r.seconds, 9.0) << r.output;
}

TEST_F(DdprunTest, RestartRecoversFromAFirstAttemptFailure) {
  Result r = launch("--nproc-per-node 2 --max-restarts 1",
                    "if [ $DDP_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then exit 1; fi; "
                    "sleep 0.1; echo ok $TORCHELASTIC_RESTART_COUNT");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: ok 1\n")) << r.output;
  EXPECT_TRUE(has(r, "[1]: ok 1\n")) << r.output;
}

TEST_F(DdprunTest, RestartsRunOut) {
  Result r = launch("--nproc-per-node 1 --max-restarts 2", "echo try $DDP_RESTART_COUNT; exit 4");
  EXPECT_EQ(r.status, 4) << r.output;
  EXPECT_TRUE(has(r, "[0]: try 2\n")) << r.output;
  EXPECT_FALSE(has(r, "[0]: try 3\n")) << r.output;
}

TEST_F(DdprunTest, SigtermIsForwarded) {
  // The workers would sleep for 30 s; a SIGTERM to the launcher ends them.
  Result r = sh("(" + bin_ +
                " --nproc-per-node 2 /bin/sh -c 'sleep 30' & pid=$!; sleep 0.5; "
                "kill -TERM $pid; wait $pid; echo status=$?)");
  EXPECT_TRUE(has(r, "status=143")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

// Note [ddprun preemption]: `ddprun ARGS /bin/sh -c 'SCRIPT'`, sent `sig`
// half a second in; the launcher's exit status is printed as status=N.
Result preempted(const std::string& bin, const std::string& args, const std::string& script,
                 const std::string& sig) {
  return sh("(" + bin + " " + args + " /bin/sh -c '" + script + "' & pid=$!; sleep 0.5; kill -" +
            sig + " $pid; wait $pid; echo status=$?)");
}

TEST_F(DdprunTest, PreemptionWithWorkersThatSaveAndExitZeroIsExitZero) {
  for (const std::string sig : {"TERM", "USR1", "USR2"}) {
    Result r = preempted(
        bin_, "--nproc-per-node 2 --max-restarts 2",
        "trap \"sleep 0.3; echo saved $DDP_RESTART_COUNT; exit 0\" " + sig + "; sleep 30 & wait",
        sig);
    EXPECT_TRUE(has(r, "status=0\n")) << sig << "\n" << r.output;
    EXPECT_TRUE(has(r, "[0]: saved 0\n")) << sig << "\n" << r.output;
    EXPECT_TRUE(has(r, "[1]: saved 0\n")) << sig << "\n" << r.output;
    EXPECT_FALSE(has(r, "restarting")) << sig << "\n" << r.output;
    EXPECT_LT(r.seconds, 4.0) << sig << "\n" << r.output;
  }
}

TEST_F(DdprunTest, PreemptionWithAFailingWorkerIsNotCleanAndNotRestarted) {
  Result r = preempted(bin_, "--nproc-per-node 2 --max-restarts 2",
                       "trap \"exit $RANK\" TERM; sleep 30 & wait", "TERM");
  EXPECT_TRUE(has(r, "status=143\n")) << r.output;
  EXPECT_FALSE(has(r, "restarting")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, WorkerIgnoringPreemptionIsKilledAfterTheGrace) {
  Result r =
      preempted(bin_, "--nproc-per-node 2 --preempt-grace 1.5", "trap \"\" TERM; sleep 30", "TERM");
  EXPECT_TRUE(has(r, "status=143\n")) << r.output;
  EXPECT_GT(r.seconds, 1.9) << r.output;  // 0.5 s before the signal, then the grace
  EXPECT_LT(r.seconds, 5.0) << r.output;
}

TEST_F(DdprunTest, PreemptGraceReachesTheWorkers) {
  Result r = launch("--nproc-per-node 1 --preempt-grace 12.5", "echo grace=$DDP_PREEMPT_GRACE_S");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: grace=12.5\n")) << r.output;
  r = launch("--nproc-per-node 1", "echo grace=$DDP_PREEMPT_GRACE_S");
  EXPECT_TRUE(has(r, "[0]: grace=30\n")) << r.output;
}

TEST_F(DdprunTest, BadPreemptGraceExitsTwoNamingTheOption) {
  for (const char* value : {"-1", "soon"}) {
    Result r = sh(bin_ + " --nproc-per-node 1 --preempt-grace " + value + " /bin/true");
    EXPECT_EQ(r.status, 2) << value << "\n" << r.output;
    EXPECT_TRUE(has(r, "--preempt-grace")) << value << "\n" << r.output;
  }
}

TEST_F(DdprunTest, TwoNodesOnLocalhost) {
  const std::string port = std::to_string(test_port());
  const std::string common =
      " --nproc-per-node 2 --nnodes 2 --master-addr 127.0.0.1 --master-port " + port +
      " --rdzv-timeout 20 /bin/sh -c 'echo $RANK/$WORLD_SIZE node $GROUP_RANK'";
  // Options after the program belong to it, so the node rank goes first.
  Result r = sh("(" + bin_ + " --node-rank 0" + common + " & a=$!; " + bin_ + " --node-rank 1" +
                common + "; b=$?; wait $a; echo status=$?,$b)");
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  EXPECT_TRUE(has(r, "[0]: 0/4 node 0\n")) << r.output;
  EXPECT_TRUE(has(r, "[3]: 3/4 node 1\n")) << r.output;
}

TEST_F(DdprunTest, FailureOnOneNodeStopsTheOther) {
  const std::string port = std::to_string(test_port() + 2);
  const std::string common =
      " --nproc-per-node 1 --nnodes 2 --master-addr 127.0.0.1 --master-port " + port +
      " --rdzv-timeout 20 /bin/sh -c 'if [ $RANK = 1 ]; then exit 6; fi; sleep 30'";
  Result r = sh("(" + bin_ + " --node-rank 0" + common + " & a=$!; " + bin_ + " --node-rank 1" +
                common + "; b=$?; wait $a; echo status=$?,$b)");
  EXPECT_TRUE(has(r, "status=6,6")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, TwoNodesRestartTogether) {
  const std::string port = std::to_string(test_port() + 6);
  const std::string common =
      " --nproc-per-node 1 --nnodes 2 --max-restarts 1 --master-addr 127.0.0.1 "
      "--master-port " +
      port +
      " --rdzv-timeout 20 /bin/sh -c "
      "'if [ $RANK$DDP_RESTART_COUNT = 10 ]; then exit 6; fi; "
      "if [ $DDP_RESTART_COUNT = 0 ]; then sleep 30; fi; echo round $DDP_RESTART_COUNT'";
  Result r = sh("(" + bin_ + " --node-rank 0" + common + " & a=$!; " + bin_ + " --node-rank 1" +
                common + "; b=$?; wait $a; echo status=$?,$b)");
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  EXPECT_TRUE(has(r, "[0]: round 1\n")) << r.output;
  EXPECT_TRUE(has(r, "[1]: round 1\n")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, SigtermOnOneNodeStopsBoth) {
  const std::string port = std::to_string(test_port() + 8);
  const std::string common =
      " --nproc-per-node 1 --nnodes 2 --max-restarts 3 --master-addr 127.0.0.1 "
      "--master-port " +
      port + " --rdzv-timeout 20 /bin/sh -c 'sleep 30'";
  Result r =
      sh("(" + bin_ + " --node-rank 0" + common + " & a=$!; " + bin_ + " --node-rank 1" + common +
         " & b=$!; sleep 0.7; kill -TERM $b; wait $a; x=$?; wait $b; echo status=$x,$?)");
  EXPECT_TRUE(has(r, "status=143,143")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, RendezvousTimesOutClearly) {
  Result r = sh(
      bin_ + " --nproc-per-node 1 --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --master-port " +
      std::to_string(test_port() + 4) + " --rdzv-timeout 1 /bin/true");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_TRUE(has(r, "rendezvous")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, BadArgumentsExitTwo) {
  for (const char* args :
       {"", "--nproc-per-node", "--nproc-per-node 0 /bin/true", "--nproc-per-node x /bin/true",
        "--bogus 1 /bin/true", "--nproc-per-node 2", "--nproc-per-node 1 --nnodes 2 /bin/true",
        "--nproc-per-node 1 --nnodes 2 --node-rank 2 --master-port 1234 /bin/true",
        "--nproc-per-node 1 --rdzv-timeout -1 /bin/true"}) {
    Result r = sh(bin_ + " " + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_TRUE(has(r, "usage: ddprun")) << args << "\n" << r.output;
  }
}

TEST_F(DdprunTest, HelpPrintsUsage) {
  Result r = sh(bin_ + " --help");
  EXPECT_EQ(r.status, 0);
  EXPECT_TRUE(has(r, "usage: ddprun --nproc-per-node")) << r.output;
}

TEST_F(DdprunTest, MissingProgramFails) {
  Result r = sh(bin_ + " --nproc-per-node 1 /nonexistent/program");
  EXPECT_EQ(r.status, 127) << r.output;
}

}  // namespace
