#pragma once
// GraphCache: built cuDNN graphs by key, one map per thread (Note [cuDNN
// graph API] in kernels/cuda/cudnn_graph.h, which includes this header). It holds
// no cuDNN type itself, so it has no cuDNN include and unit tests exercise
// it in any build (tests/nn/cudnn_graph_cache_test.cpp).
//
// Note [Per-thread graph caches]
// A built cuDNN execution plan is not guaranteed to be safe to execute from
// two threads at once (cuDNN's release notes list engines that are not;
// PyTorch keeps its cuDNN plan caches thread_local for that reason), and a
// plan may be changed after it is built (Note [cuDNN workspace fallback]
// builds further plans into a graph when a workspace does not fit). So each
// thread has its own map, its shard: a thread builds the graphs it runs, and
// no graph is ever touched by two threads at once. Lookups and insertions
// take no lock; the only lock guards the list of shards, taken once per
// (thread, cache) and by stats().
// When a thread exits, its shard (with its graphs) goes to a free list and
// the next new thread takes it over instead of building its graphs again,
// so short-lived threads neither leak graphs nor rebuild them, the way
// Note [cuDNN handles] recycles handles. A shard is never destroyed while
// its cache lives, and every cache that holds cuDNN graphs is itself leaked
// (`static auto* c = new GraphCache<...>`): destroying graphs at exit can
// run after cuDNN has unloaded its lazily loaded engine libraries (PyTorch
// leaks its cuDNN caches for the same reason).
// stats() sums every shard of the cache: hits and misses over all threads,
// entries = graphs held in all shards (a key built on two threads counts
// twice, as two graphs exist). thread_stats() is the calling thread's shard
// alone.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/conv_geometry.h"  // kernels::PlanCacheStats

namespace ddp::nn::cudnn_graph {

// Built graphs by key. `Entry` holds the graph and whatever the caller needs
// beside it (uids, a "not supported" verdict, ...). The builder runs on the
// calling thread with no lock held; when it throws, nothing is cached (the
// miss is still counted) and the exception propagates.
template <class Entry>
class GraphCache {
 public:
  GraphCache() : state_(std::make_shared<State>()) {}
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  std::shared_ptr<const Entry> get_or_build(const std::string& key,
                                            const std::function<Entry()>& builder) {
    Shard& s = my_shard();
    if (auto it = s.map.find(key); it != s.map.end()) {
      s.hits.fetch_add(1, std::memory_order_relaxed);
      return it->second;
    }
    s.misses.fetch_add(1, std::memory_order_relaxed);
    auto built = std::make_shared<const Entry>(builder());
    // emplace, not assign: a builder that looked the same key up again (on
    // this thread) has already inserted it, and that entry is kept.
    auto [it, inserted] = s.map.emplace(key, std::move(built));
    s.entries.store(int64_t(s.map.size()), std::memory_order_relaxed);
    return it->second;
  }

  // Summed over every shard (see the Note).
  kernels::PlanCacheStats stats() const {
    kernels::PlanCacheStats out{};
    std::lock_guard<std::mutex> g(state_->mu);
    for (const auto& s : state_->shards) add(out, *s);
    return out;
  }
  // The calling thread's shard only (zeros before its first lookup).
  kernels::PlanCacheStats thread_stats() const {
    kernels::PlanCacheStats out{};
    if (const Shard* s = find_my_shard()) add(out, *s);
    return out;
  }
  // Shards created so far (threads that used the cache at the same time).
  int64_t shard_count() const {
    std::lock_guard<std::mutex> g(state_->mu);
    return int64_t(state_->shards.size());
  }

 private:
  struct Shard {
    std::unordered_map<std::string, std::shared_ptr<const Entry>> map;  // its thread only
    std::atomic<int64_t> entries{0}, hits{0}, misses{0};
  };
  struct State {
    std::mutex mu;
    std::vector<std::unique_ptr<Shard>> shards;  // every shard, owned here
    std::vector<Shard*> free;                    // shards of exited threads
  };
  // The calling thread's shards, by cache; on thread exit each goes back to
  // its cache's free list (when the cache still exists).
  struct ThreadShards {
    std::unordered_map<const State*, std::pair<std::weak_ptr<State>, Shard*>> by_cache;
    ~ThreadShards() {
      for (auto& [key, held] : by_cache) {
        if (std::shared_ptr<State> st = held.first.lock()) {
          std::lock_guard<std::mutex> g(st->mu);
          st->free.push_back(held.second);
        }
      }
    }
  };
  static ThreadShards& thread_shards() {
    thread_local ThreadShards mine;  // one per Entry type and thread
    return mine;
  }

  static void add(kernels::PlanCacheStats& out, const Shard& s) {
    out.entries += s.entries.load(std::memory_order_relaxed);
    out.hits += s.hits.load(std::memory_order_relaxed);
    out.misses += s.misses.load(std::memory_order_relaxed);
  }

  // This thread's shard of this cache, or null. An entry whose cache has
  // died is stale (a new cache may live at the old one's address): dropped.
  Shard* find_my_shard() const {
    auto& mine = thread_shards().by_cache;
    auto it = mine.find(state_.get());
    if (it == mine.end()) return nullptr;
    if (it->second.first.expired()) {
      mine.erase(it);
      return nullptr;
    }
    return it->second.second;
  }

  Shard& my_shard() {
    if (Shard* s = find_my_shard()) return *s;
    auto& mine = thread_shards().by_cache;
    Shard* s = nullptr;
    {
      std::lock_guard<std::mutex> g(state_->mu);
      if (!state_->free.empty()) {
        s = state_->free.back();
        state_->free.pop_back();
      } else {
        state_->shards.push_back(std::make_unique<Shard>());
        s = state_->shards.back().get();
      }
    }
    mine[state_.get()] = std::make_pair(std::weak_ptr<State>(state_), s);
    return *s;
  }

  std::shared_ptr<State> state_;
};

}  // namespace ddp::nn::cudnn_graph
