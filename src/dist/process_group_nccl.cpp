// The "nccl" ProcessGroup backend: creation and the collectives. Built only
// when NCCL is found (src/CMakeLists.txt). The watchdog, completion and
// shutdown live in watchdog_nccl.cpp; the shared state in nccl_internal.h.
//
// Note [NCCL stream ordering]
// Each group owns a communication stream on its device (non-blocking: it
// never synchronises implicitly with the legacy default stream). Every
// operation
//  1. records the group's start event on the caller's current stream
//     (cuda::current_stream of the calling thread) and makes the
//     communication stream wait for it, so the collective sees every kernel
//     queued before it (the backward kernels that produced a gradient, say)
//     without the host waiting for them;
//  2. issues its NCCL calls, and any copies, on the communication stream;
//     temporaries are allocated while the communication stream is current, so
//     the caching allocator hands their blocks out again only to work that is
//     stream-ordered after them;
//  3. records the Work's end event on the communication stream.
// Work::wait() makes the caller's current stream (at the time of the wait)
// wait for the end event: kernels queued afterwards see the result. The host
// does not block unless blocking_wait is set or the Work is a barrier; a host
// read through the current stream (Tensor::cpu(), to_vector()) is ordered
// correctly. The tensors are used on a stream that did not allocate them, so
// every one is marked with cuda::record_stream before the collective is
// queued (and only once the group has accepted the operation: Note [NCCL
// checks before side effects]): if the caller frees it early, its memory is
// not reused until the communication stream has passed the collective. The
// Work also holds the tensors until it completes.

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/cuda_check.h"
#include "cuda/on_device.h"
#include "ddp/core/env.h"
#include "ddp/core/logging.h"
#include "ddp/dist/process_group_nccl.h"
#include "dist/nccl_check.h"
#include "dist/nccl_internal.h"
#include "tensor/device_guard.h"

namespace ddp::dist {

namespace {

ncclDataType_t nccl_type(const char* op, const std::string& who, const Tensor& t) {
  switch (t.dtype()) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::u8:
      return ncclUint8;
    default:
      break;
  }
  DDP_THROW(DTypeError, "{} ({}): NCCL cannot reduce {}", op, who, t.describe());
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::min:
      return ncclMin;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::product:
      return ncclProd;
  }
  return ncclSum;
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

// True when [a, a + na) and [b, b + nb) share a byte.
bool overlaps(const void* a, size_t na, const void* b, size_t nb) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return na > 0 && nb > 0 && x < y + nb && y < x + na;
}

// True when ts[i] starts n bytes after ts[i - 1]: one buffer, no copy needed.
bool consecutive(const Tensors& ts, size_t n) {
  for (size_t i = 1; i < ts.size(); ++i)
    if (bytes(ts[i]) != bytes(ts[0]) + i * n) return false;
  return true;
}

// What an operation's body needs while it issues its work (comm_mu held,
// the communication stream current).
struct Launch {
  ProcessGroupNCCL::Impl& p;
  cudaStream_t stream;
  std::string ctx;  // WorkNCCL::label()
  NcclClock::time_point start;
  std::chrono::milliseconds timeout;

  // Set once the communicator has been handed a call (Note [NCCL out of
  // memory]).
  bool touched_comm = false;

  ncclComm_t comm() const { return p.comm; }
  // After each NCCL call or group: on a non-blocking communicator the call
  // may still be in progress, and stream work queued after it must wait
  // until NCCL has put it on the stream (Note [NCCL non-blocking communicators]).
  void settle() {
    touched_comm = true;
    auto deadline = timeout.count() > 0 ? start + timeout : NcclClock::time_point::max();
    p.wait_ready(ctx, deadline);
  }
  // A temporary on the device, owned by the communication stream.
  Tensor scratch(size_t nbytes) const {
    return Tensor::empty({int64_t(nbytes)},
                         TensorOptions(DType::u8).device(Device::cuda(p.device)));
  }
  void copy(void* dst, const void* src, size_t n) const {
    if (n > 0 && dst != src)
      DDP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, stream));
  }
};

// ncclGroupStart/End around a set of calls. If a call inside fails, the
// destructor still closes the group (NCCL then drops it), and the caller
// aborts the communicator anyway.
class NcclGroup {
 public:
  explicit NcclGroup(Launch& l) : l_(l) {
    l_.touched_comm = true;
    DDP_NCCL_CHECK(l_.ctx, l_.comm(), ncclGroupStart());
  }
  ~NcclGroup() {
    if (open_) (void)ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    DDP_NCCL_CHECK(l_.ctx, l_.comm(), ncclGroupEnd());
    l_.settle();
  }

 private:
  Launch& l_;
  bool open_ = true;
};

// Runs body(Launch&) on the communication stream after the caller's current
// stream (Note [NCCL stream ordering]) and returns the Work, tracked by the
// watchdog. `used`: every tensor the operation reads or writes. A failure
// while enqueuing aborts the group: peers may already be inside the
// collective, and this rank's communicator state is unknown.
//
// Note [NCCL out of memory]
// The exception is running out of device memory for a temporary (a packed
// input, a gather buffer) before any NCCL call of the operation: NCCL never
// saw it, the communicator is as good as before, so the OutOfMemoryError
// reaches the caller and the group stays usable (free memory and call again;
// the peers, already inside the collective, wait for this rank as for a slow
// one, up to the timeout). Temporaries are therefore allocated before the
// first NCCL call of every operation; Launch::touched_comm tells the two
// cases apart.
//
// Note [NCCL checks before side effects]
// A refused operation leaves no trace: the checks (the tensors' device, then,
// under comm_mu so that no abort slips in between, whether the group was
// aborted) run before anything changes. Then the Work is made, the tensors
// are marked for the communication stream, and only then does the operation
// take its sequence number and queue stream work. A tensor marked by a
// refused call would make the caching allocator, when it is freed, record an
// event on a stream that may never pass it (held by the collective that
// caused the abort) or no longer exist (the group destroyed first: the block
// is leaked). Only record_stream's own refusal of memory not from the caching
// allocator (Tensor::from_storage) comes late; tensors marked before it
// merely wait for the live communication stream when freed.
template <class Body>
WorkPtr enqueue(ProcessGroupNCCL::Impl& p, std::chrono::milliseconds timeout, const char* op,
                const Tensors& used, Tensors result, bool blocking, Body&& body) {
  for (const Tensor& t : used)
    DDP_CHECK_T(DeviceError, t.device() == Device::cuda(p.device),
                "{} ({}): {} is not on the group's device cuda:{}", op, p.who(), t.describe(),
                p.device);
  CudaDeviceGuard on_device(p.device);
  auto caller = cuda_kernels::native(cuda::current_stream(p.device));

  std::unique_lock<std::mutex> lk(p.comm_mu);
  if (p.aborted.load())
    DDP_THROW(NcclError, "{} ({}): the process group was aborted earlier ({}); create a new one",
              op, p.who(), p.abort_reason);
  // Every check has passed: from here on the operation has side effects.
  auto work = std::make_shared<WorkNCCL>(op, p.next_seq, p.rank, p.size, p.device,
                                         blocking || p.blocking_wait, timeout);
  for (const Tensor& t : used) cuda::record_stream(t.storage().data(), p.stream);
  ++p.next_seq;  // only now: a refused call must not skip a number the peers use
  Launch l{p, cuda_kernels::native(p.stream), work->label(), NcclClock::now(),
           timeout};
  try {
    DDP_CUDA_CHECK(cudaEventRecord(p.start_event, caller));
    DDP_CUDA_CHECK(cudaStreamWaitEvent(l.stream, p.start_event, 0));
    {
      cuda::StreamGuard on_comm(p.stream);
      body(l);
    }
    l.settle();
    DDP_CUDA_CHECK(cudaEventRecord(work->end_event(), l.stream));
  } catch (const OutOfMemoryError& e) {
    if (l.touched_comm) {
      lk.unlock();
      p.abort(false, fmt::format("{} failed while being enqueued: {}", l.ctx, e.what()));
      throw;
    }
    --p.next_seq;  // never issued: the sequence numbers stay those of the peers
    throw;
  } catch (const std::exception& e) {
    lk.unlock();
    p.abort(dynamic_cast<const TimeoutError*>(&e) != nullptr,
            fmt::format("{} failed while being enqueued: {}", l.ctx, e.what()));
    throw;
  }
  lk.unlock();
  work->set_result(std::move(result));
  work->keep_alive(used);
  p.track(work);
  return work;
}

void require_gpu(const char* what, int rank) {
  if (!cuda::is_available())
    DDP_THROW(DeviceError, "{} (nccl rank {}): the nccl backend needs a CUDA device: {}", what,
              rank, cuda::unavailable_reason());
}

// Fills what the user left unset; checks the device.
ProcessGroupNCCLOptions resolve(ProcessGroupNCCLOptions o, const char* what, int rank) {
  require_gpu(what, rank);
  if (!o.timeout) o.timeout = ProcessGroupNCCL::default_timeout();
  DDP_CHECK(o.timeout->count() >= 0, "{} (nccl rank {}): negative timeout {} ms", what, rank,
            o.timeout->count());
  if (!o.blocking_wait) o.blocking_wait = env_bool("DDP_NCCL_BLOCKING_WAIT", false);
  if (!o.async_error_handling) o.async_error_handling = async_error_handling_from_env();
  if (o.device == -1) o.device = cuda::current_device();
  DDP_CHECK_T(DeviceError, o.device >= 0 && o.device < cuda::device_count(),
              "{} (nccl rank {}): device cuda:{} does not exist ({} device(s) present)", what, rank,
              o.device, cuda::device_count());
  return o;
}

Bytes new_unique_id(const char* what, int rank) {
  ncclUniqueId uid;
  DDP_NCCL_CHECK(fmt::format("{} (nccl rank {})", what, rank), nullptr, ncclGetUniqueId(&uid));
  return Bytes(reinterpret_cast<const uint8_t*>(uid.internal),
               reinterpret_cast<const uint8_t*>(uid.internal) + NCCL_UNIQUE_ID_BYTES);
}

}  // namespace

// ---- WorkNCCL::wait (Note [NCCL stream ordering]) ------------------------------

void WorkNCCL::wait(std::chrono::milliseconds timeout) {
  if (is_completed()) {
    if (auto e = exception()) std::rethrow_exception(e);
    return;  // finished on the GPU: nothing left to order
  }
  {
    CudaDeviceGuard guard(device_);
    auto current = cuda_kernels::native(cuda::current_stream(device_));
    DDP_CUDA_CHECK(cudaStreamWaitEvent(current, end_, 0));
  }
  if (blocking_) {
    // No own limit by default: the watchdog fails the Work at its timeout.
    auto deadline = timeout.count() > 0 ? NcclClock::now() + timeout : NcclClock::time_point::max();
    auto backoff = std::chrono::microseconds(1);
    while (!poll()) {
      if (NcclClock::now() > deadline)
        DDP_THROW(TimeoutError, "{}: not completed within {:.1f} s", label(),
                  timeout.count() / 1000.0);
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
    }
    // Claimed now; another thread may still be completing it: wait for that
    // (moments), then rethrow its error if any.
    Work::wait(std::chrono::milliseconds(0));
    return;
  }
  if (auto e = exception()) std::rethrow_exception(e);
}

// ---- the group's state ----------------------------------------------------------

std::string ProcessGroupNCCL::Impl::who() const {
  if (name == "nccl") return fmt::format("nccl rank {}/{}", rank, size);
  return fmt::format("nccl '{}' rank {}/{}", name, rank, size);
}

void ProcessGroupNCCL::Impl::wait_ready(const std::string& context,
                                        NcclClock::time_point deadline) {
  auto backoff = std::chrono::microseconds(1);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    DDP_NCCL_CHECK(context, comm, ncclCommGetAsyncError(comm, &state));
    if (state == ncclSuccess) return;
    if (state != ncclInProgress)
      detail::throw_nccl(__FILE__, __LINE__, context, "ncclCommGetAsyncError (asynchronous error)",
                         state, comm);
    if (NcclClock::now() > deadline)
      DDP_THROW(TimeoutError, "{}: NCCL still in progress when the timeout passed", context);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::microseconds(1000));
  }
}

// ---- creation ----------------------------------------------------------------------

std::chrono::milliseconds ProcessGroupNCCL::default_timeout() {
  const auto env = env_string("DDP_NCCL_TIMEOUT_S");
  if (!env || env->empty()) return kDefaultTimeout;
  const double s = env_double("DDP_NCCL_TIMEOUT_S", 0.0);
  DDP_CHECK(std::isfinite(s) && s > 0 && s <= 1e9,
            "environment variable DDP_NCCL_TIMEOUT_S='{}' must be a positive number of seconds",
            *env);
  return std::chrono::milliseconds(std::max<int64_t>(1, std::llround(s * 1000.0)));
}

std::shared_ptr<ProcessGroupNCCL> ProcessGroupNCCL::create(Store& store, int rank, int size,
                                                           Options options) {
  const char* what = "ProcessGroupNCCL::create";
  DDP_CHECK(size >= 1 && rank >= 0 && rank < size, "{}: invalid rank {} for world size {}", what,
            rank, size);
  options = resolve(std::move(options), what, rank);
  // The n-th NCCL group this rank creates on this store meets the n-th group
  // of every other rank under the same key.
  const std::string prefix = fmt::format("ddp_nccl/{}", options.name);
  const int64_t nth = store.add(fmt::format("{}/groups_of_rank_{}", prefix, rank), 1);
  const std::string key = fmt::format("{}/{}/unique_id", prefix, nth);
  Bytes id;
  if (rank == 0) {
    id = new_unique_id(what, rank);
    store.set(key, id);
  } else {
    id = store.get(key);
  }
  return create_with_id(rank, size, id, options);
}

std::shared_ptr<ProcessGroupNCCL> ProcessGroupNCCL::create(ProcessGroup& bootstrap,
                                                           Options options) {
  const char* what = "ProcessGroupNCCL::create";
  const int rank = bootstrap.rank(), size = bootstrap.size();
  options = resolve(std::move(options), what, rank);
  Tensor host = Tensor::zeros({NCCL_UNIQUE_ID_BYTES}, TensorOptions(DType::u8));
  if (rank == 0) {
    Bytes id = new_unique_id(what, rank);
    std::memcpy(host.data_ptr(), id.data(), id.size());
  }
  // A bootstrap group that only takes CUDA tensors (another nccl group) gets one.
  Tensor buf = bootstrap.caps().cpu_tensors ? host : host.to(Device::cuda(options.device));
  bootstrap.broadcast({buf}, 0)->wait();
  Tensor got = buf.cpu();  // through the current stream: ordered after the broadcast
  const auto* p = static_cast<const uint8_t*>(got.data_ptr());
  return create_with_id(rank, size, Bytes(p, p + NCCL_UNIQUE_ID_BYTES), options);
}

std::shared_ptr<ProcessGroupNCCL> ProcessGroupNCCL::create_with_id(int rank, int size,
                                                                   const Bytes& id,
                                                                   const Options& options) {
  DDP_CHECK(id.size() == NCCL_UNIQUE_ID_BYTES,
            "ProcessGroupNCCL::create (nccl rank {}): the NCCL unique id has {} bytes, expected {}",
            rank, id.size(), NCCL_UNIQUE_ID_BYTES);
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->size = size;
  impl->device = options.device;
  impl->name = options.name;
  impl->blocking_wait = *options.blocking_wait;
  impl->async_error_handling = *options.async_error_handling;
  const std::string ctx = fmt::format("ProcessGroupNCCL::create ({})", impl->who());

  CudaDeviceGuard on_device(impl->device);  // the communicator binds to the current device
  impl->stream = cuda::Stream::create(impl->device, options.high_priority_stream);
  DDP_CUDA_CHECK(cudaEventCreateWithFlags(&impl->start_event, cudaEventDisableTiming));

  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // NCCL_* variables stay NCCL's: NCCL_COMM_BLOCKING, when set, decides.
  if (!std::getenv("NCCL_COMM_BLOCKING")) config.blocking = 0;
  config.commName = impl->name.c_str();
  const auto timeout = *options.timeout;
  const auto deadline =
      timeout.count() > 0 ? NcclClock::now() + timeout : NcclClock::time_point::max();
  {
    // On failure ~Impl aborts whatever communicator NCCL handed out.
    std::lock_guard<std::mutex> lk(impl->comm_mu);
    DDP_NCCL_CHECK(ctx, nullptr, ncclCommInitRankConfig(&impl->comm, size, uid, rank, &config));
    try {
      impl->wait_ready(ctx, deadline);
    } catch (const TimeoutError&) {
      DDP_THROW(TimeoutError, "{}: the other ranks did not join within {:.1f} s", ctx,
                timeout.count() / 1000.0);
    }
  }
  DDP_LOG_INFO("{}: communicator ready on cuda:{}", ctx, impl->device);
  std::shared_ptr<ProcessGroupNCCL> pg(new ProcessGroupNCCL(rank, size, std::move(impl)));
  pg->set_timeout(timeout);
  return pg;
}

ProcessGroupNCCL::ProcessGroupNCCL(int rank, int size, std::unique_ptr<Impl> impl)
    : ProcessGroup(rank, size), impl_(std::move(impl)) {
  impl_->recorder = &flight_recorder();
  impl_->start_watchdog();
}

ProcessGroupNCCL::~ProcessGroupNCCL() {
  try {
    impl_->drain_and_stop_watchdog();
    impl_->free_communicator(timeout());
    impl_->wait_for_abort(std::chrono::seconds(60));
  } catch (const std::exception& e) {
    DDP_LOG_ERROR("~ProcessGroupNCCL ({}): {}", impl_->who(), e.what());
  }
}

BackendCaps ProcessGroupNCCL::caps() const {
  BackendCaps c;
  c.cpu_tensors = false;  // CPU tensors raise DeviceError (Note [Collective argument checks])
  c.cuda_tensors = true;
  c.stage_cuda_through_host = false;
  c.avg = true;  // ncclAvg
  return c;
}

int ProcessGroupNCCL::device() const { return impl_->device; }
bool ProcessGroupNCCL::is_aborted() const { return impl_->aborted.load(); }

// ---- the operations ------------------------------------------------------------------

WorkPtr ProcessGroupNCCL::do_allreduce(Tensors& tensors, ReduceOp op) {
  std::vector<ncclDataType_t> types;
  for (const Tensor& t : tensors) types.push_back(nccl_type("allreduce", impl_->who(), t));
  const ncclRedOp_t rop = nccl_op(op);
  // Several tensors: one NCCL group, so NCCL launches them together.
  return enqueue(*impl_, timeout(), "allreduce", tensors, tensors, false, [&](Launch& l) {
    NcclGroup group(l);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      if (t.numel() == 0) continue;
      DDP_NCCL_CHECK(l.ctx, l.comm(),
                     ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), types[i], rop,
                                   l.comm(), l.stream));
    }
    group.end();
  });
}

WorkPtr ProcessGroupNCCL::do_broadcast(Tensors& tensors, int root) {
  return enqueue(*impl_, timeout(), "broadcast", tensors, tensors, false, [&](Launch& l) {
    NcclGroup group(l);
    for (const Tensor& t : tensors) {
      if (t.nbytes() == 0) continue;
      DDP_NCCL_CHECK(l.ctx, l.comm(),
                     ncclBroadcast(t.data_ptr(), t.data_ptr(), t.nbytes(), ncclUint8, root,
                                   l.comm(), l.stream));
    }
    group.end();
  });
}

WorkPtr ProcessGroupNCCL::do_reduce(Tensors& tensors, int root, ReduceOp op) {
  std::vector<ncclDataType_t> types;
  for (const Tensor& t : tensors) types.push_back(nccl_type("reduce", impl_->who(), t));
  const ncclRedOp_t rop = nccl_op(op);
  return enqueue(*impl_, timeout(), "reduce", tensors, tensors, false, [&](Launch& l) {
    NcclGroup group(l);
    for (size_t i = 0; i < tensors.size(); ++i) {
      const Tensor& t = tensors[i];
      if (t.numel() == 0) continue;
      DDP_NCCL_CHECK(l.ctx, l.comm(),
                     ncclReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), types[i], rop, root,
                                l.comm(), l.stream));
    }
    group.end();
  });
}

// Straight into the outputs when they are one buffer (chunks of one tensor);
// otherwise through a temporary and copies out.
WorkPtr ProcessGroupNCCL::do_allgather(Tensors& outputs, const Tensor& input) {
  Tensors used = outputs;
  used.push_back(input);
  const int r = rank(), n_ranks = size();
  return enqueue(*impl_, timeout(), "allgather", used, outputs, false, [&](Launch& l) {
    const size_t n = input.nbytes();
    if (n == 0) return;
    const char* send = bytes(input);
    Tensor tmp;
    if (consecutive(outputs, n)) {
      char* recv = bytes(outputs[0]);
      // In place is legal only from the rank's own slot.
      if (overlaps(send, n, recv, n * n_ranks) && send != recv + size_t(r) * n) {
        tmp = l.scratch(n);
        l.copy(tmp.data_ptr(), send, n);
        send = bytes(tmp);
      }
      DDP_NCCL_CHECK(l.ctx, l.comm(), ncclAllGather(send, recv, n, ncclUint8, l.comm(), l.stream));
      l.settle();
      return;
    }
    tmp = l.scratch(n * n_ranks);
    DDP_NCCL_CHECK(l.ctx, l.comm(),
                   ncclAllGather(send, tmp.data_ptr(), n, ncclUint8, l.comm(), l.stream));
    l.settle();
    for (int i = 0; i < n_ranks; ++i) l.copy(bytes(outputs[i]), bytes(tmp) + size_t(i) * n, n);
  });
}

WorkPtr ProcessGroupNCCL::do_reduce_scatter(const Tensor& output, Tensors& inputs, ReduceOp op) {
  const ncclDataType_t type = nccl_type("reduce_scatter", impl_->who(), output);
  const ncclRedOp_t rop = nccl_op(op);
  Tensors used = inputs;
  used.push_back(output);
  const int r = rank(), n_ranks = size();
  return enqueue(*impl_, timeout(), "reduce_scatter", used, {output}, false, [&](Launch& l) {
    const size_t n = output.nbytes();
    if (n == 0) return;
    char* recv = bytes(output);
    const char* send = bytes(inputs[0]);
    // Note [Reduce-scatter of one rank]
    // One rank's reduce-scatter is a copy of its input, whatever the op. It is
    // done as one: NCCL 2.28.9's ncclReduceScatter with ncclAvg on a
    // communicator of one rank left every element past the first 2^20 of a
    // 2^20 + 3-element output unwritten (H200, both GPU runs of 2026-11-27;
    // sum, min, max, product and allreduce's avg were right).
    if (n_ranks == 1) {
      if (recv != send && overlaps(recv, n, send, n)) {  // through a temporary
        Tensor tmp = l.scratch(n);
        l.copy(tmp.data_ptr(), send, n);
        send = bytes(tmp);
        l.copy(recv, send, n);
        return;
      }
      l.copy(recv, send, n);
      return;
    }
    Tensor packed;
    const bool in_place_ok = !overlaps(recv, n, send, n * n_ranks) || recv == send + size_t(r) * n;
    if (!consecutive(inputs, n) || !in_place_ok) {
      packed = l.scratch(n * n_ranks);
      for (int i = 0; i < n_ranks; ++i) l.copy(bytes(packed) + size_t(i) * n, bytes(inputs[i]), n);
      send = bytes(packed);
    }
    DDP_NCCL_CHECK(
        l.ctx, l.comm(),
        ncclReduceScatter(send, recv, size_t(output.numel()), type, rop, l.comm(), l.stream));
    l.settle();
  });
}

// ncclSend/ncclRecv to every peer in one group; the rank's own chunk is a copy.
WorkPtr ProcessGroupNCCL::do_all_to_all(const Tensor& output, const Tensor& input) {
  const int r = rank(), n_ranks = size();
  return enqueue(*impl_, timeout(), "all_to_all", {output, input}, {output}, false, [&](Launch& l) {
    const size_t c = input.nbytes() / size_t(n_ranks);
    if (c == 0) return;
    const size_t total = c * size_t(n_ranks);
    const char* src = bytes(input);
    char* dst = bytes(output);
    Tensor tmp;
    if (overlaps(src, total, dst, total)) {  // in place: send from a copy
      tmp = l.scratch(total);
      l.copy(tmp.data_ptr(), src, total);
      src = bytes(tmp);
    }
    l.copy(dst + size_t(r) * c, src + size_t(r) * c, c);
    if (n_ranks == 1) return;
    NcclGroup group(l);
    for (int peer = 0; peer < n_ranks; ++peer) {
      if (peer == r) continue;
      DDP_NCCL_CHECK(l.ctx, l.comm(),
                     ncclSend(src + size_t(peer) * c, c, ncclUint8, peer, l.comm(), l.stream));
      DDP_NCCL_CHECK(l.ctx, l.comm(),
                     ncclRecv(dst + size_t(peer) * c, c, ncclUint8, peer, l.comm(), l.stream));
    }
    group.end();
  });
}

// An allreduce of one element; its Work blocks the host in wait(), as a
// barrier should.
WorkPtr ProcessGroupNCCL::do_barrier() {
  return enqueue(*impl_, timeout(), "barrier", {}, {}, true, [&](Launch& l) {
    Tensor one = l.scratch(sizeof(float));
    DDP_CUDA_CHECK(cudaMemsetAsync(one.data_ptr(), 0, sizeof(float), l.stream));
    DDP_NCCL_CHECK(
        l.ctx, l.comm(),
        ncclAllReduce(one.data_ptr(), one.data_ptr(), 1, ncclFloat32, ncclSum, l.comm(), l.stream));
    l.settle();
  });
}

WorkPtr ProcessGroupNCCL::do_send(const Tensor& tensor, int dst, int /*tag*/) {
  return enqueue(*impl_, timeout(), "send", {tensor}, {tensor}, false, [&](Launch& l) {
    DDP_NCCL_CHECK(
        l.ctx, l.comm(),
        ncclSend(tensor.data_ptr(), tensor.nbytes(), ncclUint8, dst, l.comm(), l.stream));
    l.settle();
  });
}

WorkPtr ProcessGroupNCCL::do_recv(const Tensor& tensor, int src, int /*tag*/) {
  return enqueue(*impl_, timeout(), "recv", {tensor}, {tensor}, false, [&](Launch& l) {
    DDP_NCCL_CHECK(
        l.ctx, l.comm(),
        ncclRecv(tensor.data_ptr(), tensor.nbytes(), ncclUint8, src, l.comm(), l.stream));
    l.settle();
  });
}

}  // namespace ddp::dist
