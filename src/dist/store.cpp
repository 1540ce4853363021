#include "ddp/dist/store.h"

#include <cmath>

#include "ddp/core/env.h"
#include "ddp/core/error.h"

namespace ddp::dist {

std::chrono::milliseconds Store::default_timeout() {
  const auto env = env_string("DDP_STORE_TIMEOUT_S");
  if (!env || env->empty()) return kDefaultTimeout;
  const double s = env_double("DDP_STORE_TIMEOUT_S", 0.0);
  DDP_CHECK(std::isfinite(s) && s > 0 && s <= 1e9,
            "environment variable DDP_STORE_TIMEOUT_S='{}' must be a positive number of seconds",
            *env);
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(s * 1000.0)));
}

Store::Store(std::chrono::milliseconds timeout) : timeout_ms_(0) { set_timeout(timeout); }

void Store::set_timeout(std::chrono::milliseconds timeout) {
  DDP_CHECK(timeout.count() >= 0, "Store::set_timeout: timeout must not be negative, got {} ms",
            timeout.count());
  timeout_ms_.store(timeout.count(), std::memory_order_relaxed);
}

void Store::set(const std::string& key, const std::string& value) { do_set(key, to_bytes(value)); }

std::string Store::get_string(const std::string& key) { return to_string(do_get(key, timeout())); }

std::string Store::get_string(const std::string& key, std::chrono::milliseconds timeout) {
  return to_string(do_get(key, timeout));
}

std::string Store::compare_set(const std::string& key, const std::string& expected,
                               const std::string& desired) {
  return to_string(do_compare_set(key, to_bytes(expected), to_bytes(desired)));
}

}  // namespace ddp::dist
