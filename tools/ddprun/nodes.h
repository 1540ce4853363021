#pragma once
// What the launchers of a multi-node elastic job share through the workers'
// store (Note [ddprun elastic] in main.cpp): the job's token and shape,
// replica ids, whether the job is completing, and which launchers are
// still alive, so that node 0, which hosts the store, outlives the others'
// workers.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ddp/dist/tcp_store.h"
#include "launcher.h"

namespace ddprun {

// A launcher whose beat has not moved for this long is taken as lost.
constexpr auto kNodeSilence = 10s;

class NodeLink {
 public:
  // Connects to the job's store at --master-addr:--master-port, waiting up
  // to --rdzv-timeout for node 0 to host it. Node 0 publishes the job's
  // token (`token`, or a random one when empty) and shape; the others take
  // the token (theirs, when `token` is not empty) and check the shape.
  // Throws ddp::Error when the store cannot be reached, std::invalid_argument
  // when this node's --nnodes or --nproc-per-node differs from node 0's.
  NodeLink(const Options& o, const std::string& token);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  const std::string& token() const { return token_; }

  struct Id {
    int id;
    bool joiner;  // not one of this node's first ids: it joins a running job
  };
  // A replica id no worker of the job had before: node_rank * P + slot on
  // the first start of a slot, unless a launcher of this node rank took it
  // already (this one was restarted), else the next of a job-wide counter
  // from MAX * P up. Nothing when the store is lost.
  std::optional<Id> claim_id(int slot, bool first_start);

  // The job is completing (a worker exited 0 on some node): nothing is
  // replaced from then on, on any node.
  void post_completing();
  bool completing() const { return completing_; }
  // The store stopped answering: node 0's launcher is gone, and the job
  // with it.
  bool lost() const { return lost_; }
  std::string where() const;

  // Tells the others this node is done; node 0 then waits, at most `limit`,
  // while a launcher that is not done is still alive (its workers may still
  // use the store).
  void finish(std::chrono::milliseconds limit);

 private:
  struct Seen {
    int64_t beat = -1;
    Clock::time_point changed;
    bool done = false;
  };
  void beat_loop();
  void watch_nodes(ddp::dist::TCPStore& store);
  std::string waiting_for(Clock::time_point since);

  const Options& o_;
  std::string token_;
  std::string nonce_;                           // tells this launcher's claims from a predecessor's
  std::unique_ptr<ddp::dist::TCPStore> store_;  // the main thread's
  std::unique_ptr<ddp::dist::TCPStore> beat_store_;  // the beat thread's
  std::thread beat_;
  std::atomic<bool> stop_{false}, completing_{false}, lost_{false};
  std::mutex mu_;
  std::map<int, Seen> seen_;      // node 0: the other launchers, by node rank
  Clock::time_point last_watch_;  // when the last complete look at them began
};

// 32 hex digits from /dev/urandom.
std::string random_token();

}  // namespace ddprun
