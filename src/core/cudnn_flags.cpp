// See src/core/cudnn_flags.h. Built with and without CUDA: the flags are
// plain process-wide settings.

#include "core/cudnn_flags.h"

#include <atomic>

#include "ddp/core/env.h"

namespace ddp::cudnn_flags {

namespace {
// -1: not read from the environment yet; else 0 / 1.
std::atomic<int> g_allow_tf32{-1};
}  // namespace

bool allow_tf32() {
  int v = g_allow_tf32.load(std::memory_order_relaxed);
  if (v < 0) {
    // Two threads may both read the environment; they store the same value.
    // A bad value raises here and leaves the flag unread, so each call says so.
    v = env_bool("DDP_CUDNN_ALLOW_TF32", true) ? 1 : 0;
    int expected = -1;
    g_allow_tf32.compare_exchange_strong(expected, v, std::memory_order_relaxed);
    v = g_allow_tf32.load(std::memory_order_relaxed);
  }
  return v == 1;
}

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow ? 1 : 0, std::memory_order_relaxed); }

void reset_allow_tf32() { g_allow_tf32.store(-1, std::memory_order_relaxed); }

bool deterministic() {
  static const bool on = env_bool("DDP_CUDNN_DETERMINISTIC", false);
  return on;
}

}  // namespace ddp::cudnn_flags
