// See src/tensor/layout_stats.h.

#include "tensor/layout_stats.h"

#include <atomic>

namespace ddp::layout_stats {

namespace {
std::atomic<int64_t> g_conversions{0};
}  // namespace

void count_conversion() { g_conversions.fetch_add(1, std::memory_order_relaxed); }
int64_t conversions() { return g_conversions.load(std::memory_order_relaxed); }

}  // namespace ddp::layout_stats
