// The "mpi" ProcessGroup backend. Built only when MPI is found (src/CMakeLists.txt).
//
// Note [MPI progress]
// Each group owns one worker thread (See Note [One worker per group]) that
// runs the collectives in submission order, with the ordinary blocking MPI
// calls (MPI_Allreduce, ...), an MPI failure becoming the Work's MpiError.
// They are Open MPI's fast path: coll/tuned picks the algorithm by size and
// world size, whereas the MPI_I* collectives go through libnbc, whose
// in-place allreduce is a binomial reduce to rank 0 followed by a broadcast
// (through a buffer of the whole message malloc'd per call), and which
// moves on only while someone calls MPI_Test. Posted and tested by the
// worker they gave 0.36-0.39x raw MPI_Allreduce's bus bandwidth at 2 ranks
// over 1-64 MiB (median over the sizes), blocking 0.96-0.98x; making the
// blocking call on a thread of its own, for the worker to wait on with a
// deadline, cost about 13 us more per call than making it on the worker
// (docs/benchmarks.md, bench_collectives). So the worker makes the call and
// a watchdog holds the deadline (Note [MPI timeouts]). A blocking call
// polls while it waits, as a raw MPI_Allreduce does.
// Point-to-point is different: a blocking MPI_Send in a ring would wait
// for a receive that the peer's worker cannot post until its own send
// returns, so send/recv post MPI_Isend/MPI_Irecv and the worker tests them
// between tasks (and, while nothing else is queued, in a short backoff
// loop), completing their Works as they finish.
//
// Note [MPI timeouts]
// A blocking MPI call cannot be interrupted, nor a posted collective
// cancelled, so a second thread holds the deadline: the watchdog
// (worker_watchdog_mpi.h). The worker marks each call's start and end with
// atomics only; the watchdog looks every 100 ms. When a deadline passes it
// takes the call and breaks the group: the timed-out ranks exchange their
// flight-recorder positions over a second communicator (Note [Desync
// report]) for up to min(5 s, timeout), then ping the ranks that sent none,
// to tell busy from lost (Note [MPI liveness] in desync_exchange_mpi.h),
// beside the worker's call, as MPI_THREAD_MULTIPLE allows. A worker back
// by then raises the TimeoutError itself; one still in MPI is given up:
// the watchdog fails its Work and every Work queued behind it, the worker
// thread is never joined, its task's buffers and this group's state are
// never freed (the destructor leaks them on purpose), and should MPI ever
// return it touches no Work. Either way the group is broken: every later
// call raises the same error, the destructor does not free the
// communicators, and the atexit handler skips MPI_Finalize (it could wait
// on the stuck call): the process should end, and mpirun will say that a
// rank exited without MPI_Finalize. That is the state a timeout leaves.
// Under MPI_THREAD_SERIALIZED (an application that initialised MPI so) no
// second thread may call MPI beside the worker: there, and with
// DDP_MPI_NONBLOCKING=1, the collectives are posted non-blocking (MPI_I*)
// and the worker tests them until they finish or the timeout passes (a
// short spin, then sleeps growing to 1 ms) and makes the report itself; a
// timed-out request stays posted, the task and the Work's tensors kept
// alive. That is the slow path above.
//
// Note [MPI initialisation and finalisation]
// MPI is process-global, so this file keeps the only process-global state of
// the backend: whether we initialised MPI, the thread level, and how many
// groups are alive. create() initialises MPI with MPI_THREAD_MULTIPLE unless
// someone else already did. Under MPI_THREAD_MULTIPLE any number of groups may
// live at once; if the application initialised MPI with only
// MPI_THREAD_SERIALIZED, one group at a time is allowed (its worker is then
// the only thread of ours in MPI; the application must not call MPI while the
// group lives); below that create() refuses. A group's destructor frees its
// communicator but never finalises MPI: a second group, or the application,
// may still use it. If we initialised MPI, an atexit handler finalises it at
// process exit when no group is alive (mpirun treats a rank that exits without
// MPI_Finalize as failed); if a group was leaked past exit, finalising under
// its worker thread would be unsafe, so the handler logs and skips it. If the
// application initialised MPI, finalising it is the application's job.

#include "ddp/dist/process_group_mpi.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "ddp/core/env.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/backend_registry.h"
#include "desync_exchange_mpi.h"
#include "desync_report.h"
#include "host_collectives.h"
#include "host_staging.h"
#include "mpi_util.h"
#include "work_queue.h"
#include "worker_watchdog_mpi.h"

namespace ddp::dist {

bool is_mpi_launch() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

namespace {

// ---- process-global MPI state (Note [MPI initialisation and finalisation]) --
struct MpiGlobal {
  std::mutex mu;
  bool we_initialised = false;
  int thread_level = MPI_THREAD_SINGLE;
  int live_groups = 0;
  bool abandoned_requests = false;  // Note [MPI timeouts]
};
MpiGlobal& mpi_global() {
  static MpiGlobal* g = new MpiGlobal;  // leaked: the atexit handler may outlive statics
  return *g;
}

void finalize_at_exit() {
  MpiGlobal& g = mpi_global();
  std::lock_guard<std::mutex> lk(g.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g.abandoned_requests) {
    DDP_LOG_WARNING(
        "mpi: a collective timed out and may still be in MPI; not calling MPI_Finalize "
        "(Note [MPI timeouts])");
    return;
  }
  if (g.live_groups > 0) {
    DDP_LOG_WARNING("mpi: {} process group(s) still alive at exit; not calling MPI_Finalize",
                    g.live_groups);
    return;
  }
  MPI_Finalize();
}

}  // namespace

using namespace detail;  // host staging, the wire format, mpi_util.h

// The collectives: Note [Host collective sequence].
struct ProcessGroupMPI::Impl final : HostTransport {
  // Point-to-point requests posted by the worker, tested by it until they
  // finish (Note [MPI progress]).
  struct Pending {
    WorkPtr work;
    MPI_Request req = MPI_REQUEST_NULL;
    bool is_recv = false;
    std::function<void(const MPI_Status&)> finish;  // checks the status, copies back
  };

  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm report_comm = MPI_COMM_NULL;  // the desync report's exchange (Note [MPI timeouts])
  MPI_Comm ping_comm = MPI_COMM_NULL;    // liveness pings (Note [MPI liveness])
  std::unique_ptr<LivenessResponder> responder;  // under MPI_THREAD_MULTIPLE only
  std::atomic<int64_t> timeout_ms{0};
  const FlightRecorder* recorder = nullptr;
  std::mutex broken_mu;
  std::exception_ptr broken;                     // the first timeout; every later call rethrows it
  std::atomic<bool> is_broken{false};            // broken is set
  std::vector<std::shared_ptr<void>> abandoned;  // kept alive for MPI (under broken_mu)
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;
  std::vector<Pending> pending;  // worker thread only
  // Holds the deadline of the worker's blocking calls (Note [MPI progress]);
  // null: the calls are posted and tested (Note [MPI timeouts]).
  std::unique_ptr<WorkerWatchdog> watchdog;
  std::unique_ptr<WorkQueue> queue;

  void start() {
    queue = std::make_unique<WorkQueue>("mpi", rank);
    queue->start({[this] { return !pending.empty() && !gave_up(); },
                  [this] { return !gave_up() && poll_pending(); },
                  [this] {
                    for (Pending& p : pending)
                      if (p.is_recv) MPI_Cancel(&p.req);
                  }});
  }

  int transport_rank() const override { return rank; }
  int transport_size() const override { return size; }

  std::exception_ptr first_failure() {
    if (!is_broken.load(std::memory_order_acquire)) return nullptr;  // the common case
    std::lock_guard<std::mutex> lk(broken_mu);
    return broken;
  }

  void keep(std::vector<std::shared_ptr<void>> buffers) {
    std::lock_guard<std::mutex> lk(broken_mu);
    for (auto& b : buffers) abandoned.push_back(std::move(b));
  }

  // The worker was given up, stuck in MPI: the watchdog failed its Works.
  bool gave_up() const { return watchdog && watchdog->gave_up(); }

  WorkPtr track(WorkPtr w) {
    if (watchdog) watchdog->track(w);
    return w;
  }

  WorkPtr submit(const char* op, Tensors result, std::function<void()> run) override {
    if (auto e = first_failure()) std::rethrow_exception(e);
    auto task = std::make_shared<std::function<void()>>(std::move(run));
    return track(queue->submit(op, result, [this, task, result] {
      if (gave_up()) return false;  // already failed (Note [MPI timeouts])
      if (auto e = first_failure()) std::rethrow_exception(e);
      try {
        (*task)();
      } catch (const TimeoutError&) {
        if (gave_up()) return false;
        // Note [MPI timeouts]: MPI may still use these buffers.
        keep({task, std::make_shared<Tensors>(result)});
        throw;
      }
      return true;
    }));
  }

  // Tests req until it finishes or the timeout passes (Note [MPI timeouts]).
  void wait_request(const char* op, MPI_Request& req, std::chrono::milliseconds t) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = t.count() > 0 ? start + t : std::chrono::steady_clock::time_point::max();
    auto nap = std::chrono::microseconds(0);
    for (;;) {
      int flag = 0;
      DDP_MPI_CALL(op, rank, MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
      if (flag) return;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) std::rethrow_exception(time_out(op, t));
      if (now - start > std::chrono::microseconds(200)) {
        nap = std::min(std::chrono::microseconds(1000), nap * 2 + std::chrono::microseconds(10));
        std::this_thread::sleep_for(nap);
      }
    }
  }

  std::exception_ptr time_out(const char* op, std::chrono::milliseconds t) {
    return fail_group(op, fmt::format("not completed within {:.1f} s", t.count() / 1000.0), true);
  }

  [[noreturn]] void break_group(const char* op, const std::string& what, bool timed_out) {
    std::rethrow_exception(fail_group(op, what, timed_out));
  }

  // Breaks the group with the desync report and returns its error (the
  // first one, if it was broken already). On the worker, or on the watchdog
  // while the worker is in MPI.
  std::exception_ptr fail_group(const char* op, const std::string& what, bool timed_out) {
    if (auto e = first_failure()) return e;
    if (timed_out) {
      MpiGlobal& g = mpi_global();
      std::lock_guard<std::mutex> lk(g.mu);
      g.abandoned_requests = true;
    }
    // After an error (not a timeout) the other ranks may still sit in the
    // collective until their own timeout: wait for their answers that long.
    std::vector<std::shared_ptr<void>> in_flight;
    std::string report = exchange_positions_mpi(
        report_comm, responder ? ping_comm : MPI_COMM_NULL, rank, size, recorder,
        std::chrono::milliseconds(std::max<int64_t>(timeout_ms.load(), 1)),
        timed_out ? std::chrono::milliseconds(0) : std::chrono::milliseconds(timeout_ms.load()),
        in_flight);
    keep(std::move(in_flight));
    if (!report.empty()) DDP_LOG_ERROR("mpi rank {} of {}: {}", rank, size, report);
    if (recorder) {
      const std::string path = recorder->dump_to_file(fmt::format("{}: {}", op, what));
      if (!path.empty())
        report += (report.empty() ? "" : "; ") + ("flight recorder dumped to " + path);
    }
    std::exception_ptr err;
    try {
      if (timed_out)
        DDP_THROW(TimeoutError, "{} (mpi rank {} of {}): {}{}{}", op, rank, size, what,
                  report.empty() ? "" : "; ", report);
      DDP_THROW(MpiError, "{} (mpi rank {} of {}): {}{}{}", op, rank, size, what,
                report.empty() ? "" : "; ", report);
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard<std::mutex> lk(broken_mu);
    if (!broken) broken = err;
    is_broken.store(true, std::memory_order_release);
    return broken;
  }

  // post() starts a non-blocking request on the worker; the worker completes
  // the Work when the request finishes (Note [MPI progress]).
  WorkPtr submit_p2p(const std::string& op, Tensors result, std::function<Pending()> post) {
    return track(queue->submit_with_work(op, std::move(result),
                                         [this, post = std::move(post)](const WorkPtr& w) {
                                           if (gave_up()) return false;  // already failed
                                           Pending pd = post();
                                           pd.work = w;
                                           pending.push_back(std::move(pd));
                                           return false;
                                         }));
  }

  // Tests the pending point-to-point requests; returns whether any finished.
  bool poll_pending() {
    bool progressed = false;
    for (size_t i = 0; i < pending.size();) {
      Pending& p = pending[i];
      int flag = 0;
      MPI_Status status;
      std::exception_ptr err;
      try {
        DDP_MPI_CALL(p.work->op().c_str(), rank, MPI_Test(&p.req, &flag, &status));
        if (flag) {
          int cancelled = 0;
          MPI_Test_cancelled(&status, &cancelled);
          if (cancelled)
            DDP_THROW(MpiError, "{} (mpi rank {}): cancelled: the process group was destroyed",
                      p.work->op(), rank);
          p.finish(status);
        }
      } catch (...) {
        err = std::current_exception();
        flag = 1;
      }
      if (flag) {
        p.work->mark_completed(err);
        pending[i] = std::move(pending.back());
        pending.pop_back();
        progressed = true;
      } else {
        ++i;
      }
    }
    return progressed;
  }

  // ---- HostTransport (Note [Host collective sequence]) ----------------------
  // Each MPI call is one lambda: with a request, the non-blocking form; with
  // nullptr, the blocking one.
  // Elementwise calls are split into chunks of at most kMaxChunk elements.
  void reduce(const char* op, DType wire, void* data, int64_t n, ReduceOp rop, int root) override {
    const MPI_Datatype type = mpi_type(wire);
    const MPI_Op mop = mpi_op(rop);
    const size_t esize = element_size(wire);
    const MPI_Comm c = comm;
    const int me = rank;
    for (int64_t off = 0; off < n; off += kMaxChunk) {
      const int k = int(std::min(kMaxChunk, n - off));
      void* p = static_cast<std::byte*>(data) + off * esize;
      call(op, [=](MPI_Request* q) {
        if (root < 0)
          return q ? MPI_Iallreduce(MPI_IN_PLACE, p, k, type, mop, c, q)
                   : MPI_Allreduce(MPI_IN_PLACE, p, k, type, mop, c);
        void* send = root == me ? MPI_IN_PLACE : p;
        void* recv = root == me ? p : nullptr;
        return q ? MPI_Ireduce(send, recv, k, type, mop, root, c, q)
                 : MPI_Reduce(send, recv, k, type, mop, root, c);
      });
    }
  }

  void broadcast(const char* op, void* data, size_t nbytes, int root) override {
    const int64_t n = int64_t(nbytes);
    const MPI_Comm c = comm;
    for (int64_t off = 0; off < n; off += kMaxChunk) {
      void* p = static_cast<std::byte*>(data) + off;
      const int k = int(std::min(kMaxChunk, n - off));
      call(op, [=](MPI_Request* q) {
        return q ? MPI_Ibcast(p, k, MPI_BYTE, root, c, q) : MPI_Bcast(p, k, MPI_BYTE, root, c);
      });
    }
  }

  void check_count(const char* op, int64_t count, const Tensor& t) override {
    check_int_count(op, rank, count, t);
  }

  // Counts fit an int: checked before staging (check_count).
  void allgather(const char* op, const void* in, void* out, size_t n) override {
    const void* send = in ? in : MPI_IN_PLACE;
    const int k = int(n);
    const MPI_Comm c = comm;
    call(op, [=](MPI_Request* q) {
      return q ? MPI_Iallgather(send, k, MPI_BYTE, out, k, MPI_BYTE, c, q)
               : MPI_Allgather(send, k, MPI_BYTE, out, k, MPI_BYTE, c);
    });
  }

  void reduce_scatter(const char* op, DType wire, void* in, bool, void* out, int64_t n,
                      ReduceOp rop) override {
    const MPI_Datatype type = mpi_type(wire);
    const MPI_Op mop = mpi_op(rop);
    const int k = int(n);
    const MPI_Comm c = comm;
    call(op, [=](MPI_Request* q) {
      return q ? MPI_Ireduce_scatter_block(in, out, k, type, mop, c, q)
               : MPI_Reduce_scatter_block(in, out, k, type, mop, c);
    });
  }

  void all_to_all(const char* op, const void* in, void* out, size_t chunk) override {
    const void* send = in ? in : MPI_IN_PLACE;
    const int k = int(chunk);
    const MPI_Comm c = comm;
    call(op, [=](MPI_Request* q) {
      return q ? MPI_Ialltoall(send, k, MPI_BYTE, out, k, MPI_BYTE, c, q)
               : MPI_Alltoall(send, k, MPI_BYTE, out, k, MPI_BYTE, c);
    });
  }

  void barrier() override {
    const MPI_Comm c = comm;
    call("barrier", [=](MPI_Request* q) { return q ? MPI_Ibarrier(c, q) : MPI_Barrier(c); });
  }

  // Makes one MPI call of a collective: blocking, under the watchdog's
  // deadline (Note [MPI progress]), or posted and tested until the timeout
  // (Note [MPI timeouts]). An MPI error (a count mismatch: MPI_ERR_TRUNCATE)
  // breaks the group with the desync report too.
  template <class Call>
  void call(const char* op, const Call& mpi) {
    const auto t = std::chrono::milliseconds(timeout_ms.load());
    try {
      if (watchdog) {
        watchdog->begin(op, t);
        const int rc = mpi(nullptr);
        if (std::exception_ptr e = watchdog->end()) std::rethrow_exception(e);
        DDP_MPI_CALL(op, rank, rc);
      } else {
        MPI_Request req = MPI_REQUEST_NULL;
        DDP_MPI_CALL(op, rank, mpi(&req));
        wait_request(op, req, t);
      }
    } catch (const MpiError& e) {
      break_group(op, e.what(), false);
    }
  }
};

ProcessGroupMPI::ProcessGroupMPI(int rank, int size, std::unique_ptr<Impl> impl)
    : HostProcessGroup(rank, size), impl_(std::move(impl)) {
  impl_->timeout_ms = timeout().count();  // the default until set_timeout()
  impl_->recorder = &flight_recorder();
  if (impl_->ping_comm != MPI_COMM_NULL && size > 1)
    impl_->responder = std::make_unique<detail::LivenessResponder>(
        impl_->ping_comm, [r = impl_->recorder] { return r->position(); });
  impl_->start();
}

std::shared_ptr<ProcessGroupMPI> ProcessGroupMPI::create() {
  MpiGlobal& g = mpi_global();
  std::lock_guard<std::mutex> lk(g.mu);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  DDP_CHECK_T(MpiError, !finalized, "ProcessGroupMPI::create: MPI was already finalized");
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      throw_mpi(__FILE__, __LINE__, rc, "ProcessGroupMPI::create (MPI_Init_thread)", -1);
    g.we_initialised = true;
    std::atexit(finalize_at_exit);
    // Open MPI reports a failed non-blocking collective (a count mismatch
    // between ranks) on MPI_COMM_WORLD's handler, fatal by default; we own
    // this MPI, so errors come back as MpiError instead (Note [MPI timeouts]).
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  }
  MPI_Query_thread(&g.thread_level);
  DDP_CHECK_T(MpiError, g.thread_level >= MPI_THREAD_SERIALIZED,
              "ProcessGroupMPI::create: MPI provides thread level {}, need at least "
              "MPI_THREAD_SERIALIZED (initialise MPI with MPI_Init_thread)",
              g.thread_level);
  DDP_CHECK_T(MpiError, g.thread_level == MPI_THREAD_MULTIPLE || g.live_groups == 0,
              "ProcessGroupMPI::create: MPI was initialised with MPI_THREAD_SERIALIZED, which "
              "allows one MPI process group at a time (see Note [MPI initialisation and "
              "finalisation])");

  auto impl = std::make_unique<Impl>();
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  DDP_MPI_CALL("ProcessGroupMPI::create (MPI_Comm_dup)", world_rank,
               MPI_Comm_dup(MPI_COMM_WORLD, &impl->comm));
  MPI_Comm_set_errhandler(impl->comm, MPI_ERRORS_RETURN);
  DDP_MPI_CALL("ProcessGroupMPI::create (MPI_Comm_dup)", world_rank,
               MPI_Comm_dup(MPI_COMM_WORLD, &impl->report_comm));
  MPI_Comm_set_errhandler(impl->report_comm, MPI_ERRORS_RETURN);
  if (g.thread_level == MPI_THREAD_MULTIPLE) {  // the responder is a second thread in MPI
    DDP_MPI_CALL("ProcessGroupMPI::create (MPI_Comm_dup)", world_rank,
                 MPI_Comm_dup(MPI_COMM_WORLD, &impl->ping_comm));
    MPI_Comm_set_errhandler(impl->ping_comm, MPI_ERRORS_RETURN);
  }
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(impl->comm, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) impl->tag_ub = *static_cast<int*>(ub);
  int r = impl->rank, s = impl->size;
  // Note [MPI progress]; under MPI_THREAD_SERIALIZED the watchdog could not
  // make the desync report beside the worker's call (Note [MPI timeouts]).
  if (g.thread_level == MPI_THREAD_MULTIPLE && s > 1 && !env_bool("DDP_MPI_NONBLOCKING", false))
    impl->watchdog = std::make_unique<WorkerWatchdog>(
        [p = impl.get()](const char* op, std::chrono::milliseconds t) {
          return p->time_out(op, t);
        });
  ++g.live_groups;
  return std::shared_ptr<ProcessGroupMPI>(new ProcessGroupMPI(r, s, std::move(impl)));
}

void ProcessGroupMPI::set_timeout(std::chrono::milliseconds t) {
  ProcessGroup::set_timeout(t);
  impl_->timeout_ms = t.count();
}

ProcessGroupMPI::~ProcessGroupMPI() {
  MpiGlobal& g = mpi_global();
  if (impl_->watchdog) {
    // What was submitted runs first, or the watchdog gives the worker up
    // (Note [MPI timeouts]).
    WorkPtr last = impl_->track(impl_->queue->submit("shutdown", {}, [] { return true; }));
    try {
      last->wait();
    } catch (...) {  // failed with the group's error
    }
    impl_->watchdog->stop();
    if (impl_->watchdog->gave_up()) {
      // The worker is still in MPI, on this Impl: it is never joined or freed.
      impl_->responder.reset();
      (void)impl_.release();
      std::lock_guard<std::mutex> lk(g.mu);
      --g.live_groups;
      return;
    }
  }
  impl_->queue->stop();      // the worker is not in MPI any more (or times out)
  impl_->responder.reset();  // before the recorder and its communicator go
  std::lock_guard<std::mutex> lk(g.mu);
  int finalized = 0;
  MPI_Finalized(&finalized);
  // A broken group's communicators still carry a posted collective: left
  // as they are (Note [MPI timeouts]).
  const bool broken = impl_->first_failure() != nullptr;
  if (!finalized && !broken) {
    if (impl_->comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->comm);
    if (impl_->report_comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->report_comm);
    if (impl_->ping_comm != MPI_COMM_NULL) MPI_Comm_free(&impl_->ping_comm);
  }
  --g.live_groups;
}

HostTransport& ProcessGroupMPI::transport() { return *impl_; }

// Point to point: non-blocking requests that the worker tests, see Note [MPI progress].
WorkPtr ProcessGroupMPI::do_send(const Tensor& tensor, int dst, int tag) {
  check_int_count("send", rank(), int64_t(tensor.nbytes()), tensor);
  DDP_CHECK(tag <= impl_->tag_ub, "send (mpi rank {}): tag {} above MPI_TAG_UB {}", rank(), tag,
            impl_->tag_ub);
  Staged s = stage(tensor, true);
  Impl* p = impl_.get();
  return p->submit_p2p("send", {tensor}, [p, s, dst, tag] {
    Impl::Pending pd;
    DDP_MPI_CALL(
        "send", p->rank,
        MPI_Isend(bytes(s.host), int(s.host.nbytes()), MPI_BYTE, dst, tag, p->comm, &pd.req));
    pd.finish = [s](const MPI_Status&) {};  // keeps the (staged) buffer alive until done
    return pd;
  });
}

WorkPtr ProcessGroupMPI::do_recv(const Tensor& tensor, int src, int tag) {
  check_int_count("recv", rank(), int64_t(tensor.nbytes()), tensor);
  DDP_CHECK(tag <= impl_->tag_ub, "recv (mpi rank {}): tag {} above MPI_TAG_UB {}", rank(), tag,
            impl_->tag_ub);
  Staged s = stage(tensor, false);
  Impl* p = impl_.get();
  return p->submit_p2p("recv", {tensor}, [p, s, src, tag] {
    Impl::Pending pd;
    pd.is_recv = true;
    DDP_MPI_CALL(
        "recv", p->rank,
        MPI_Irecv(bytes(s.host), int(s.host.nbytes()), MPI_BYTE, src, tag, p->comm, &pd.req));
    pd.finish = [p, s, src, tag](const MPI_Status& st) {
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      DDP_CHECK_T(ShapeError, size_t(got) == s.host.nbytes(),
                  "recv (mpi rank {}): {} bytes from rank {} tag {}, expected {} for {}", p->rank,
                  got, src, tag, s.host.nbytes(), s.user.describe());
      unstage(s);
    };
    return pd;
  });
}

}  // namespace ddp::dist

// ---- registration (Note [Backend registry]) -------------------------------------

namespace ddp::dist {
namespace {

const BackendRegistration kMpiBackend{BackendInfo{
    .name = "mpi",
    .devices = {DeviceType::CPU, DeviceType::CUDA},  // CUDA staged (Note [Host staging])
    .native_cuda = false,
    .preference = 20,
    .unusable =
        [](const BackendContext& ctx) -> std::string {
          if (is_mpi_launch()) return "";
          return "it needs a launch by mpirun (MPI brings its own world)";
        },
    .create =
        [](const BackendContext& ctx) -> std::shared_ptr<ProcessGroup> {
          auto pg = ProcessGroupMPI::create();
          DDP_CHECK(pg->rank() == ctx.rank && pg->size() == ctx.size,
                    "init_process_group: MPI says rank {} of {}, the launch environment says {} "
                    "of {}",
                    pg->rank(), pg->size(), ctx.rank, ctx.size);
          return pg;
        },
}};

}  // namespace
}  // namespace ddp::dist
