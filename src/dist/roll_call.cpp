// See Note [Naming the lost rank] in roll_call.h.

#include "roll_call.h"

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
                   std::chrono::milliseconds grace) {
  RollCall rc;
  auto key = [&](int r) { return prefix + "/" + std::to_string(r); };
  try {
    store.set(key(rank), std::string("alive"));
    const auto deadline = std::chrono::steady_clock::now() + grace;
    std::vector<bool> seen(size_t(size), false);
    seen[size_t(rank)] = true;
    for (;;) {
      bool all = true;
      for (int r = 0; r < size; ++r) {
        if (!seen[size_t(r)]) seen[size_t(r)] = store.check({key(r)});
        all = all && seen[size_t(r)];
      }
      if (all || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (int r = 0; r < size; ++r) (seen[size_t(r)] ? rc.answered : rc.missing).push_back(r);
  } catch (const std::exception& e) {
    rc.store_reachable = false;
    rc.store_error = e.what();
    rc.answered = {rank};
  }
  return rc;
}

std::string describe_lost(const RollCall& rc, int store_host_rank) {
  if (!rc.store_reachable) {
    if (store_host_rank >= 0)
      return fmt::format("lost rank {} (the store it hosted is unreachable: {})", store_host_rank,
                         rc.store_error);
    return fmt::format("lost the store, so the lost ranks are unknown ({})", rc.store_error);
  }
  if (rc.missing.empty()) return "";
  return fmt::format("lost rank{} {} (no answer to the roll call; ranks {} answered)",
                     rc.missing.size() > 1 ? "s" : "", join_ranks(rc.missing),
                     join_ranks(rc.answered));
}

}  // namespace ddp::dist::detail
