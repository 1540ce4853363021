// See Note [Naming the lost rank] in roll_call.h.

#include "roll_call.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "ddp/core/error.h"

namespace ddp::dist::detail {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

RollCall roll_call(Store& store, const std::string& prefix, int rank, int size,
                   std::chrono::milliseconds grace, bool hosts_store) {
  RollCall rc;
  auto key = [&](const char* what, int r) { return prefix + "/" + what + "/" + std::to_string(r); };
  std::vector<bool> seen(size_t(size), false);
  seen[size_t(rank)] = true;
  auto poll_until = [&](const char* what, const std::vector<bool>& wanted,
                        std::chrono::steady_clock::time_point deadline, std::vector<bool>& got) {
    for (;;) {
      bool all = true;
      for (int r = 0; r < size; ++r) {
        if (wanted[size_t(r)] && !got[size_t(r)]) got[size_t(r)] = store.check({key(what, r)});
        all = all && (!wanted[size_t(r)] || got[size_t(r)]);
      }
      if (all || std::chrono::steady_clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  };
  try {
    store.set(key("alive", rank), std::string("1"));
    poll_until("alive", std::vector<bool>(size_t(size), true),
               std::chrono::steady_clock::now() + grace, seen);
    // Done: the store's host keeps it up until every rank that answered has
    // read its own result, or the others would find the store gone and
    // blame its host.
    store.set(key("done", rank), std::string("1"));
    if (hosts_store) {
      std::vector<bool> done(size_t(size), false);
      poll_until("done", seen, std::chrono::steady_clock::now() + grace, done);
    }
  } catch (const std::exception& e) {
    rc.store_reachable = false;
    rc.store_error = e.what();
  }
  for (int r = 0; r < size; ++r) (seen[size_t(r)] ? rc.answered : rc.missing).push_back(r);
  return rc;
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
  if (rc.missing.empty()) return "";
  if (!rc.store_reachable)  // the host answered, then went away: use what was seen
    return fmt::format("lost rank{} {} (no answer to the roll call before the store closed; "
                       "ranks {} answered)",
                       rc.missing.size() > 1 ? "s" : "", join_ranks(rc.missing),
                       join_ranks(rc.answered));
  return fmt::format("lost rank{} {} (no answer to the roll call; ranks {} answered)",
                     rc.missing.size() > 1 ? "s" : "", join_ranks(rc.missing),
                     join_ranks(rc.answered));
}

}  // namespace ddp::dist::detail
