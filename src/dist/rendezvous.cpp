#include "ddp/dist/rendezvous.h"

#include <charconv>
#include <vector>

#include "ddp/core/error.h"
#include "dist/net.h"

namespace ddp::dist {

// Note [Store barrier]
// Each rank adds 1 to "<name>/count"; the value it gets back tells it which
// barrier of that name it is in (generation g = (count - 1) / world_size, as
// no rank can enter barrier g + 1 before all ranks entered g) and whether it
// is the last to arrive. It records its arrival as "<name>/arrived/<rank>" =
// g + 1 (one key per rank, overwritten by later barriers), and the last rank
// sets "<name>/done/<g>", which everybody waits for: one waiting key, so the
// server's work is linear in world_size. The last rank also deletes
// "<name>/done/<g-1>", which every rank has already seen (they could not have
// entered g otherwise), so the keys do not pile up. The arrival keys are only
// read on timeout, to name the ranks missing.

namespace {

std::string ranks_str(const std::vector<int>& ranks) {
  constexpr size_t kShown = 32;
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i)
    s += fmt::format("{}{}", i ? ", " : "", ranks[i]);
  if (ranks.size() > kShown) s += fmt::format(" and {} more", ranks.size() - kShown);
  return s;
}

// The ranks whose arrival key does not show generation `gen`.
std::vector<int> missing_ranks(Store& store, const std::string& name, int world_size, int64_t gen) {
  std::vector<int> missing;
  for (int r = 0; r < world_size; ++r) {
    const std::string key = fmt::format("{}/arrived/{}", name, r);
    if (!store.check({key})) {
      missing.push_back(r);
      continue;
    }
    const std::string v = store.get_string(key);
    int64_t seen = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), seen);
    if (ec != std::errc() || seen < gen + 1) missing.push_back(r);
  }
  return missing;
}

}  // namespace

void store_barrier(Store& store, const std::string& name, int rank, int world_size,
                   std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  DDP_CHECK(!name.empty(), "store_barrier: the barrier name is empty");
  DDP_CHECK(world_size >= 1, "store_barrier('{}'): world_size must be >= 1, got {}", name,
            world_size);
  DDP_CHECK(rank >= 0 && rank < world_size,
            "store_barrier('{}'): rank {} is outside [0, {}) (world_size {})", name, rank,
            world_size, world_size);
  DDP_CHECK(timeout.count() >= 0, "store_barrier('{}'): negative timeout {} ms", name,
            timeout.count());
  const auto start = Clock::now();
  const int64_t count = store.add(name + "/count", 1);
  const int64_t gen = (count - 1) / world_size;
  store.set(fmt::format("{}/arrived/{}", name, rank), std::to_string(gen + 1));
  const std::string done = fmt::format("{}/done/{}", name, gen);
  if (count == (gen + 1) * world_size) {
    store.set(done, std::string("1"));
    if (gen > 0) store.delete_key(fmt::format("{}/done/{}", name, gen - 1));
  }
  const auto left =
      timeout - std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  try {
    store.wait({done}, std::max(left, std::chrono::milliseconds(0)));
  } catch (const TimeoutError&) {
    const auto missing = missing_ranks(store, name, world_size, gen);
    if (missing.empty())
      DDP_THROW(TimeoutError,
                "store_barrier: all {} ranks arrived at '{}' but the barrier was not released "
                "within {} (the last ranks arrived just too late)",
                world_size, name, net::seconds_str(timeout));
    DDP_THROW(TimeoutError, "store_barrier: rank{} {} of {} did not arrive at '{}' within {}",
              missing.size() == 1 ? "" : "s", ranks_str(missing), world_size, name,
              net::seconds_str(timeout));
  }
}

}  // namespace ddp::dist
