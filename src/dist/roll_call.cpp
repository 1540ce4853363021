// See Note [Naming the lost rank] in roll_call.h.

#include "roll_call.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>

#include "ddp/core/error.h"

namespace ddp::dist::detail {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

std::string ranks_phrase(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", join_ranks(ranks));
}

std::vector<std::pair<std::string, std::vector<int>>> group_ranks_by_key(
    const std::vector<std::pair<int, std::string>>& keyed) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& [rank, key] : keyed) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == key; });
    if (it == groups.end())
      groups.push_back({key, {rank}});
    else
      it->second.push_back(rank);
  }
  return groups;
}

RollCall roll_call(Store& store, const std::string& prefix, int rank, int size,
                   std::chrono::milliseconds grace, bool hosts_store, const std::string& payload,
                   const std::string& heartbeat_prefix) {
  RollCall rc;
  std::string mine = payload;
  std::replace(mine.begin(), mine.end(), '\n', ' ');
  const std::string list_key = prefix + "/answers";
  std::vector<bool> seen(size_t(size), false);
  seen[size_t(rank)] = true;
  rc.payloads[rank] = mine;
  // "rank\tpayload\n" lines, appended with compare_set (Note [Roll call cost]).
  auto parse = [&](const std::string& list) {
    size_t at = 0;
    while (at < list.size()) {
      const size_t nl = list.find('\n', at);
      const std::string line = list.substr(at, nl == std::string::npos ? nl : nl - at);
      at = nl == std::string::npos ? list.size() : nl + 1;
      const size_t tab = line.find('\t');
      if (tab == std::string::npos) continue;
      const int r = std::atoi(line.substr(0, tab).c_str());
      if (r < 0 || r >= size) continue;
      seen[size_t(r)] = true;
      rc.payloads[r] = line.substr(tab + 1);
    }
  };
  auto all_seen = [&] { return std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }); };
  try {
    const std::string entry = std::to_string(rank) + "\t" + mine + "\n";
    std::string current;
    for (;;) {  // append: retried only while another rank appended in between
      const std::string after = store.compare_set(list_key, current, current + entry);
      if (after == current + entry) break;
      current = after;
    }
    parse(current + entry);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    while (!all_seen() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      parse(to_string(store.get(list_key)));
    }
    // Ranks that did not answer: alive if their heartbeat moves.
    if (!heartbeat_prefix.empty() && !all_seen()) {
      std::map<int, std::string> before;
      for (int r = 0; r < size; ++r)
        if (!seen[size_t(r)] && store.check({heartbeat_prefix + "/" + std::to_string(r)}))
          before[r] = store.get_string(heartbeat_prefix + "/" + std::to_string(r));
      if (!before.empty())
        std::this_thread::sleep_for(Heartbeat::kDefaultPeriod * 2 + std::chrono::milliseconds(200));
      for (const auto& [r, value] : before) {
        const std::string now = store.get_string(heartbeat_prefix + "/" + std::to_string(r));
        if (now == value) continue;
        rc.busy.push_back(r);
        const size_t bar = now.find('|');
        rc.payloads[r] = bar == std::string::npos ? "" : now.substr(bar + 1);
      }
      parse(to_string(store.get(list_key)));  // latecomers
    }
    // Done: the store's host keeps it up until every rank that answered has
    // read its own result, or the others would find the store gone and
    // blame its host.
    store.add(prefix + "/done", 1);
    if (hosts_store) {
      const int64_t answered = std::count(seen.begin(), seen.end(), true);
      const auto done_deadline = std::chrono::steady_clock::now() + grace;
      while (store.add(prefix + "/done", 0) < answered &&
             std::chrono::steady_clock::now() < done_deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (const std::exception& e) {
    rc.store_reachable = false;
    rc.store_error = e.what();
  }
  for (int r = 0; r < size; ++r) (seen[size_t(r)] ? rc.answered : rc.missing).push_back(r);
  // A busy rank that answered late counts as answered.
  std::erase_if(rc.busy, [&](int r) { return seen[size_t(r)]; });
  return rc;
}

Heartbeat::Heartbeat(std::shared_ptr<Store> store, std::string prefix, int rank,
                     std::chrono::milliseconds period, std::function<std::string()> payload) {
  thread_ = std::thread([st = state_, store = std::move(store),
                         key = prefix + "/" + std::to_string(rank), period,
                         payload = std::move(payload)] {
    std::unique_lock<std::mutex> lk(st->mu);
    for (uint64_t n = 1; !st->stop; ++n) {
      // Under the lock: payload() (which reads the group's recorder) never
      // runs once the destructor has set stop.
      const Bytes value = to_bytes(std::to_string(n) + "|" + (payload ? payload() : ""));
      lk.unlock();
      try {
        store->set(key, value);
      } catch (const std::exception&) {
        // The store is gone: the roll call will say so.
      }
      lk.lock();
      st->cv.wait_for(lk, period, [&] { return st->stop; });
    }
    st->finished = true;
    st->cv.notify_all();
  });
}

Heartbeat::~Heartbeat() {
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  const bool finished =
      state_->cv.wait_for(lk, std::chrono::milliseconds(500), [&] { return state_->finished; });
  lk.unlock();
  if (finished)
    thread_.join();
  else
    thread_.detach();  // in a store request that may last the store's timeout
}

std::string describe_lost(const RollCall& rc, int store_host_rank) {
  const bool host_answered =
      std::find(rc.answered.begin(), rc.answered.end(), store_host_rank) != rc.answered.end();
  if (!rc.store_reachable && !(store_host_rank >= 0 && host_answered)) {
    if (store_host_rank >= 0)
      return fmt::format("lost rank {} (the store it hosted is unreachable: {})", store_host_rank,
                         rc.store_error);
    return fmt::format("lost the store, so the lost ranks are unknown ({})", rc.store_error);
  }
  std::vector<int> lost;
  for (int r : rc.missing)
    if (std::find(rc.busy.begin(), rc.busy.end(), r) == rc.busy.end()) lost.push_back(r);
  if (lost.empty()) return "";
  if (!rc.store_reachable)  // the host answered, then went away: use what was seen
    return fmt::format("lost {} (no answer to the roll call before the store closed; "
                       "ranks {} answered)",
                       ranks_phrase(lost), join_ranks(rc.answered));
  return fmt::format("lost {} (no answer to the roll call; ranks {} answered)",
                     ranks_phrase(lost), join_ranks(rc.answered));
}

}  // namespace ddp::dist::detail
