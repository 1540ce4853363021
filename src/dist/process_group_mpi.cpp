// The "mpi" ProcessGroup backend. Built only when MPI is found (src/CMakeLists.txt).
//
// Note [MPI progress]
// Each group owns one worker thread (See Note [One worker per group]) that
// runs the collectives with the ordinary blocking MPI calls (the fastest path
// through Open MPI), an MPI failure becoming the Work's MpiError.
// Point-to-point is the exception: a blocking MPI_Send in a ring would wait
// for a receive that the peer's worker cannot post until its own send
// returns, so send/recv post MPI_Isend/MPI_Irecv and the worker tests them
// between tasks (and, while nothing else is queued, in a short backoff
// loop), completing their Works as they finish.
//
// Note [MPI timeouts]
// The collectives are posted non-blocking (MPI_Iallreduce, ...) and the
// worker tests them until they finish or the group's timeout passes (a
// short spin, then sleeps growing to 1 ms), so a desync or a lost rank fails
// the Work with TimeoutError instead of hanging the worker forever. MPI
// cannot cancel a posted collective: the timed-out request stays posted, so
// its buffers (the task, with its staging buffers, and the Work's tensors)
// are kept alive on purpose, never freed, and the group is broken (every
// later call raises the same error). Before raising, the timed-out ranks
// exchange their flight-recorder positions over a second communicator
// (Note [Desync report]) for up to min(5 s, timeout), then ping the ranks
// that sent none, to tell busy from lost (Note [MPI liveness] in
// desync_exchange_mpi.h). The destructor of a
// broken group neither frees its communicator nor waits for the request,
// and the atexit handler then skips MPI_Finalize (it could wait on the
// posted collective): the process should end, and mpirun will say that a
// rank exited without MPI_Finalize. That is the state a timeout leaves.
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

// The C API only: the MPI-2 C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/backend_registry.h"
#include "desync_exchange_mpi.h"
#include "desync_report.h"
#include "host_collectives.h"
#include "host_staging.h"
#include "work_queue.h"

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
    DDP_LOG_WARNING("mpi: a collective timed out and is still posted; not calling MPI_Finalize "
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

[[noreturn]] void throw_mpi(const char* file, int line, int rc, const char* op, int rank) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  // MPI_Error_string of an unknown code is itself an error, fatal on
  // MPI_COMM_WORLD's default handler.
  if (rc < 0 || rc > MPI_ERR_LASTCODE || MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) len = 0;
  ::ddp::detail::throw_error<MpiError>(file, line,
                                fmt::format("{} (mpi rank {}): MPI error {}: {}", op, rank, rc,
                                            std::string(buf, size_t(len))));
}

}  // namespace

// Raises MpiError naming op and rank when an MPI call fails (the group's
// communicator has MPI_ERRORS_RETURN).
#define DDP_MPI_CALL(op, rank, call)                                                      \
  do {                                                                                    \
    int ddp_mpi_rc_ = (call);                                                             \
    if (ddp_mpi_rc_ != MPI_SUCCESS) throw_mpi(__FILE__, __LINE__, ddp_mpi_rc_, op, rank); \
  } while (0)

namespace {

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::f16:
    case DType::bf16:
      return MPI_FLOAT;  // Note [Half precision on the wire]
    default:
      break;
  }
  DDP_THROW(DTypeError, "mpi: no MPI type for {}", dtype_name(d));
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return MPI_SUM;  // avg: sum, then divide by size
    case ReduceOp::min:
      return MPI_MIN;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::product:
      return MPI_PROD;
  }
  return MPI_SUM;
}

using namespace detail;  // host staging and the wire format (host_staging.h)

// MPI counts are int: elementwise ops are split into chunks of at most this.
constexpr int64_t kMaxChunk = int64_t(1) << 30;

}  // namespace

// Per-rank byte counts of allgather, reduce_scatter, all_to_all and p2p are
// MPI ints.
static void check_int_count(const char* op, int rank, int64_t count, const Tensor& t) {
  DDP_CHECK(count <= INT_MAX, "{} (mpi rank {}): {} is too large for one MPI message ({} > {})", op,
            rank, t.describe(), count, INT_MAX);
}

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
  std::exception_ptr broken;  // the first timeout; every later call rethrows it
  std::vector<std::shared_ptr<void>> abandoned;  // kept alive for posted requests
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;
  std::vector<Pending> pending;  // worker thread only
  std::unique_ptr<WorkQueue> queue;

  void start() {
    queue = std::make_unique<WorkQueue>("mpi", rank);
    queue->start({[this] { return !pending.empty(); }, [this] { return poll_pending(); },
                  [this] {
                    for (Pending& p : pending)
                      if (p.is_recv) MPI_Cancel(&p.req);
                  }});
  }

  int transport_rank() const override { return rank; }
  int transport_size() const override { return size; }

  std::exception_ptr first_failure() {
    std::lock_guard<std::mutex> lk(broken_mu);
    return broken;
  }

  WorkPtr submit(const char* op, Tensors result, std::function<void()> run) override {
    if (auto e = first_failure()) std::rethrow_exception(e);
    auto task = std::make_shared<std::function<void()>>(std::move(run));
    return queue->submit(op, result, [this, task, result] {
      if (auto e = first_failure()) std::rethrow_exception(e);
      try {
        (*task)();
      } catch (const TimeoutError&) {
        // Note [MPI timeouts]: the request stays posted on these buffers.
        abandoned.push_back(task);
        abandoned.push_back(std::make_shared<Tensors>(result));
        throw;
      }
      return true;
    });
  }

  // Tests req until it finishes or the timeout passes (Note [MPI timeouts]).
  void wait_request(const char* op, MPI_Request& req) {
    const auto t = std::chrono::milliseconds(timeout_ms.load());
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = t.count() > 0 ? start + t : std::chrono::steady_clock::time_point::max();
    auto nap = std::chrono::microseconds(0);
    for (;;) {
      int flag = 0;
      DDP_MPI_CALL(op, rank, MPI_Test(&req, &flag, MPI_STATUS_IGNORE));
      if (flag) return;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) time_out(op, t);
      if (now - start > std::chrono::microseconds(200)) {
        nap = std::min(std::chrono::microseconds(1000), nap * 2 + std::chrono::microseconds(10));
        std::this_thread::sleep_for(nap);
      }
    }
  }

  [[noreturn]] void time_out(const char* op, std::chrono::milliseconds t) {
    break_group(op, fmt::format("not completed within {:.1f} s", t.count() / 1000.0), true);
  }

  [[noreturn]] void break_group(const char* op, const std::string& what, bool timed_out) {
    if (auto e = first_failure()) std::rethrow_exception(e);
    if (timed_out) {
      MpiGlobal& g = mpi_global();
      std::lock_guard<std::mutex> lk(g.mu);
      g.abandoned_requests = true;
    }
    // After an error (not a timeout) the other ranks may still sit in the
    // collective until their own timeout: wait for their answers that long.
    std::string report = exchange_positions_mpi(
        report_comm, responder ? ping_comm : MPI_COMM_NULL, rank, size, recorder,
        std::chrono::milliseconds(std::max<int64_t>(timeout_ms.load(), 1)),
        timed_out ? std::chrono::milliseconds(0) : std::chrono::milliseconds(timeout_ms.load()),
        abandoned);
    if (!report.empty()) DDP_LOG_ERROR("mpi rank {} of {}: {}", rank, size, report);
    if (recorder) {
      const std::string path = recorder->dump_to_file(fmt::format("{}: {}", op, what));
      if (!path.empty()) report += (report.empty() ? "" : "; ") + ("flight recorder dumped to " + path);
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
    {
      std::lock_guard<std::mutex> lk(broken_mu);
      if (!broken) broken = err;
    }
    std::rethrow_exception(err);
  }



  // post() starts a non-blocking request on the worker; the worker completes
  // the Work when the request finishes (Note [MPI progress]).
  WorkPtr submit_p2p(const std::string& op, Tensors result, std::function<Pending()> post) {
    return queue->submit_with_work(op, std::move(result),
                                   [this, post = std::move(post)](const WorkPtr& w) {
                                     Pending pd = post();
                                     pd.work = w;
                                     pending.push_back(std::move(pd));
                                     return false;
                                   });
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

  // ---- the operations, run on the worker ------------------------------------

  // ---- HostTransport (Note [Host collective sequence]) ----------------------
  // Elementwise calls are split into chunks of at most kMaxChunk elements.
  void reduce(const char* op, DType wire, void* data, int64_t n, ReduceOp rop,
              int root) override {
    MPI_Datatype type = mpi_type(wire);
    const size_t esize = element_size(wire);
    for (int64_t off = 0; off < n; off += kMaxChunk) {
      int c = int(std::min(kMaxChunk, n - off));
      auto* p = static_cast<std::byte*>(data) + off * esize;
      if (root < 0)
        post(op, [&](MPI_Request* q) { return MPI_Iallreduce(MPI_IN_PLACE, p, c, type, mpi_op(rop), comm, q); });
      else if (root == rank)
        post(op, [&](MPI_Request* q) { return MPI_Ireduce(MPI_IN_PLACE, p, c, type, mpi_op(rop), root, comm, q); });
      else
        post(op, [&](MPI_Request* q) { return MPI_Ireduce(p, nullptr, c, type, mpi_op(rop), root, comm, q); });
    }
  }

  void broadcast(const char* op, void* data, size_t nbytes, int root) override {
    const int64_t n = int64_t(nbytes);
    for (int64_t off = 0; off < n; off += kMaxChunk)
      post(op, [&](MPI_Request* q) {
        return MPI_Ibcast(static_cast<std::byte*>(data) + off, int(std::min(kMaxChunk, n - off)),
                          MPI_BYTE, root, comm, q);
      });
  }

  void check_count(const char* op, int64_t count, const Tensor& t) override {
    check_int_count(op, rank, count, t);
  }

  // Counts fit an int: checked before staging (check_count).
  void allgather(const char* op, const void* in, void* out, size_t n) override {
    post(op, [&](MPI_Request* q) {
      return MPI_Iallgather(in ? in : MPI_IN_PLACE, int(n), MPI_BYTE, out, int(n), MPI_BYTE, comm, q);
    });
  }

  void reduce_scatter(const char* op, DType wire, void* in, bool, void* out, int64_t n,
                      ReduceOp rop) override {
    post(op, [&](MPI_Request* q) {
      return MPI_Ireduce_scatter_block(in, out, int(n), mpi_type(wire), mpi_op(rop), comm, q);
    });
  }

  void all_to_all(const char* op, const void* in, void* out, size_t chunk) override {
    const int c = int(chunk);
    post(op, [&](MPI_Request* q) {
      return MPI_Ialltoall(in ? in : MPI_IN_PLACE, c, MPI_BYTE, out, c, MPI_BYTE, comm, q);
    });
  }

  void barrier() override {
    post("barrier", [&](MPI_Request* q) { return MPI_Ibarrier(comm, q); });
  }

  // Posts a non-blocking collective and waits for it (Note [MPI timeouts]).
  // An MPI error (a count mismatch: MPI_ERR_TRUNCATE) breaks the group with
  // the desync report too.
  template <class Post>
  void post(const char* op, Post&& start) {
    MPI_Request req = MPI_REQUEST_NULL;
    try {
      DDP_MPI_CALL(op, rank, start(&req));
      wait_request(op, req);
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
  ++g.live_groups;
  return std::shared_ptr<ProcessGroupMPI>(new ProcessGroupMPI(r, s, std::move(impl)));
}

void ProcessGroupMPI::set_timeout(std::chrono::milliseconds t) {
  ProcessGroup::set_timeout(t);
  impl_->timeout_ms = t.count();
}

ProcessGroupMPI::~ProcessGroupMPI() {
  impl_->queue->stop();      // never stuck in MPI: waits end at the timeout
  impl_->responder.reset();  // before the recorder and its communicator go
  MpiGlobal& g = mpi_global();
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
