// Drives the built ddprun binary with small shell-script workers: the
// environment contract, output prefixing, exit statuses, stopping a failed
// group, restarts, signals and preemption, a two-node job on localhost, bad
// arguments, and the elastic mode (Note [ddprun elastic]) on one node and
// across two (several launchers on 127.0.0.1), whose store and end-to-end
// tests start elastic_store_main / elastic_train_main
// (ELASTIC_STORE_MAIN_PATH, ELASTIC_TRAIN_MAIN_PATH) as the workers.
//
// The binary's path comes from the compile definition DDPRUN_PATH, or else
// from the environment variable DDPRUN_PATH; without either the tests skip.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

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
// Two consecutive TCP ports free on this machine right now: a multi-node
// ddprun takes MASTER_PORT for the workers' store and MASTER_PORT + 1 for
// its rendezvous. Both are bound (to loopback) before either is released,
// so the pair was free together. Ports the kernel hands out, not ports
// derived from the pid: ctest -j2 runs these tests in processes with
// neighbouring pids, and derived ranges overlapped between them.
int free_port_pair() {
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int a = ::socket(AF_INET, SOCK_STREAM, 0), b = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    int port = 0;
    if (a >= 0 && b >= 0 && ::bind(a, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(a, reinterpret_cast<sockaddr*>(&addr), &len) == 0 &&
        ntohs(addr.sin_port) < 65535) {
      port = ntohs(addr.sin_port);
      sockaddr_in next = addr;
      next.sin_port = htons(uint16_t(port + 1));
      if (::bind(b, reinterpret_cast<sockaddr*>(&next), sizeof(next)) != 0) port = 0;
    }
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
    if (port != 0) return port;
  }
  ADD_FAILURE() << "no two consecutive free TCP ports";
  return 0;
}

// `ddprun --node-rank K ARGS` for K = 0 and 1 on localhost, started
// together; the output ends with "status=S0,S1". Options after the program
// belong to it, so the node rank goes first.
Result two_nodes(const std::string& bin, const std::string& args) {
  return sh("(" + bin + " --node-rank 0 " + args + " & a=$!; " + bin + " --node-rank 1 " + args +
            "; b=$?; wait $a; echo status=$?,$b)");
}

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
  const std::string port = std::to_string(free_port_pair());
  Result r = two_nodes(
      bin_, "--nproc-per-node 2 --nnodes 2 --master-addr 127.0.0.1 --master-port " + port +
                " --rdzv-timeout 20 /bin/sh -c 'echo $RANK/$WORLD_SIZE node "
                "$GROUP_RANK'");
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  EXPECT_TRUE(has(r, "[0]: 0/4 node 0\n")) << r.output;
  EXPECT_TRUE(has(r, "[3]: 3/4 node 1\n")) << r.output;
}

TEST_F(DdprunTest, FailureOnOneNodeStopsTheOther) {
  const std::string port = std::to_string(free_port_pair());
  Result r = two_nodes(
      bin_, "--nproc-per-node 1 --nnodes 2 --master-addr 127.0.0.1 --master-port " + port +
                " --rdzv-timeout 20 /bin/sh -c 'if [ $RANK = 1 ]; then exit 6; "
                "fi; sleep 30'");
  EXPECT_TRUE(has(r, "status=6,6")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, TwoNodesRestartTogether) {
  const std::string port = std::to_string(free_port_pair());
  Result r = two_nodes(bin_,
                       "--nproc-per-node 1 --nnodes 2 --max-restarts 1 --master-addr 127.0.0.1 "
                       "--master-port " +
                           port +
                           " --rdzv-timeout 20 /bin/sh -c "
                           "'if [ $RANK$DDP_RESTART_COUNT = 10 ]; then exit 6; fi; "
                           "if [ $DDP_RESTART_COUNT = 0 ]; then sleep 30; fi; echo round "
                           "$DDP_RESTART_COUNT'");
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  EXPECT_TRUE(has(r, "[0]: round 1\n")) << r.output;
  EXPECT_TRUE(has(r, "[1]: round 1\n")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, SigtermOnOneNodeStopsBoth) {
  const std::string port = std::to_string(free_port_pair());
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
      std::to_string(free_port_pair()) + " --rdzv-timeout 1 /bin/true");
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

// --- elastic mode (Note [ddprun elastic]) -------------------------------------

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The word after `key ` on the line of `text` that starts with `prefix`.
std::string field_after(const std::string& text, const std::string& prefix) {
  size_t at = text.find(prefix);
  if (at == std::string::npos) return "";
  at += prefix.size();
  return text.substr(at, text.find_first_of(" \n", at) - at);
}

TEST_F(DdprunTest, ElasticEnvironmentContract) {
  Result r = launch("--nproc-per-node 1:2 --master-port 0",
                    "echo $RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $DDP_ELASTIC $DDP_ELASTIC_MIN "
                    "$DDP_ELASTIC_MAX $TORCHELASTIC_USE_AGENT_STORE ${#DDP_ELASTIC_TOKEN} "
                    "$DDP_RESTART_COUNT");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: 0 2 2 1 1 2 True 32 0\n")) << r.output;
  EXPECT_TRUE(has(r, "[1]: 1 2 2 1 1 2 True 32 0\n")) << r.output;
  // --elastic with a plain N is N:N; a token in ddprun's environment is kept.
  r = sh("DDP_ELASTIC_TOKEN=tok42 " + bin_ +
         " --elastic --nproc-per-node 2 --master-port 0 /bin/sh -c "
         "'echo $DDP_ELASTIC_MIN $DDP_ELASTIC_MAX $DDP_ELASTIC_TOKEN'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[1]: 2 2 tok42\n")) << r.output;
  // The classic mode says so, whatever an outer launcher left behind.
  r = sh("TORCHELASTIC_USE_AGENT_STORE=True DDP_ELASTIC=1 " + bin_ +
         " --nproc-per-node 1 /bin/sh -c 'echo $TORCHELASTIC_USE_AGENT_STORE $DDP_ELASTIC'");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: False 0\n")) << r.output;
}

TEST_F(DdprunTest, ElasticReplacesOnlyTheDeadWorker) {
  // Rank 1's founder SIGKILLs itself; the others run on and finish.
  Result r = launch("--nproc-per-node 2:3 --master-port 0",
                    "echo start $RANK $DDP_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT $$ "
                    "$TORCHELASTIC_USE_AGENT_STORE $DDP_ELASTIC_TOKEN; "
                    "if [ $RANK = 1 ] && [ $DDP_RESTART_COUNT = 0 ]; then sleep 0.3; kill -9 $$; "
                    "fi; sleep 1.5; echo end $RANK $$");
  EXPECT_EQ(r.status, 0) << r.output;
  // Ranks 0 and 2 started once and ended with the same pid.
  for (const std::string rank : {"0", "2"}) {
    EXPECT_EQ(count(r.output, "]: start " + rank + " "), 1u) << rank << "\n" << r.output;
    const std::string pid = field_after(r.output, "[" + rank + "]: start " + rank + " 0 0 ");
    EXPECT_FALSE(pid.empty()) << r.output;
    EXPECT_TRUE(has(r, "[" + rank + "]: end " + rank + " " + pid + "\n")) << r.output;
  }
  // Rank 1 twice: the founder, then one replacement with restart count 1,
  // the same rank, the launcher's store and the same token.
  EXPECT_EQ(count(r.output, "]: start 1 "), 2u) << r.output;
  const std::string first = field_after(r.output, "[1]: start 1 0 0 ");
  const std::string second = field_after(r.output, "[1]: start 1 1 1 ");
  ASSERT_FALSE(second.empty()) << r.output;
  EXPECT_NE(first, second) << r.output;
  const std::string token = field_after(r.output, "[1]: start 1 1 1 " + second + " True ");
  EXPECT_EQ(token.size(), 32u) << r.output;
  EXPECT_TRUE(has(r, "[1]: start 1 0 0 " + first + " True " + token + "\n")) << r.output;
  EXPECT_TRUE(has(r, "[0]: start 0 0 0 ")) << r.output;
  EXPECT_TRUE(has(r, "[1]: end 1 " + second + "\n")) << r.output;
  EXPECT_TRUE(has(r, "replacing it alone")) << r.output;
  EXPECT_LT(r.seconds, 5.0) << r.output;
}

TEST_F(DdprunTest, ElasticStoreOutlivesRankZero) {
#ifndef ELASTIC_STORE_MAIN_PATH
  GTEST_SKIP() << "ELASTIC_STORE_MAIN_PATH is not set";
#else
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ddprun_elastic_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  Result r = sh(bin_ + " --nproc-per-node 2:3 --master-port 0 " +
                std::string(ELASTIC_STORE_MAIN_PATH) + " " + dir.string() + " 0");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: replacement of rank 0 found its predecessor's pid")) << r.output;
  EXPECT_TRUE(has(r, "[1]: rank 1 saw the replacement")) << r.output;
  EXPECT_TRUE(has(r, "[2]: rank 2 saw the replacement")) << r.output;
  // What each worker's detect_launch_env saw: <rank>.<restart>.<pid>.
  std::map<std::string, std::string> seen;
  std::map<int, int> per_rank;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string name = e.path().filename().string();
    seen[name.substr(0, name.rfind('.'))] = ss.str();
    ++per_rank[std::stoi(name)];
  }
  EXPECT_EQ(per_rank[0], 2) << r.output;  // the victim and its replacement
  EXPECT_EQ(per_rank[1], 1) << r.output;  // the survivors never restarted
  EXPECT_EQ(per_rank[2], 1) << r.output;
  ASSERT_TRUE(seen.count("0.1") && seen.count("0.0") && seen.count("2.0")) << r.output;
  const std::string& repl = seen["0.1"];
  for (const char* line : {"rank 0\n", "world_size 3\n", "restart 1\n", "agent_store 1\n",
                           "elastic 1\n", "min 2\n", "max 3\n"})
    EXPECT_NE(repl.find(line), std::string::npos) << line << "\n" << repl;
  EXPECT_NE(seen["2.0"].find("restart 0\n"), std::string::npos) << seen["2.0"];
  const std::string token = field_after(repl, "token ");
  EXPECT_EQ(token.size(), 32u) << repl;
  EXPECT_EQ(field_after(seen["0.0"], "token "), token);
  fs::remove_all(dir);
#endif
}

TEST_F(DdprunTest, ElasticGroupHealsAndAdmitsTheReplacement) {
#ifndef ELASTIC_TRAIN_MAIN_PATH
  GTEST_SKIP() << "ELASTIC_TRAIN_MAIN_PATH is not set";
#else
  // End to end with ddp::parallel::ElasticGroup: rank 1's founder dies before
  // step 3, the survivors heal, ddprun's replacement joins and receives the
  // state; all three finish bit-identical.
  Result r = sh("DDP_FLIGHT_RECORDER_SIZE=0 " + bin_ + " --nproc-per-node 2:3 --master-port 0 " +
                std::string(ELASTIC_TRAIN_MAIN_PATH) + " 100 1");
  if (has(r, "no gloo")) GTEST_SKIP() << "this build has no gloo";
  EXPECT_EQ(r.status, 0) << r.output;
  const std::string hash = field_after(r.output,
                                       "[0]: done step 100 size 3 heals 1 joins 1 "
                                       "restart 0 hash ");
  ASSERT_EQ(hash.size(), 16u) << r.output;
  EXPECT_TRUE(has(r, "[2]: done step 100 size 3 heals 1 joins 1 restart 0 hash " + hash + "\n"))
      << r.output;
  EXPECT_TRUE(has(r, "[1]: done step 100 size 3 heals 0 joins 1 restart 1 hash " + hash + "\n"))
      << r.output;
  EXPECT_EQ(count(r.output, "replacing it alone"), 1u) << r.output;
#endif
}

TEST_F(DdprunTest, ElasticBelowMinWithoutReplacementsStopsNamingTheRanks) {
  // Ranks 1 and 2 die at once; one replacement, which dies too: rank 0 alone
  // is below MIN 2.
  Result r = launch("--nproc-per-node 2:3 --max-replacements 1 --master-port 0",
                    "if [ $RANK != 0 ]; then kill -9 $$; fi; sleep 30");
  EXPECT_EQ(r.status, 128 + 9) << r.output;
  EXPECT_TRUE(has(r, "fewer than the minimum 2")) << r.output;
  EXPECT_TRUE(has(r, "lost ranks: 1, 2;")) << r.output;
  EXPECT_EQ(count(r.output, "replacing it alone"), 1u) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, ElasticSlotLeftEmptyFailsTheJob) {
  // Above MIN the others finish, but the job ran one worker short.
  Result r = launch("--nproc-per-node 1:2 --max-replacements 0 --master-port 0",
                    "if [ $RANK = 1 ]; then exit 3; fi; sleep 0.5; echo done");
  EXPECT_EQ(r.status, 3) << r.output;
  EXPECT_TRUE(has(r, "[0]: done\n")) << r.output;
  EXPECT_TRUE(has(r, "the slot stays empty")) << r.output;
}

TEST_F(DdprunTest, ElasticUsageErrorIsNotReplaced) {
  // Exit status 2 (a refused flag) would repeat in a replacement.
  Result r = launch("--nproc-per-node 1:2 --master-port 0",
                    "if [ $RANK = 1 ]; then exit 2; fi; sleep 0.5; echo done");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(has(r, "[0]: done\n")) << r.output;
  EXPECT_TRUE(has(r, "exit status 2 is a usage error")) << r.output;
  EXPECT_FALSE(has(r, "replacing it alone")) << r.output;
}

TEST_F(DdprunTest, ElasticCompletionStopsAReplacementStillJoining) {
  // Rank 1's replacement would wait 30 s to be admitted; rank 0 completes.
  Result r = launch("--nproc-per-node 2:2 --preempt-grace 1 --master-port 0",
                    "if [ $RANK = 1 ]; then if [ $DDP_RESTART_COUNT = 0 ]; then kill -9 $$; fi; "
                    "sleep 30; fi; sleep 0.5; echo done $RANK");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(has(r, "[0]: done 0\n")) << r.output;
  EXPECT_TRUE(has(r, "stopping it")) << r.output;
  EXPECT_LT(r.seconds, 5.0) << r.output;
}

TEST_F(DdprunTest, ElasticCompletionReplacesNothing) {
  // Rank 0 finishes first; rank 1's founder then fails: no replacement, and
  // a founder's failure fails the job.
  Result r = launch("--nproc-per-node 1:2 --master-port 0",
                    "if [ $RANK = 1 ]; then sleep 0.5; exit 5; fi; echo done");
  EXPECT_EQ(r.status, 5) << r.output;
  EXPECT_FALSE(has(r, "replacing it alone")) << r.output;
  EXPECT_TRUE(has(r, "while the job was completing")) << r.output;
}

TEST_F(DdprunTest, ElasticPreemptionIsCleanWhenTheWorkersSave) {
  Result r = preempted(bin_, "--nproc-per-node 1:2 --master-port 0",
                       "trap \"echo saved $RANK; exit 0\" TERM; sleep 30 & wait", "TERM");
  EXPECT_TRUE(has(r, "status=0\n")) << r.output;
  EXPECT_TRUE(has(r, "[0]: saved 0\n")) << r.output;
  EXPECT_TRUE(has(r, "[1]: saved 1\n")) << r.output;
  EXPECT_FALSE(has(r, "replacing")) << r.output;
  EXPECT_LT(r.seconds, 4.0) << r.output;
}

TEST_F(DdprunTest, ElasticBadArgumentsExitTwo) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--nproc-per-node 4:2", "MIN is above MAX"},
      {"--nproc-per-node 0:2", "MIN must be at least 1"},
      {"--nproc-per-node a:b", "expected N or MIN:MAX"},
      {"--nproc-per-node 2:", "expected N or MIN:MAX"},
      {"--nproc-per-node 1:2 --max-restarts 1", "no meaning in elastic mode"},
      {"--nproc-per-node 2 --max-replacements 1", "--max-replacements needs elastic mode"},
      {"--nproc-per-node 1:2 --max-replacements -1", "--max-replacements"},
  };
  for (const auto& [args, why] : cases) {
    Result r = sh(bin_ + " " + args + " /bin/true");
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_TRUE(has(r, why)) << args << "\n" << r.output;
    EXPECT_TRUE(has(r, "usage: ddprun")) << args << "\n" << r.output;
  }
}

// --- elastic mode across nodes (Note [ddprun elastic]) ------------------------

// A TCP port that is free on this machine right now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  if (fd >= 0) ::close(fd);
  return port;
}

// Shell text that waits until `condition` holds (at most 120 s, for a
// loaded machine).
std::string await(const std::string& condition) {
  return "i=0; until " + condition + " || [ $i -ge 1200 ]; do sleep 0.1; i=$((i+1)); done; ";
}
// ... until `file` has a line with `what`.
std::string await_line(const std::string& file, const std::string& what) {
  return await("grep -qF '" + what + "' " + file);
}

class DdprunNodesTest : public DdprunTest {
 protected:
  void SetUp() override {
    DdprunTest::SetUp();
    if (IsSkipped()) return;
    dir_ = std::filesystem::temp_directory_path() /
           ("ddprun_nodes_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    port_ = free_port();
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // The flags every node of a MIN:MAX job with P workers each gives.
  std::string nodes(const std::string& range, int p) const {
    return "--nnodes " + range + " --nproc-per-node " + std::to_string(p) +
           " --master-addr 127.0.0.1 --master-port " + std::to_string(port_) + " --rdzv-timeout 60";
  }
  // Node 0 started first, node 1 once node 0's output has `node1_after`
  // (at once when empty); each node's output goes to a file of its own,
  // printed in the end with "status=S0,S1" (`node1_then`: shell text run
  // after node 1 started, with its launcher's pid in $b).
  Result run_nodes(const std::string& node0, const std::string& node1,
                   const std::string& node1_after = "", const std::string& node1_then = "") {
    const std::string out0 = (dir_ / "node0").string(), out1 = (dir_ / "node1").string();
    return sh("(" + bin_ + " --node-rank 0 " + node0 + " >" + out0 + " 2>&1 & a=$!; " +
              (node1_after.empty() ? "" : await_line(out0, node1_after)) + bin_ +
              " --node-rank 1 " + node1 + " >" + out1 + " 2>&1 & b=$!; " + node1_then +
              "wait $a; x=$?; wait $b; y=$?; cat " + out0 + " " + out1 + "; echo status=$x,$y)");
  }
  // Whether the library takes a RANK at or above WORLD_SIZE in elastic
  // mode: the replica id of a worker that joins a running job (a late node,
  // a replacement across nodes). detect_launch_env refused it before.
  bool joiner_ids_accepted() {
#ifndef ELASTIC_STORE_MAIN_PATH
    return false;
#else
    static const bool ok = [&] {
      Result r =
          sh("DDP_ELASTIC=1 RANK=1 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 DDP_ELASTIC_MAX=2 "
             "TORCHELASTIC_USE_AGENT_STORE=True MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
             std::to_string(free_port()) + " timeout 2 " + std::string(ELASTIC_STORE_MAIN_PATH) +
             " " + dir_.string() + " 99");
      return !has(r, "is not below WORLD_SIZE");
    }();
    return ok;
#endif
  }

  std::filesystem::path dir_;
  int port_ = 0;
};

TEST_F(DdprunNodesTest, EnvironmentContract) {
  // 2:2 with 2 workers each: the founders are all four, ids node_rank * 2 +
  // slot, one token for the job.
  const std::string script =
      " /bin/sh -c 'echo env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK "
      "$DDP_ELASTIC $DDP_ELASTIC_MIN $DDP_ELASTIC_MAX $TORCHELASTIC_USE_AGENT_STORE "
      "$MASTER_PORT $DDP_RESTART_COUNT $DDP_ELASTIC_TOKEN'";
  Result r = two_nodes(bin_, nodes("2:2", 2) + script);
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  const std::string port = std::to_string(port_);
  const std::string token = field_after(r.output, "[0]: env 0 4 0 2 0 1 4 4 True " + port + " 0 ");
  EXPECT_EQ(token.size(), 32u) << r.output;
  for (const std::string line :
       {"[0]: env 0 4 0 2 0", "[1]: env 1 4 1 2 0", "[2]: env 2 4 0 2 1", "[3]: env 3 4 1 2 1"})
    EXPECT_TRUE(has(r, line + " 1 4 4 True " + port + " 0 " + token + "\n")) << line << "\n"
                                                                             << r.output;
  // 1:2: the founders are node 0's workers; node 1's join (ids 2, 3).
  port_ = free_port();
  r = two_nodes(bin_, nodes("1:2", 2) + script);
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  EXPECT_TRUE(has(r, "[0]: env 0 2 0 2 0 1 2 4 True")) << r.output;
  EXPECT_TRUE(has(r, "[3]: env 3 2 1 2 1 1 2 4 True")) << r.output;
}

TEST_F(DdprunNodesTest, NodesMustAgreeOnTheShape) {
  Result r = run_nodes(nodes("1:2", 1) + " /bin/sh -c 'sleep 2'",
                       nodes("1:2", 2) + " /bin/sh -c 'echo never'");
  EXPECT_TRUE(has(r, "status=0,2")) << r.output;
  EXPECT_TRUE(has(r,
                  "this node has --nnodes 1:2 --nproc-per-node 2, node 0 has --nnodes 1:2 "
                  "--nproc-per-node 1"))
      << r.output;
  EXPECT_FALSE(has(r, "never")) << r.output;
}

TEST_F(DdprunNodesTest, OnlyTheDeadWorkerOfNodeOneIsReplaced) {
  // Rank 3 (node 1, slot 1) SIGKILLs itself; its replacement gets an id no
  // worker had (4 = MAX * P), and every other worker runs on with its pid.
  Result r = two_nodes(bin_, nodes("2:2", 2) +
                                 " /bin/sh -c 'echo start $RANK $LOCAL_RANK $DDP_RESTART_COUNT $$; "
                                 "if [ $RANK = 3 ]; then kill -9 $$; fi; sleep 1.5; "
                                 "echo end $RANK $$'");
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  for (const std::string rank : {"0", "1", "2"}) {
    EXPECT_EQ(count(r.output, "]: start " + rank + " "), 1u) << rank << "\n" << r.output;
    const std::string local = rank == "1" ? "1" : "0";
    const std::string pid =
        field_after(r.output, "[" + rank + "]: start " + rank + " " + local + " 0 ");
    EXPECT_FALSE(pid.empty()) << r.output;
    EXPECT_TRUE(has(r, "[" + rank + "]: end " + rank + " " + pid + "\n")) << r.output;
  }
  EXPECT_TRUE(has(r, "[3]: start 3 1 0 ")) << r.output;
  EXPECT_FALSE(has(r, "[3]: end")) << r.output;
  EXPECT_TRUE(has(r, "[4]: start 4 1 1 ")) << r.output;
  EXPECT_TRUE(has(r, "[4]: end 4 ")) << r.output;
  EXPECT_EQ(count(r.output, "replacing it alone"), 1u) << r.output;
  EXPECT_TRUE(has(r, "as rank 4)")) << r.output;
}

TEST_F(DdprunNodesTest, NodeZeroGoesOnWhenNodeOnesLauncherIsKilled) {
  // Node 1's launcher gets SIGKILL once its worker runs; its worker dies with
  // it (PR_SET_PDEATHSIG). Node 0 waits for no one and completes.
  const std::string marker = (dir_ / "node1_started").string();
  Result r = run_nodes(nodes("1:2", 1) + " /bin/sh -c '" + await("[ -e " + marker + " ]") +
                           "sleep 0.5; echo done $RANK'",
                       nodes("1:2", 1) + " /bin/sh -c 'touch " + marker + "; sleep 30'",
                       "elastic mode", await("[ -e " + marker + " ]") + "kill -9 $b; ");
  EXPECT_TRUE(has(r, "status=0,137")) << r.output;
  EXPECT_TRUE(has(r, "[0]: done 0\n")) << r.output;
  EXPECT_LT(r.seconds, 40.0) << r.output;
}

TEST_F(DdprunNodesTest, TwoNodesTrainTogether) {
#ifndef ELASTIC_TRAIN_MAIN_PATH
  GTEST_SKIP() << "ELASTIC_TRAIN_MAIN_PATH is not set";
#else
  Result r = two_nodes("DDP_FLIGHT_RECORDER_SIZE=0 " + bin_,
                       nodes("2:2", 2) + " " + ELASTIC_TRAIN_MAIN_PATH + " 30 -1");
  if (has(r, "no gloo")) GTEST_SKIP() << "this build has no gloo";
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  const std::string hash =
      field_after(r.output, "[0]: done step 30 size 4 heals 0 joins 0 restart 0 hash ");
  ASSERT_EQ(hash.size(), 16u) << r.output;
  for (const std::string rank : {"1", "2", "3"})
    EXPECT_TRUE(
        has(r, "[" + rank + "]: done step 30 size 4 heals 0 joins 0 restart 0 hash " + hash + "\n"))
        << r.output;
#endif
}

TEST_F(DdprunNodesTest, LateNodeJoinsATrainingJob) {
#ifndef ELASTIC_TRAIN_MAIN_PATH
  GTEST_SKIP() << "ELASTIC_TRAIN_MAIN_PATH is not set";
#else
  if (!joiner_ids_accepted()) GTEST_SKIP() << "detect_launch_env refuses RANK >= WORLD_SIZE";
  // Node 0 founds the job alone (1:2) and trains; node 1 starts once node 0
  // is a member, and its worker is admitted: generation 1 has both.
  const std::string prog = " " + std::string(ELASTIC_TRAIN_MAIN_PATH) + " 20 -1 1";
  Result r = run_nodes(nodes("1:2", 1) + prog, nodes("1:2", 1) + prog,
                       "[0]: member of generation 0 size 1");
  if (has(r, "no gloo")) GTEST_SKIP() << "this build has no gloo";
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  EXPECT_TRUE(has(r, "[1]: member of generation 1 size 2")) << r.output;
  const std::string step = field_after(r.output, "[0]: done step ");
  const std::string hash =
      field_after(r.output, "[0]: done step " + step + " size 2 heals 0 joins 1 restart 0 hash ");
  ASSERT_EQ(hash.size(), 16u) << r.output;
  EXPECT_TRUE(
      has(r, "[1]: done step " + step + " size 2 heals 0 joins 1 restart 0 hash " + hash + "\n"))
      << r.output;
#endif
}

TEST_F(DdprunNodesTest, AWorkerOfNodeOneIsReplacedAndAdmitted) {
#ifndef ELASTIC_TRAIN_MAIN_PATH
  GTEST_SKIP() << "ELASTIC_TRAIN_MAIN_PATH is not set";
#else
  if (!joiner_ids_accepted()) GTEST_SKIP() << "detect_launch_env refuses RANK >= WORLD_SIZE";
  // Node 1's worker (id 1) dies at its first step from 3 on; the survivors
  // heal, node 1's launcher replaces it with id 2, which joins: generations
  // 1 (node 1 joins), 2 (heal) and 3 (the replacement joins).
  const std::string prog = " " + std::string(ELASTIC_TRAIN_MAIN_PATH) + " 20 1 3";
  Result r = run_nodes(nodes("1:2", 1) + prog, nodes("1:2", 1) + prog,
                       "[0]: member of generation 0 size 1");
  if (has(r, "no gloo")) GTEST_SKIP() << "this build has no gloo";
  EXPECT_TRUE(has(r, "status=0,0")) << r.output;
  EXPECT_EQ(count(r.output, "replacing it alone"), 1u) << r.output;
  EXPECT_TRUE(has(r, "as rank 2)")) << r.output;
  EXPECT_EQ(count(r.output, "[0]: member of generation"), 1u) << r.output;  // never restarted
  const std::string step = field_after(r.output, "[0]: done step ");
  const std::string hash =
      field_after(r.output, "[0]: done step " + step + " size 2 heals 1 joins 2 restart 0 hash ");
  ASSERT_EQ(hash.size(), 16u) << r.output;
  EXPECT_TRUE(
      has(r, "[2]: done step " + step + " size 2 heals 0 joins 1 restart 1 hash " + hash + "\n"))
      << r.output;
#endif
}

TEST_F(DdprunNodesTest, WholeNodeLostTheOthersFinish) {
#ifndef ELASTIC_TRAIN_MAIN_PATH
  GTEST_SKIP() << "ELASTIC_TRAIN_MAIN_PATH is not set";
#else
  if (!joiner_ids_accepted()) GTEST_SKIP() << "detect_launch_env refuses RANK >= WORLD_SIZE";
  // Node 1's worker SIGKILLs its launcher (and itself) at its first step
  // from 3 on: node 1 is gone, node 0's worker heals (generation 2) and
  // completes, and node 0's launcher exits 0.
  const std::string prog = " " + std::string(ELASTIC_TRAIN_MAIN_PATH) + " 20 1 2 launcher";
  Result r = run_nodes(nodes("1:2", 1) + prog, nodes("1:2", 1) + prog,
                       "[0]: member of generation 0 size 1");
  if (has(r, "no gloo")) GTEST_SKIP() << "this build has no gloo";
  EXPECT_TRUE(has(r, "status=0,137")) << r.output;
  EXPECT_TRUE(has(r, "[0]: done step ")) << r.output;
  EXPECT_TRUE(has(r, " size 1 heals 1 joins 1 restart 0 hash ")) << r.output;
  EXPECT_FALSE(has(r, "replacing")) << r.output;
#endif
}

TEST_F(DdprunNodesTest, BadArgumentsExitTwoNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--nnodes 3:2 --nproc-per-node 1", "MIN is above MAX"},
      {"--nnodes 0:2 --nproc-per-node 1", "MIN must be at least 1"},
      {"--nnodes 1:2 --nproc-per-node 1 --node-rank 2 --master-addr 127.0.0.1 --master-port 1234",
       "--node-rank must be below MAX of --nnodes MIN:MAX"},
      {"--nnodes 1:2 --nproc-per-node 1 --master-port 1234", "needs --master-addr and"},
      {"--nnodes 1:2 --nproc-per-node 1 --master-addr 127.0.0.1", "needs --master-addr and"},
      {"--nnodes 1:2 --nproc-per-node 1 --master-addr 127.0.0.1 --master-port 0",
       "--master-port (1..65535)"},
      {"--nnodes 1:2 --nproc-per-node 1 --max-restarts 1 --master-addr 127.0.0.1 "
       "--master-port 1234",
       "--max-restarts restarts the whole group and has no meaning in elastic mode"},
      {"--nnodes 1:2 --nproc-per-node 1:2 --master-addr 127.0.0.1 --master-port 1234",
       "both ranged at once is not supported"},
      {"--nproc-per-node 1:2 --nnodes 2 --master-port 1234",
       "--nproc-per-node MIN:MAX is elastic "
       "on one node"},
  };
  for (const auto& [args, why] : cases) {
    Result r = sh(bin_ + " " + args + " /bin/true");
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_TRUE(has(r, why)) << args << "\n" << r.output;
    if (args.rfind("--nnodes 3:2", 0) == 0 || args.rfind("--nnodes 0:2", 0) == 0)
      EXPECT_TRUE(has(r, "--nnodes")) << args << "\n" << r.output;
  }
}

}  // namespace
