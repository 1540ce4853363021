#pragma once
// Finding which ranks were lost after a collective failed.
//
// Note [Naming the lost rank]
// When a peer process dies (SIGKILL, a crashed node), the survivors see only
// a symptom: a connection closed by some address, or a receive that timed
// out while waiting on a neighbour that is itself waiting on the dead rank.
// Neither names the rank that is gone, and in a ring the neighbour's error
// would blame the wrong one. So on its first failure a backend closes its
// own connections (its neighbours then fail at once instead of at their
// timeout) and takes a roll call through the store: every survivor writes
// its own key and waits a short grace period for the others'. The ranks that
// never answer are the lost ones, and every survivor names the same ones.
// When the store itself is unreachable before its host answered, the process
// that hosted it (rank 0 under torchrun/ddprun) is gone: that is the lost
// rank, or one of them. The host stays until the others have their answer.
//
// Note [Roll call cost]
// The roll call costs O(N) store requests per polling round for the whole
// group, not O(N^2): every survivor appends its answer (rank and payload) to
// one list key with compare_set, and polls that one key, instead of checking
// every other rank's key. The payload carries the rank's flight-recorder
// position, for the desync report (desync_report.h).
// A rank that is alive but busy (sleeping, computing, stuck outside any
// collective) does not answer, yet must not be named lost: every group with
// a store runs a Heartbeat, a thread that bumps its rank's heartbeat key (with
// its position) about every second. Only for the ranks that did not answer
// does the roll call read the heartbeat key twice, a heartbeat period apart;
// one that moved is reported busy, with its position, not lost.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddp/dist/store.h"

namespace ddp::dist::detail {

struct RollCall {
  std::vector<int> answered;  // includes this rank
  std::vector<int> missing;   // no answer (includes busy)
  std::vector<int> busy;      // no answer, but their heartbeat moved: alive
  std::map<int, std::string> payloads;  // of the answered and busy ranks
  bool store_reachable = true;
  std::string store_error;  // why the store failed, when it did
};

// Writes this rank's key under prefix and waits up to grace for every
// other rank's. The rank whose process hosts the store then waits (up to
// grace again) until every rank that answered has finished its own roll
// call, so that none of them finds the store gone and blames the host.
// Never throws: store failures are reported in the result, with what was
// seen before.
// payload: one line (newlines are replaced), e.g. a desync position.
// heartbeat_prefix: where the group's Heartbeat writes ("" = no heartbeats).
RollCall roll_call(Store& store, const std::string& prefix, int rank, int size,
                   std::chrono::milliseconds grace, bool hosts_store,
                   const std::string& payload = "", const std::string& heartbeat_prefix = "");

// Bumps <prefix>/<rank> to "<count>|<payload()>" every period from a
// background thread until destroyed; store failures are ignored (the roll
// call reports the store). Note [Roll call cost].
class Heartbeat {
 public:
  Heartbeat(std::shared_ptr<Store> store, std::string prefix, int rank,
            std::chrono::milliseconds period, std::function<std::string()> payload);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  static constexpr std::chrono::milliseconds kDefaultPeriod{1000};

 private:
  // Shared with the thread: a heartbeat stuck in a store request to a store
  // that is gone (its host ended) is detached, not joined, so that
  // destroying a group never waits for the store's timeout.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool stop = false;
    bool finished = false;
  };
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;
};

// "lost rank 2" / "lost ranks 1, 3" / "lost the store (hosted by rank 0, so
// rank 0 is lost)": the sentence a backend puts in its error. Empty when every
// rank answered.
std::string describe_lost(const RollCall& rc, int store_host_rank);

// "1, 3"
std::string join_ranks(const std::vector<int>& ranks);
// "rank 2" / "ranks 1, 3"
std::string ranks_phrase(const std::vector<int>& ranks);
// The ranks of `keyed` grouped by equal key; groups in the order their key
// first appears, ranks in the order given.
std::vector<std::pair<std::string, std::vector<int>>> group_ranks_by_key(
    const std::vector<std::pair<int, std::string>>& keyed);

}  // namespace ddp::dist::detail
