// The launchers of a multi-node elastic job, linked through the workers'
// store. See Note [ddprun elastic] in main.cpp and nodes.h.

#include "nodes.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>

#include "ddp/core/error.h"

namespace ddprun {
namespace {

constexpr const char* kPrefix = "ddprun/elastic/";
// The store's request timeout once connected: short, so that a lost store
// (node 0 gone) is seen in seconds, not after --rdzv-timeout.
constexpr auto kRequestTimeout = std::chrono::milliseconds(5000);
constexpr auto kBeatEvery = 250ms;
constexpr auto kWatchEvery = 1s;

std::string key(const std::string& k) { return kPrefix + k; }
std::string node_key(int node, const std::string& k) {
  return key("node/" + std::to_string(node) + "/" + k);
}

std::unique_ptr<ddp::dist::TCPStore> connect(const Options& o, std::chrono::milliseconds timeout) {
  ddp::dist::TCPStoreOptions so;
  so.host = o.master_addr;
  so.port = uint16_t(o.master_port);
  so.timeout = timeout;
  return std::make_unique<ddp::dist::TCPStore>(so);
}

std::string shape(const Options& o) {
  return fmt::format("--nnodes {}:{} --nproc-per-node {}", o.nnodes_min, o.nnodes, o.nproc);
}

}  // namespace

std::string random_token() {
  unsigned char bytes[16] = {};
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? ::read(fd, bytes, sizeof(bytes)) : -1;
  if (fd >= 0) ::close(fd);
  if (n != ssize_t(sizeof(bytes)))
    throw std::runtime_error("cannot read /dev/urandom for the job token");
  std::string out;
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

NodeLink::NodeLink(const Options& o, const std::string& token) : o_(o), nonce_(random_token()) {
  const auto rdzv = std::chrono::milliseconds(int64_t(o.rdzv_timeout_s * 1000));
  {
    // Node 0 may not host the store yet: wait for it as long as
    // --rdzv-timeout allows, then work with short timeouts.
    auto first = connect(o, rdzv);
    if (o.node_rank == 0) {
      token_ = token.empty() ? random_token() : token;
      first->set(key("token"), token_);
      first->set(key("shape"), shape(o));
    } else {
      const std::string theirs = first->get_string(key("shape"), rdzv);
      if (theirs != shape(o))
        throw std::invalid_argument(
            fmt::format("this node has {}, node 0 has {}: every node of "
                        "the job must give the same",
                        shape(o), theirs));
      token_ = first->get_string(key("token"), rdzv);
      if (!token.empty() && token != token_)
        throw std::invalid_argument(
            "DDP_ELASTIC_TOKEN differs from node 0's: this node's workers would be refused as "
            "another job's; give every node the same token, or none");
    }
  }
  store_ = connect(o, kRequestTimeout);
  beat_store_ = connect(o, kRequestTimeout);
  store_->set(node_key(o.node_rank, "state"), "running");
  beat_ = std::thread([this] { beat_loop(); });
}

NodeLink::~NodeLink() {
  stop_ = true;
  if (beat_.joinable()) beat_.join();
}

std::string NodeLink::where() const { return fmt::format("{}:{}", o_.master_addr, o_.master_port); }

std::optional<NodeLink::Id> NodeLink::claim_id(int slot, bool first_start) {
  if (lost_) return std::nullopt;
  try {
    if (first_start) {
      const int id = o_.node_rank * o_.nproc + slot;
      const std::string k = key("id/" + std::to_string(id));
      if (store_->compare_set(k, "", nonce_) == nonce_)
        return Id{id, o_.node_rank >= o_.nnodes_min};
    }
    const int64_t n = store_->add(key("next_id"), 1) - 1;
    return Id{int(o_.nnodes * o_.nproc + n), true};
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddprun: cannot draw a replica id from the job's store at %s: %s\n",
                 where().c_str(), e.what());
    lost_ = true;
    return std::nullopt;
  }
}

void NodeLink::post_completing() {
  completing_ = true;
  try {
    store_->set(key("completing"), "1");
  } catch (const ddp::Error& e) {
    std::fprintf(stderr, "ddprun: cannot tell the other nodes the job is completing: %s\n",
                 e.what());
  }
}

// Beats every kBeatEvery, learns whether the job is completing, and on node
// 0 watches the other launchers. Two failed requests in a row (each retried
// for kRequestTimeout) mean the store is gone.
void NodeLink::beat_loop() {
  int failures = 0;
  auto next_watch = Clock::now();
  while (!stop_) {
    try {
      beat_store_->add(node_key(o_.node_rank, "beat"), 1);
      if (!completing_ && beat_store_->check({key("completing")})) completing_ = true;
      if (o_.node_rank == 0 && Clock::now() >= next_watch) {
        watch_nodes(*beat_store_);
        next_watch = Clock::now() + kWatchEvery;
      }
      failures = 0;
    } catch (const ddp::Error& e) {
      if (++failures >= 2) {
        std::fprintf(stderr,
                     "ddprun: lost the job's store at %s (hosted by node 0's launcher): the job "
                     "cannot go on without it; no worker is replaced from now on: %s\n",
                     where().c_str(), e.what());
        lost_ = true;
        return;
      }
    }
    for (auto until = Clock::now() + kBeatEvery; !stop_ && Clock::now() < until;)
      std::this_thread::sleep_for(20ms);
  }
}

void NodeLink::watch_nodes(ddp::dist::TCPStore& store) {
  const auto start = Clock::now();
  for (int k = 1; k < o_.nnodes; ++k) {
    if (!store.check({node_key(k, "state")})) continue;
    const bool done = store.get_string(node_key(k, "state")) == "done";
    const int64_t beat = store.add(node_key(k, "beat"), 0);
    std::lock_guard<std::mutex> lock(mu_);
    Seen& s = seen_[k];
    if (beat != s.beat || done != s.done) s.changed = Clock::now();
    s.beat = beat;
    s.done = done;
  }
  std::lock_guard<std::mutex> lock(mu_);
  last_watch_ = start;
}

// The other launchers that are alive and not done, as "1, 3", as a look
// begun after `since` found them; "?" before such a look.
std::string NodeLink::waiting_for(Clock::time_point since) {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_watch_ < since) return "?";
  std::string out;
  const auto now = Clock::now();
  for (const auto& [k, s] : seen_)
    if (!s.done && now - s.changed < kNodeSilence)
      out += (out.empty() ? "" : ", ") + std::to_string(k);
  return out;
}

void NodeLink::finish(std::chrono::milliseconds limit) {
  // No beat after "done": node 0 may close the store as soon as it sees it,
  // and a beat into a closed store would retry for kRequestTimeout.
  if (o_.node_rank != 0) {
    stop_ = true;
    if (beat_.joinable()) beat_.join();
  }
  try {
    store_->set(node_key(o_.node_rank, "state"), "done");
  } catch (const ddp::Error&) {
    return;  // the store is gone already (not on node 0, which hosts it)
  }
  if (o_.node_rank != 0 || lost_) return;
  const auto start = Clock::now(), until = start + limit;
  bool told = false;
  for (std::string w; !(w = waiting_for(start)).empty(); std::this_thread::sleep_for(50ms)) {
    if (w == "?" && Clock::now() < until) continue;
    if (Clock::now() >= until) {
      std::fprintf(stderr, "ddprun: node(s) %s still running; closing the store anyway\n",
                   w.c_str());
      return;
    }
    if (!told)
      std::fprintf(stderr,
                   "ddprun: waiting for node(s) %s to finish: their workers use the store this "
                   "node hosts\n",
                   w.c_str());
    told = true;
  }
}

}  // namespace ddprun
