#pragma once
// The rendezvous key-value store that process groups stand on (the twin of
// torch.distributed.Store). Ranks exchange small blobs through it: NCCL unique
// ids, Gloo addresses, barrier counters. Implementations: TCPStore
// (tcp_store.h), PrefixStore (prefix_store.h).
//
// Note [Store interface]
// The public methods are non-virtual and forward to protected do_* hooks
// (the non-virtual-interface pattern). That way the convenience overloads
// (string values, default timeouts) live once here and a subclass that
// overrides a hook never hides them. The blocking hooks take the timeout
// explicitly, so a wrapper such as PrefixStore applies its own timeout rather
// than the one of the store it wraps.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp::dist {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  // 300 s, the torch default; DDP_STORE_TIMEOUT_S (seconds, may be
  // fractional, > 0) overrides it. A malformed value raises ValueError.
  static constexpr std::chrono::milliseconds kDefaultTimeout{300'000};
  static std::chrono::milliseconds default_timeout();

  Store() : Store(default_timeout()) {}
  explicit Store(std::chrono::milliseconds timeout);
  virtual ~Store() = default;
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Stores value under key, replacing any previous value, and wakes the
  // requests that wait for key.
  void set(const std::string& key, const Bytes& value) { do_set(key, value); }
  void set(const std::string& key, const std::string& value);

  // The value of key; waits until the key exists, up to timeout() (or the
  // given timeout), then raises TimeoutError.
  Bytes get(const std::string& key) { return do_get(key, timeout()); }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) {
    return do_get(key, timeout);
  }
  std::string get_string(const std::string& key);
  std::string get_string(const std::string& key, std::chrono::milliseconds timeout);

  // Adds delta to the counter under key (a missing key counts as 0) and
  // returns the new value. The counter is stored as decimal text, as in
  // torch, so get_string() reads it; adding to a value that is not an
  // integer raises ValueError.
  int64_t add(const std::string& key, int64_t delta) { return do_add(key, delta); }

  // Atomically: if the current value equals expected, store desired.
  // A missing key counts as equal to an empty expected. Returns the value
  // stored afterwards: desired when the swap happened, otherwise the current
  // value, and an empty value when the key still does not exist (torch
  // returns `expected` there, which its own source calls a lie).
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
    return do_compare_set(key, expected, desired);
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);

  // True when every key exists (true for an empty list). Never waits.
  bool check(const std::vector<std::string>& keys) { return do_check(keys); }

  // Waits until every key exists. Raises TimeoutError naming the keys still
  // missing and the time waited.
  void wait(const std::vector<std::string>& keys) { do_wait(keys, timeout()); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
    do_wait(keys, timeout);
  }

  // Removes key; true when it existed.
  bool delete_key(const std::string& key) { return do_delete_key(key); }

  // The number of keys in the whole store (a PrefixStore counts all of them,
  // as in torch). Keys the store keeps for itself are not counted.
  int64_t num_keys() { return do_num_keys(); }

  // The timeout of the blocking calls without an explicit timeout. Safe to
  // change while other threads use the store.
  std::chrono::milliseconds timeout() const {
    return std::chrono::milliseconds(timeout_ms_.load(std::memory_order_relaxed));
  }
  void set_timeout(std::chrono::milliseconds timeout);

 protected:
  virtual void do_set(const std::string& key, const Bytes& value) = 0;
  virtual Bytes do_get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  virtual int64_t do_add(const std::string& key, int64_t delta) = 0;
  virtual Bytes do_compare_set(const std::string& key, const Bytes& expected,
                               const Bytes& desired) = 0;
  virtual bool do_check(const std::vector<std::string>& keys) = 0;
  virtual void do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool do_delete_key(const std::string& key) = 0;
  virtual int64_t do_num_keys() = 0;

 private:
  std::atomic<int64_t> timeout_ms_;
};

// Conversions between the byte values and text.
inline Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
inline std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace ddp::dist
