// The "gloo" ProcessGroup backend. Built only when Gloo is found
// (src/CMakeLists.txt builds *_gloo.cpp files then).
//
// Note [Gloo rendezvous]
// Gloo's full-mesh connect publishes each rank's listening addresses in a
// gloo::rendezvous::Store and reads the others'. GlooStore lends it libddp's
// own store under the group's prefix, so one TCPStore serves the whole job
// and Gloo needs neither Redis nor a shared file system. The connect timeout
// is the group's timeout, and a rank that never arrives surfaces as our
// store's TimeoutError, which names the missing keys (the ranks).
//
// Note [Gloo address]
// Every rank listens on one address that all peers must reach. Gloo binds a
// host name or an interface; a machine's host name often resolves to
// 127.0.1.1 (Debian) or to an address of the wrong network, so by default we
// take the address the kernel routes towards MASTER_ADDR: on one machine
// that is 127.0.0.1, across machines the interface facing the master, and
// inside a network namespace the namespace's own address. GLOO_SOCKET_IFNAME
// or GlooOptions pick something else.
//
// Note [SIGPIPE]
// Gloo's TCP transport writes to its sockets with plain write/writev, so a
// write to a peer that has died raises SIGPIPE, whose default action kills
// the process: the survivors of a lost rank would die silently instead of
// reporting it (Note [Naming the lost rank]). So creating a gloo group sets
// SIGPIPE to "ignore" when it is still at its default; writes then fail
// with EPIPE, which Gloo turns into an error. A handler the application
// installed itself is left alone. (Python, and so torch, ignores SIGPIPE
// from the start; a C++ program has to.)
//
// Note [Gloo world of one]
// Gloo's algorithms need a connection to a neighbour, and a single rank has
// none. With size() == 1 no Gloo context is made: the collectives are local
// copies, still run on the worker (a single one: GlooOptions::threads does not
// apply) so that Works complete in order.
//
// Note [Gloo collectives in flight]
// With one worker a bucket's allreduce cannot start until the previous one
// has ended, so the link idles during each collective's latency-bound
// start and end. GlooOptions::threads (DDP_GLOO_THREADS) lets up to K
// collectives of a group run at once on K workers of its WorkQueue (Note
// [One worker per group]), as torch's ProcessGroupGloo does with its
// `threads` option. What keeps that correct:
// - Matching: every rank numbers its collectives in issue order, on the
//   caller's thread, at submission (Impl::submit), and each Gloo call of a
//   collective gets the tag (number << 12 | call index within it), so
//   concurrent collectives use disjoint slots and the ranks pair the same
//   ones whichever worker runs them. Tags wrap after 2^20 collectives,
//   far more than can be in flight; the call index wraps after 4096 calls
//   of one collective (a broadcast of that many large tensors), which run
//   one after another and may reuse a slot as sequential collectives with
//   one tag always did.
// - Gloo itself: a collective's slots are its algorithm's prefix, then the
//   32-bit tag, then a small step count (Gloo's Slot::build), so distinct
//   tags never share a slot; each Gloo call only creates unbound buffers of
//   its own on the shared context and posts sends/receives on them; the tcp
//   transport keeps its pending operations per slot under the context's
//   mutex and each pair's state under the pair's mutex, so algorithms with
//   distinct slots may run on one context from several threads (what torch
//   does with two workers on one context).
// - Progress: tasks start in submission order on every rank, so the oldest
//   collective not finished everywhere has been started, or will be by a
//   free worker, on every rank: no cycle of ranks waiting on each other.
// - Completion: Works may complete out of issue order. Every waiter waits
//   on its own Work (the reducer waits every bucket), the flight recorder's
//   position is the oldest collective not finished, and a barrier is a
//   fence: it starts only once everything issued before it has completed,
//   as its users expect.
// - Failure: the first failing collective takes the roll call and breaks
//   the group under a mutex; one failing at the same time (its connections
//   closed by the first) then raises the same error. The error names the
//   collective by its flight-recorder number ("allreduce #42"), since with
//   K > 1 that is no longer simply the oldest one.
// - State: the ring reduce-scatter's scratch buffers come from a pool, one
//   set per running collective.
// The default stays one worker: two let un-waited allreduces of 64 KiB to
// 64 MiB finish 1.2 to 2.8 times sooner over loopback, but neither DDP on
// the emulated ResNet-50 twin (shaped links, where buckets are bandwidth
// bound) nor bench_ddp measured clearly faster with two (docs/dist.md,
// docs/benchmarks.md).

#include "ddp/dist/process_group_gloo.h"

#include <atomic>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "ddp/core/env.h"
#include "ddp/dist/backend_registry.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/prefix_store.h"
#include "ddp/dist/tcp_store.h"
#include "host_collectives.h"
#include "host_staging.h"
#include "desync_report.h"
#include "net.h"
#include "roll_call.h"
#include "work_queue.h"

namespace ddp::dist {

using namespace detail;

namespace {

// See Note [Gloo rendezvous].
class GlooStore : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<dist::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, Bytes(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    Bytes b = store_->get(key);
    return std::vector<char>(b.begin(), b.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    store_->wait(keys, t);
  }

 private:
  std::shared_ptr<dist::Store> store_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <class T>
ReduceFn reduce_fn_as(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:  // sum, then divide by size
      return &gloo::sum<T>;
    case ReduceOp::product:
      return &gloo::product<T>;
    case ReduceOp::min:
      return &gloo::min<T>;
    case ReduceOp::max:
      return &gloo::max<T>;
  }
  return &gloo::sum<T>;
}

// Calls fn(T{}) with the C++ type of a wire dtype (Note [Half precision on
// the wire]: f16/bf16 never get here).
template <class F>
void with_wire_type(DType wire, F&& fn) {
  switch (wire) {
    case DType::f32: return fn(float{});
    case DType::f64: return fn(double{});
    case DType::i32: return fn(int32_t{});
    case DType::i64: return fn(int64_t{});
    case DType::u8: return fn(uint8_t{});
    default: break;
  }
  DDP_THROW(DTypeError, "gloo: no reduction for {}", dtype_name(wire));
}

// The slot of point-to-point messages: a prefix no Gloo collective uses,
// then the user's tag, so both sides agree without talking.
constexpr uint64_t kP2PSlotPrefix = uint64_t(0x80) << 56;
// The slot of the ring reduce-scatter's messages (Note [Gloo ring
// reduce-scatter]), then the collective's sequence tag.
constexpr uint64_t kRingSlotPrefix = uint64_t(0x81) << 56;
constexpr size_t kRingPieceBytes = size_t(1) << 20;

// Note [Gloo collectives in flight]: tag = collective number << 12 | call.
constexpr int kCallBits = 12;
constexpr uint32_t kCallMask = (uint32_t(1) << kCallBits) - 1;
constexpr int kMaxGlooThreads = 64;
constexpr int kDefaultGlooThreads = 1;

// The collective a worker thread is running: set by Impl::submit's task
// around its body (and restored after), read by Impl::tag(). Per thread,
// and only while a task of this group runs on it, so no two groups share it.
struct Lane {
  uint32_t number = 0;  // the collective's number in issue order
  uint32_t calls = 0;   // Gloo calls made so far
};
thread_local Lane* t_lane = nullptr;

// GlooOptions::threads, else DDP_GLOO_THREADS, else the default; ValueError
// naming the option or variable when out of range.
int gloo_threads(const GlooOptions& o) {
  if (o.threads != 0) {
    DDP_CHECK_T(ValueError, o.threads >= 1 && o.threads <= kMaxGlooThreads,
                "GlooOptions.threads must be 0 (DDP_GLOO_THREADS or the default) or 1..{}, got {}",
                kMaxGlooThreads, o.threads);
    return o.threads;
  }
  const int64_t v = env_int("DDP_GLOO_THREADS", kDefaultGlooThreads);
  DDP_CHECK_T(ValueError, v >= 1 && v <= kMaxGlooThreads,
              "environment variable DDP_GLOO_THREADS must be 1..{}, got {}", kMaxGlooThreads, v);
  return int(v);
}

// The host the store's clients connect to (through any PrefixStores): the
// default peer for Note [Gloo address] when no master_addr is given.
std::string store_host(const std::shared_ptr<dist::Store>& s) {
  if (auto* t = dynamic_cast<const TCPStore*>(s.get())) return t->host();
  if (auto* p = dynamic_cast<const PrefixStore*>(s.get())) return store_host(p->underlying());
  return "";
}

// See Note [SIGPIPE].
void ignore_sigpipe_if_default() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0) return;
  if (current.sa_handler != SIG_DFL || (current.sa_flags & SA_SIGINFO)) return;
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  if (::sigaction(SIGPIPE, &ignore, nullptr) == 0)
    DDP_LOG_DEBUG("gloo: SIGPIPE set to ignore, so a lost peer is an error, not a kill");
}

std::string bind_description(const gloo::transport::tcp::attr& a) {
  return a.iface.empty() ? "address " + a.hostname : "interface " + a.iface;
}

}  // namespace

struct ProcessGroupGloo::Impl final : HostTransport {
  int rank = 0;
  int size = 1;
  std::shared_ptr<dist::Store> store;  // the group's prefix store
  std::shared_ptr<gloo::rendezvous::Context> ctx;  // null for a world of one
  // Per collective; set_timeout() changes it while the worker runs.
  std::atomic<int64_t> timeout_ms{0};
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms.load()); }
  std::chrono::milliseconds grace{0};
  int store_host_rank = -1;
  int threads = 1;  // Note [Gloo collectives in flight]
  // Every rank numbers its collectives alike, in issue order.
  std::atomic<uint32_t> next_number{0};
  // The ring reduce-scatter's receive and partial-sum buffers, kept between
  // calls: a fresh multi-megabyte buffer per bucket and step costs its page
  // faults every time (Note [Gloo ring reduce-scatter]). One set per
  // running collective, from a pool (Note [Gloo collectives in flight]).
  struct RingBuffer {
    std::unique_ptr<std::byte[]> data;
    size_t bytes = 0;
    std::byte* get(size_t n) {
      if (n > bytes) {
        data = std::make_unique_for_overwrite<std::byte[]>(n);
        bytes = n;
      }
      return data.get();
    }
  };
  struct RingBuffers {
    RingBuffer incoming, partial[2];
  };
  std::mutex ring_mu;
  std::vector<std::unique_ptr<RingBuffers>> ring_pool;
  // Lends a set for one collective; gives it back when the holder ends.
  struct RingLoan {
    Impl* impl;
    std::unique_ptr<RingBuffers> set;
    ~RingLoan() {
      std::lock_guard<std::mutex> lk(impl->ring_mu);
      impl->ring_pool.push_back(std::move(set));
    }
  };
  std::unique_ptr<RingBuffers> take_ring() {
    std::lock_guard<std::mutex> lk(ring_mu);
    if (ring_pool.empty()) return std::make_unique<RingBuffers>();
    auto set = std::move(ring_pool.back());
    ring_pool.pop_back();
    return set;
  }
  RingLoan borrow_ring() { return RingLoan{this, take_ring()}; }
  std::mutex fail_mu;  // one roll call at a time (Note [Gloo collectives in flight])
  std::mutex broken_mu;
  std::exception_ptr broken;  // the first failure; every later call rethrows it
  std::unique_ptr<WorkQueue> queue;
  const FlightRecorder* recorder = nullptr;  // the group's (Note [Desync report])
  std::unique_ptr<Heartbeat> heartbeat;       // last: stops before the store goes

  std::exception_ptr first_failure() {
    std::lock_guard<std::mutex> lk(broken_mu);
    return broken;
  }

  // Turns a Gloo failure into the group's error, once (Note [Naming the lost
  // rank]): close our connections so that our neighbours fail now rather
  // than at their timeout, take the roll call, name the missing ranks.
  [[noreturn]] void fail(const std::string& op, const std::string& what) {
    std::lock_guard<std::mutex> one_at_a_time(fail_mu);
    if (auto e = first_failure()) std::rethrow_exception(e);
    if (ctx) {
      try {
        ctx->closeConnections();
      } catch (const std::exception& e) {
        DDP_LOG_DEBUG("gloo rank {}: closing connections after a failure: {}", rank, e.what());
      }
    }
    // Note [Desync report]: the roll call carries every survivor's position.
    RollCall rc = roll_call(*store, "failure/roll_call", rank, size, grace,
                            rank == store_host_rank, recorder ? desync_payload(*recorder) : "",
                            "heartbeat");
    std::string lost = describe_lost(rc, store_host_rank);
    std::string report = desync_line(rc);
    if (!report.empty()) DDP_LOG_ERROR("gloo rank {} of {}: {}", rank, size, report);
    if (recorder) {
      const std::string path = recorder->dump_to_file(fmt::format("{} failed: {}", op, what));
      if (!path.empty()) report += (report.empty() ? "" : "; ") + ("flight recorder dumped to " + path);
    }
    if (!report.empty()) report = "; " + report;
    std::exception_ptr err;
    try {
      if (!lost.empty())
        DDP_THROW(DistNetworkError, "{} (gloo rank {} of {}): {}; gloo said: {}{}", op, rank, size,
                  lost, what, report);
      DDP_THROW(GlooError, "{} (gloo rank {} of {}): {} (every rank is alive){}", op, rank, size,
                what, report);
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lk(broken_mu);
      if (!broken) broken = err;
    }
    std::rethrow_exception(err);
  }

  // Queues body on the worker. A Gloo exception (gloo::Exception,
  // gloo::EnforceNotMet, both std::exception) becomes the group's failure;
  // ddp::Error from our own checks passes through.
  int transport_rank() const override { return rank; }
  int transport_size() const override { return size; }

  // Note [Gloo collectives in flight]: numbered here, on the caller's
  // thread, in issue order; a barrier is a fence.
  WorkPtr submit(const char* op, Tensors result, std::function<void()> body) override {
    if (auto e = first_failure()) std::rethrow_exception(e);
    const uint32_t number = next_number.fetch_add(1, std::memory_order_relaxed);
    const bool fence = threads > 1 && std::strcmp(op, "barrier") == 0;
    return queue->submit_with_work(
        op, std::move(result),
        [this, op, number, body = std::move(body)](const WorkPtr& w) mutable {
          if (auto e = first_failure()) std::rethrow_exception(e);
          Lane lane{number, 0};
          struct Restore {
            Lane* outer;
            ~Restore() { t_lane = outer; }
          } restore{t_lane};
          t_lane = &lane;
          try {
            body();
          } catch (const Error&) {
            throw;
          } catch (const std::exception& e) {
            const uint64_t seq = w->record_seq();
            fail(seq ? fmt::format("{} #{}", op, seq) : std::string(op), e.what());
          }
          return true;
        },
        fence);
  }

  // The tag of the running collective's next Gloo call.
  uint32_t tag() {
    Lane* lane = t_lane;
    DDP_CHECK(lane != nullptr, "gloo (rank {}): a collective ran outside its worker", rank);
    return lane->number << kCallBits | (lane->calls++ & kCallMask);
  }

  // ---- HostTransport (Note [Host collective sequence]) ----------------------
  void reduce(const char*, DType wire, void* data, int64_t n, ReduceOp op, int root) override {
    if (n == 0 || !ctx) return;
    with_wire_type(wire, [&](auto zero) {
      using T = decltype(zero);
      if (root < 0) {
        gloo::AllreduceOptions o(ctx);
        o.setOutput(static_cast<T*>(data), size_t(n));
        o.setReduceFunction(reduce_fn_as<T>(op));
        o.setTag(tag());
        o.setTimeout(timeout());
        gloo::allreduce(o);
      } else {
        gloo::ReduceOptions o(ctx);
        o.setOutput(static_cast<T*>(data), size_t(n));
        o.setRoot(root);
        o.setReduceFunction(reduce_fn_as<T>(op));
        o.setTag(tag());
        o.setTimeout(timeout());
        gloo::reduce(o);
      }
    });
  }

  void broadcast(const char*, void* data, size_t nbytes, int root) override {
    if (nbytes == 0 || !ctx) return;
    gloo::BroadcastOptions o(ctx);
    o.setOutput(static_cast<uint8_t*>(data), nbytes);
    o.setRoot(root);
    o.setTag(tag());
    o.setTimeout(timeout());
    gloo::broadcast(o);
  }

  void allgather(const char*, const void* in, void* out, size_t n) override {
    if (!ctx) {
      if (in) std::memcpy(out, in, n);
      return;
    }
    gloo::AllgatherOptions o(ctx);
    // No input when it already sits in its slot: Gloo then works in place.
    if (in) o.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), n);
    o.setOutput(static_cast<uint8_t*>(out), n * size_t(size));
    o.setTag(tag());
    o.setTimeout(timeout());
    gloo::allgather(o);
  }

  // Note [Gloo ring reduce-scatter]
  // The installed Gloo offers reduce-scatter only as an old-style algorithm
  // object (ReduceScatterHalvingDoubling) that registers its own buffers per
  // instance, so it is run as a ring over unbound buffers instead: in step s
  // (of size - 1) every rank sends its partial sum of chunk (rank - s - 1) to
  // its right neighbour, and adds its own input of chunk (rank - s - 2) to the
  // partial sum of that chunk it receives from its left one; after the last
  // step it holds the reduction of chunk `rank` over all ranks. Each rank
  // sends and receives (size - 1) chunks, (size - 1) / size of the input,
  // where the allreduce that stood in for it before moved about twice the
  // whole input.
  void reduce_scatter(const char*, DType wire, void* in, bool, void* out, int64_t n,
                      ReduceOp rop) override {
    const size_t chunk = size_t(n) * element_size(wire);
    const auto* input = static_cast<const std::byte*>(in);
    if (!ctx || size == 1) {
      std::memcpy(out, input + size_t(rank) * chunk, chunk);
      return;
    }
    if (n == 0) return;
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    // Each step's chunk travels in pieces of at most kRingPieceBytes, each on
    // its own slot and receive buffer, so that adding one piece overlaps
    // receiving the next. The input is only read: the partial sums live in
    // two chunk-sized buffers (the one being sent, the one being built), and
    // the last step builds straight into out.
    const size_t esize = element_size(wire);
    const size_t piece = std::max(esize, kRingPieceBytes / esize * esize);
    const size_t pieces = (chunk + piece - 1) / piece;
    const uint64_t base_slot = kRingSlotPrefix | uint64_t(tag());
    RingLoan ring = borrow_ring();
    std::byte* incoming = ring.set->incoming.get(chunk);
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> receivers;
    for (size_t j = 0; j < pieces; ++j)
      receivers.push_back(ctx->createUnboundBuffer(incoming + j * piece,
                                                   std::min(piece, chunk - j * piece)));
    with_wire_type(wire, [&](auto zero) {
      using T = decltype(zero);
      const auto combine = reduce_fn_as<T>(rop);
      std::byte* sending = const_cast<std::byte*>(input) +
                           size_t((rank + size - 1) % size) * chunk;  // step 0: our own chunk
      for (int s = 0; s < size - 1; ++s) {
        const size_t recv_idx = size_t(((rank - s - 2) % size + size) % size);
        const bool last = s == size - 2;
        std::byte* building = static_cast<std::byte*>(out);
        if (!last) building = ring.set->partial[s % 2].get(chunk);
        // Slots differ per step and piece (bits 32..55 below the prefix).
        auto slot = [&](size_t j) {
          return base_slot | ((uint64_t(s) * pieces + j) & 0xFFFFFF) << 32;
        };
        auto sender = ctx->createUnboundBuffer(sending, chunk);
        for (size_t j = 0; j < pieces; ++j) receivers[j]->recv(left, slot(j));
        for (size_t j = 0; j < pieces; ++j)
          sender->send(right, slot(j), j * piece, std::min(piece, chunk - j * piece));
        for (size_t j = 0; j < pieces; ++j) {
          receivers[j]->waitRecv(timeout());
          const size_t at = j * piece, len = std::min(piece, chunk - at);
          combine(building + at, input + recv_idx * chunk + at, incoming + at,
                  len / esize);
        }
        for (size_t j = 0; j < pieces; ++j) sender->waitSend(timeout());
        sending = building;
      }
    });
  }

  void all_to_all(const char*, const void* in, void* out, size_t chunk) override {
    const size_t n = chunk * size_t(size);
    if (!ctx) {
      if (in) std::memcpy(out, in, n);
      return;
    }
    std::unique_ptr<std::byte[]> copy;  // Gloo needs distinct buffers
    if (!in) {
      copy = std::make_unique_for_overwrite<std::byte[]>(n);
      std::memcpy(copy.get(), out, n);
      in = copy.get();
    }
    gloo::AlltoallOptions o(ctx);
    o.setInput(const_cast<uint8_t*>(static_cast<const uint8_t*>(in)), n);
    o.setOutput(static_cast<uint8_t*>(out), n);
    o.setTag(tag());
    o.setTimeout(timeout());
    gloo::alltoall(o);
  }

  void barrier() override {
    if (!ctx) return;
    gloo::BarrierOptions o(ctx);
    o.setTag(tag());
    o.setTimeout(timeout());
    gloo::barrier(o);
  }
};

ProcessGroupGloo::ProcessGroupGloo(int rank, int size, std::unique_ptr<Impl> impl)
    : HostProcessGroup(rank, size), impl_(std::move(impl)) {
  ProcessGroup::set_timeout(impl_->timeout());
  impl_->recorder = &flight_recorder();
  if (size > 1)  // Note [Roll call cost]: busy ranks are not lost ones
    impl_->heartbeat = std::make_unique<Heartbeat>(
        impl_->store, "heartbeat", rank, Heartbeat::kDefaultPeriod,
        [r = impl_->recorder] { return desync_payload(*r); });
  impl_->queue = std::make_unique<WorkQueue>("gloo", rank);
  impl_->queue->start({}, impl_->threads);
}

std::shared_ptr<ProcessGroupGloo> ProcessGroupGloo::create(std::shared_ptr<Store> store, int rank,
                                                           int size, GlooOptions options) {
  DDP_CHECK(store != nullptr, "ProcessGroupGloo::create: no store");
  DDP_CHECK(size >= 1 && rank >= 0 && rank < size,
            "ProcessGroupGloo::create: invalid rank {} for world size {}", rank, size);
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->size = size;
  impl->timeout_ms = (options.timeout.count() > 0 ? options.timeout : store->timeout()).count();
  impl->grace = std::min(options.roll_call_grace, impl->timeout());
  impl->store_host_rank = options.store_host_rank;
  // Note [Gloo world of one]: its local copies keep one worker.
  const int threads = gloo_threads(options);  // checked for every size
  impl->threads = size > 1 ? threads : 1;
  std::string name = options.group_name;
  if (name.empty())  // the n-th gloo group of this rank (the counter lives in the store)
    name = fmt::format("gloo/{}", store->add(fmt::format("gloo/groups_of_rank_{}", rank), 1));
  impl->store = std::make_shared<PrefixStore>(name, store);

  if (size > 1) {  // See Note [Gloo world of one]
    ignore_sigpipe_if_default();  // See Note [SIGPIPE]
    gloo::transport::tcp::attr attr;  // Note [Gloo address]
    std::string iface = options.iface.empty() ? env_string("GLOO_SOCKET_IFNAME", "") : options.iface;
    if (!iface.empty()) {
      attr.iface = iface;
    } else if (!options.hostname.empty()) {
      attr.hostname = options.hostname;
    } else {
      const std::string towards =
          options.master_addr.empty() ? store_host(store) : options.master_addr;
      const std::string local = towards.empty() ? "" : net::local_address_towards(towards);
      attr.hostname = local.empty() ? "127.0.0.1" : local;
    }
    std::shared_ptr<gloo::transport::Device> device;
    try {
      device = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      DDP_THROW(GlooError, "ProcessGroupGloo::create (rank {}): cannot listen on {}: {}", rank,
                bind_description(attr), e.what());
    }
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(impl->timeout());
    GlooStore gstore(impl->store);
    try {
      ctx->connectFullMesh(gstore, device);
    } catch (const Error&) {
      throw;  // our store's TimeoutError names the ranks that never came
    } catch (const std::exception& e) {
      DDP_THROW(GlooError, "ProcessGroupGloo::create (rank {} of {}): connecting to the peers: {}",
                rank, size, e.what());
    }
    impl->ctx = std::move(ctx);
  }
  return std::shared_ptr<ProcessGroupGloo>(new ProcessGroupGloo(rank, size, std::move(impl)));
}

void ProcessGroupGloo::set_timeout(std::chrono::milliseconds t) {
  ProcessGroup::set_timeout(t);
  impl_->timeout_ms = t.count();  // the next collective the worker runs uses it
}

ProcessGroupGloo::~ProcessGroupGloo() {
  impl_->queue->stop();
  impl_->heartbeat.reset();
  impl_->ctx.reset();
}

// The collectives: Note [Host collective sequence].
HostTransport& ProcessGroupGloo::transport() { return *impl_; }

// ---- point to point ----------------------------------------------------------
//
// Posted at once on the caller's thread (Gloo's transport runs them in its
// own thread, so a ring of sends cannot deadlock the worker); the Work
// completes when waited. (The base class refuses messages to one's own rank.)

namespace {

class GlooP2PWork : public Work {
 public:
  GlooP2PWork(std::string op, std::shared_ptr<gloo::Context> ctx,
              std::unique_ptr<gloo::transport::UnboundBuffer> buf, Staged staged, bool is_recv,
              int rank, int peer, std::chrono::milliseconds timeout)
      : Work(std::move(op)), ctx_(std::move(ctx)), buf_(std::move(buf)), staged_(std::move(staged)),
        is_recv_(is_recv), rank_(rank), peer_(peer), timeout_(timeout) {}

  void wait(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!is_completed()) {
        const auto limit = timeout.count() > 0 ? timeout : timeout_;
        std::exception_ptr err;
        try {
          try {
            if (is_recv_)
              buf_->waitRecv(limit);
            else
              buf_->waitSend(limit);
          } catch (const std::exception& e) {
            DDP_THROW(DistNetworkError, "{} (gloo rank {}): {} rank {} failed: {}", op(), rank_,
                      is_recv_ ? "receiving from" : "sending to", peer_, e.what());
          }
          if (is_recv_) unstage(staged_);
        } catch (...) {
          err = std::current_exception();
        }
        mark_completed(err);
      }
    }
    Work::wait(std::chrono::milliseconds(0));  // rethrows the error, if any
  }

 private:
  std::mutex mu_;
  std::shared_ptr<gloo::Context> ctx_;  // keeps the transport alive for the buffer
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  Staged staged_;
  bool is_recv_;
  int rank_, peer_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

static WorkPtr post_p2p(ProcessGroupGloo::Impl* p, const char* op, const Tensor& t, int peer,
                        int tag, bool is_recv) {
  if (auto e = p->first_failure()) std::rethrow_exception(e);
  DDP_CHECK(tag >= 0, "{} (gloo rank {}): negative tag {}", op, p->rank, tag);
  Staged s = stage(t, !is_recv);
  // Gloo needs a non-null buffer even for an empty message.
  static std::byte empty_message[1];
  void* data = s.host.nbytes() ? s.host.data_ptr() : empty_message;
  auto buf = p->ctx->createUnboundBuffer(data, s.host.nbytes());
  const uint64_t slot = kP2PSlotPrefix | uint64_t(uint32_t(tag));
  if (is_recv)
    buf->recv(peer, slot);
  else
    buf->send(peer, slot);
  auto w = std::make_shared<GlooP2PWork>(op, p->ctx, std::move(buf), s, is_recv, p->rank, peer,
                                         p->timeout());
  w->set_result({t});
  return w;
}

WorkPtr ProcessGroupGloo::do_send(const Tensor& tensor, int dst, int tag) {
  return post_p2p(impl_.get(), "send", tensor, dst, tag, false);
}

WorkPtr ProcessGroupGloo::do_recv(const Tensor& tensor, int src, int tag) {
  return post_p2p(impl_.get(), "recv", tensor, src, tag, true);
}

}  // namespace ddp::dist

// ---- registration (Note [Backend registry]) -------------------------------------

namespace ddp::dist {
namespace {

const BackendRegistration kGlooBackend{BackendInfo{
    .name = "gloo",
    .devices = {DeviceType::CPU, DeviceType::CUDA},  // CUDA staged (Note [Host staging])
    .native_cuda = false,
    .preference = 10,
    .unusable =
        [](const BackendContext& ctx) -> std::string {
          if (ctx.store) return "";
          return "it needs a store: set MASTER_ADDR and MASTER_PORT (or pass master_addr/"
                 "master_port or a store)";
        },
    .create =
        [](const BackendContext& ctx) -> std::shared_ptr<ProcessGroup> {
          GlooOptions go;
          go.master_addr = ctx.env.master_addr;
          go.timeout = ctx.timeout;
          go.store_host_rank = ctx.store_from_caller ? -1 : 0;
          return ProcessGroupGloo::create(ctx.store, ctx.rank, ctx.size, go);
        },
}};

}  // namespace
}  // namespace ddp::dist
