#pragma once
// TCPStore: the Store over TCP. One process (rank 0, usually) runs the
// server; every process, the server's included, talks to it as a client.
//
//   TCPStoreOptions o;
//   o.host = "node0"; o.port = 29500; o.is_server = (rank == 0);
//   o.world_size = world;
//   TCPStore store(o);                       // rank 0 also starts the server
//   store.set("nccl_id", id_bytes);          // rank 0
//   auto id = store.get("nccl_id");          // the others; waits until set
//
// The server is a single thread multiplexing every connection with poll();
// requests that wait (get, wait) are parked server-side, so one waiting client
// never holds up the others. See Note [TCPStore framing] (src/dist/wire.h),
// Note [Hostile peers] and Note [Waiting requests] (tcp_store_server.cpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ddp/dist/store.h"

namespace ddp::dist {

struct TCPStoreOptions {
  // Where clients connect: a host name or an address of the server machine.
  std::string host = "127.0.0.1";
  // 0 lets a server pick a free port (read it back with TCPStore::port());
  // a client must be given the server's port.
  uint16_t port = 0;
  // This process runs the server (in a background thread) besides its client.
  bool is_server = false;
  // When set, each TCPStore counts itself as one of world_size workers, and
  // the server's TCPStore (with wait_for_workers) returns from its
  // constructor only once all have joined, raising TimeoutError naming how
  // many did when the timeout passes first. Clients never wait here.
  std::optional<int> world_size;
  bool wait_for_workers = true;
  // Timeout of connect, of every request and of the blocking calls;
  // unset: Store::default_timeout() (300 s or DDP_STORE_TIMEOUT_S).
  std::optional<std::chrono::milliseconds> timeout;
  // Job token: a server with a token drops every client whose first message
  // does not carry the same token, and clients present it on connect.
  // Empty: the environment variable DDP_STORE_TOKEN, if set. It keeps ranks
  // of another job (or a stray tool) out of this job's store; it travels in
  // clear text, so it is no defence against someone who can sniff the link.
  std::string token;
  // The largest frame either side accepts; a peer announcing more is dropped
  // before anything is allocated for it. Use the same value on all ranks.
  size_t max_message_bytes = size_t(64) << 20;
  // The address the server listens on. "0.0.0.0" (all IPv4 interfaces) is
  // what multi-node jobs need; pass "127.0.0.1" to keep a single-machine job
  // (and the tests) off the network, or "::" for IPv6.
  std::string bind_address = "0.0.0.0";
};

// The server alone, for a process that wants to host a store without being a
// rank (a launcher, say). TCPStore with is_server = true owns one of these.
class TCPStoreServer {
 public:
  // Binds and listens (raising IoError when that fails, e.g. a port in use);
  // serving starts with start() or run().
  explicit TCPStoreServer(const TCPStoreOptions& options);
  // Stops and joins the background thread; never throws.
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  uint16_t port() const;
  // Serves in a background thread until stop() or destruction.
  void start();
  // Serves in the calling thread until stop() is called from another thread
  // (which must then finish before the server is destroyed).
  void run();
  // Thread-safe and idempotent; returns once the serving loop has ended
  // (when start() was used) or immediately (it only signals run()).
  void stop();

 private:
  struct Impl;  // the poll loop (tcp_store_server.cpp)
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::mutex mu_;  // guards thread_ against concurrent start()/stop()
};

class TCPStore : public Store {
 public:
  explicit TCPStore(TCPStoreOptions options);
  // Closes the connection and, in the server's process, stops the server
  // (the other ranks' next requests then fail with IoError). Never throws.
  ~TCPStore() override;

  // The port the server listens on (the real one when 0 was asked for).
  uint16_t port() const { return port_; }
  const std::string& host() const { return options_.host; }
  bool is_server() const { return server_ != nullptr; }

  // Hosts a store server in the calling thread, for a process that is not a
  // rank (a launcher). Calls on_listening with the real port once it listens,
  // then serves until the process ends. Raises IoError when it cannot listen.
  static void serve(const TCPStoreOptions& options,
                    const std::function<void(uint16_t port)>& on_listening = {});

 protected:
  void do_set(const std::string& key, const Bytes& value) override;
  Bytes do_get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t do_add(const std::string& key, int64_t delta) override;
  Bytes do_compare_set(const std::string& key, const Bytes& expected,
                       const Bytes& desired) override;
  bool do_check(const std::vector<std::string>& keys) override;
  void do_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool do_delete_key(const std::string& key) override;
  int64_t do_num_keys() override;

 private:
  // One request/response exchange under mu_; returns the reply payload (its
  // first byte is the status). `wait` is how long the server may
  // legitimately hold the request (get/wait); the receive deadline is the
  // store timeout plus that.
  std::vector<uint8_t> request(std::vector<uint8_t> frame, const std::string& what,
                               std::chrono::milliseconds wait = std::chrono::milliseconds(0));
  void ensure_connected_locked(std::chrono::steady_clock::time_point deadline);
  void close_locked() noexcept;
  void join_workers();
  std::string where() const;

  TCPStoreOptions options_;
  uint16_t port_ = 0;
  std::unique_ptr<TCPStoreServer> server_;
  std::mutex mu_;  // one request in flight per connection
  int fd_ = -1;    // the connection; -1 until connected or after a failure
};

}  // namespace ddp::dist
