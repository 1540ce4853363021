// Argument checks shared by every backend. See Note [Collective argument checks].

#include "ddp/dist/process_group.h"

#include "ddp/core/env.h"
#include "ddp/core/error.h"
#include "ddp/dist/store.h"
#include "ddp/tensor/dense_layout.h"
#include "collective_check.h"

namespace ddp::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
    case ReduceOp::product: return "product";
  }
  return "unknown";
}

ReduceOp reduce_op_from_name(const std::string& name) {
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max, ReduceOp::product})
    if (name == reduce_op_name(op)) return op;
  if (name == "prod") return ReduceOp::product;
  DDP_THROW(ValueError, "unknown reduce op '{}' (expected sum, avg, min, max or product)", name);
}

AsyncErrorHandling async_error_handling_from_env() {
  const auto v = env_string("DDP_ASYNC_ERROR_HANDLING");
  if (!v || v->empty() || *v == "0" || *v == "raise") return AsyncErrorHandling::raise;
  if (*v == "1" || *v == "tear_down" || *v == "teardown") return AsyncErrorHandling::tear_down;
  DDP_THROW(ValueError,
            "environment variable DDP_ASYNC_ERROR_HANDLING='{}' must be 0 (raise) or 1 (tear_down)",
            *v);
}

DebugLevel debug_level_from_env() {
  const auto v = env_string("DDP_DEBUG");
  if (!v || v->empty() || *v == "off" || *v == "OFF" || *v == "0") return DebugLevel::off;
  if (*v == "info" || *v == "INFO") return DebugLevel::info;
  if (*v == "detail" || *v == "DETAIL") return DebugLevel::detail;
  DDP_THROW(ValueError, "environment variable DDP_DEBUG='{}' must be off, info or detail", *v);
}

Device control_device(const ProcessGroup& group, const Device& compute) {
  return group.caps().cpu_tensors ? Device::cpu() : compute;
}

ProcessGroup::ProcessGroup(int rank, int size)
    : rank_(rank), size_(size), timeout_(Store::default_timeout()) {
  DDP_CHECK(size >= 1 && rank >= 0 && rank < size, "ProcessGroup: invalid rank {} for world size {}",
            rank, size);
  // Bad values of the variables surface when the group is made, not at the
  // first collective.
  collective_checks_ = debug_level_from_env() == DebugLevel::detail;
  recorder_ = std::make_shared<FlightRecorder>(FlightRecorder::capacity_from_env(), rank, size, "");
  install_sigusr1_dump();
}

FlightRecorder& ProcessGroup::flight_recorder() const {
  // The backend's name is known only once the derived class is built.
  std::call_once(recorder_once_, [this] { recorder_->set_backend(backend_name()); });
  return *recorder_;
}

// Note [Flight recorder]: every collective passes here, whatever the backend.
template <class Args, class Launch>
WorkPtr ProcessGroup::issue(const char* op, const Tensors& tensors, Args&& args, Launch&& launch) {
  FlightRecorder& r = flight_recorder();
  const uint64_t seq = r.record(op, tensors);
  WorkPtr w;
  try {
    if constexpr (!std::is_same_v<std::decay_t<Args>, std::nullptr_t>)
      if (collective_checks_) check_same_call(op, args(), tensors, seq);
    w = launch();
  } catch (const std::exception& e) {
    r.mark_finished(seq, CollectiveState::failed, e.what());
    throw;
  }
  if (w) w->attach_record(recorder_, seq);
  return w;
}

// Every tensor a collective writes counts a write before it is issued (Note
// [Tensor version counter] in storage.h): whatever was cached from its old
// values is stale from here on, whatever the backend.
static void bump_versions(const Tensors& written) {
  for (const Tensor& t : written) t.bump_version();
}

// Note [Collective check mode]: every rank's description of this call,
// gathered through the group itself (not recorded), compared on every rank.
void ProcessGroup::check_same_call(const char* op, const std::string& args,
                                   const Tensors& tensors, uint64_t seq) {
  const std::string mine = detail::describe_call(op, args, tensors);
  if (size_ == 1) return;
  const Device dev = control_device(*this, tensors.empty() ? Device::cpu() : tensors.front().device());
  Tensor in = detail::encode_call(mine).to(dev);
  Tensors outs;
  for (int r = 0; r < size_; ++r) outs.push_back(Tensor::zeros(in.shape(), TensorOptions(in.dtype()).device(dev)));
  do_allgather(outs, in)->wait(timeout_);
  std::vector<std::string> calls;
  for (const Tensor& o : outs) calls.push_back(detail::decode_call(o.to(Device::cpu())));
  const std::string mismatch = detail::mismatch_message(seq, calls);
  if (!mismatch.empty())
    DDP_THROW(ValueError, "{} ({} rank {}): {}", op, backend_name(), rank_, mismatch);
}

void ProcessGroup::check_rank(const char* op, int r, const char* what) const {
  DDP_CHECK_T(IndexError, r >= 0 && r < size_, "{}: {} rank {} out of range for world size {}", op,
              what, r, size_);
}

void ProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  DDP_CHECK(t.defined(), "{} ({} rank {}): undefined tensor", op, backend_name(), rank_);
  // Note [Dense tensors in collectives]
  DDP_CHECK(is_dense(t),
            "{} ({} rank {}): {} is not dense (a collective takes a contiguous, channels-last or "
            "otherwise permuted tensor whose elements fill one block; copy a strided view with "
            "contiguous() first)",
            op, backend_name(), rank_, t.describe());
  DDP_CHECK_T(DTypeError, t.dtype() != DType::bool_, "{} ({} rank {}): bool tensors are not supported",
              op, backend_name(), rank_);
  // The device is named twice on purpose: in the tensor's description and
  // as the thing the group lacks (See Note [Routing by device]).
  if (t.is_cuda()) {
    BackendCaps c = caps();
    DDP_CHECK_T(DeviceError, c.cuda_tensors || c.stage_cuda_through_host,
                "{} ({} rank {}): the group has no backend for cuda tensors ({}); its backends: {}",
                op, backend_name(), rank_, t.describe(), backend_name());
  } else {
    DDP_CHECK_T(DeviceError, caps().cpu_tensors,
                "{} ({} rank {}): the backend needs CUDA tensors, got {} (the group has no backend "
                "for cpu tensors; its backends: {})",
                op, backend_name(), rank_, t.describe(), backend_name());
  }
}

// All tensors of one call: checked, and on one device.
static void check_same_device(const char* op, const Tensors& ts, const std::string& backend,
                              int rank) {
  for (const Tensor& t : ts)
    DDP_CHECK_T(DeviceError, t.device() == ts.front().device(),
                "{} ({} rank {}): tensors on different devices: {} and {}", op, backend, rank,
                ts.front().describe(), t.describe());
}

static void check_avg(const char* op, ReduceOp rop, const Tensor& t, const std::string& backend,
                      int rank) {
  DDP_CHECK_T(DTypeError, rop != ReduceOp::avg || is_floating(t.dtype()),
              "{} ({} rank {}): avg needs a floating tensor, got {}", op, backend, rank,
              t.describe());
}

static void check_like(const char* op, const Tensor& a, const Tensor& b, const std::string& backend,
                       int rank) {
  DDP_CHECK_T(ShapeError, a.shape() == b.shape(), "{} ({} rank {}): shapes differ: {} vs {}", op,
              backend, rank, a.describe(), b.describe());
  DDP_CHECK_T(DTypeError, a.dtype() == b.dtype(), "{} ({} rank {}): dtypes differ: {} vs {}", op,
              backend, rank, a.describe(), b.describe());
  DDP_CHECK_T(DeviceError, a.device() == b.device(), "{} ({} rank {}): devices differ: {} vs {}", op,
              backend, rank, a.describe(), b.describe());
  // Bytes move as they lie (Note [Dense tensors in collectives]): a
  // channels-last output of a contiguous input would get its elements permuted.
  DDP_CHECK_T(ValueError, same_dense_layout(a, b),
              "{} ({} rank {}): memory layouts differ: {} has strides {}, {} has strides {}", op,
              backend, rank, a.describe(), fmt::join(a.strides(), ", "), b.describe(),
              fmt::join(b.strides(), ", "));
}

WorkPtr ProcessGroup::allreduce(Tensors tensors, ReduceOp op) {
  DDP_CHECK(!tensors.empty(), "allreduce ({} rank {}): no tensors", backend_name(), rank_);
  for (const Tensor& t : tensors) {
    check_tensor("allreduce", t);
    check_avg("allreduce", op, t, backend_name(), rank_);
  }
  check_same_device("allreduce", tensors, backend_name(), rank_);
  bump_versions(tensors);
  return issue("allreduce", tensors, [&] { return fmt::format("op={}", reduce_op_name(op)); },
               [&] { return do_allreduce(tensors, op); });
}

WorkPtr ProcessGroup::broadcast(Tensors tensors, int root) {
  DDP_CHECK(!tensors.empty(), "broadcast ({} rank {}): no tensors", backend_name(), rank_);
  check_rank("broadcast", root, "root");
  for (const Tensor& t : tensors) check_tensor("broadcast", t);
  check_same_device("broadcast", tensors, backend_name(), rank_);
  bump_versions(tensors);
  return issue("broadcast", tensors, [&] { return fmt::format("root={}", root); },
               [&] { return do_broadcast(tensors, root); });
}

WorkPtr ProcessGroup::reduce(Tensors tensors, int root, ReduceOp op) {
  DDP_CHECK(!tensors.empty(), "reduce ({} rank {}): no tensors", backend_name(), rank_);
  check_rank("reduce", root, "root");
  for (const Tensor& t : tensors) {
    check_tensor("reduce", t);
    check_avg("reduce", op, t, backend_name(), rank_);
  }
  check_same_device("reduce", tensors, backend_name(), rank_);
  bump_versions(tensors);
  return issue("reduce", tensors,
               [&] { return fmt::format("root={}, op={}", root, reduce_op_name(op)); },
               [&] { return do_reduce(tensors, root, op); });
}

WorkPtr ProcessGroup::allgather(Tensors outputs, const Tensor& input) {
  check_tensor("allgather", input);
  DDP_CHECK_T(ShapeError, int(outputs.size()) == size_,
              "allgather ({} rank {}): {} output tensors for world size {}", backend_name(), rank_,
              outputs.size(), size_);
  for (const Tensor& o : outputs) {
    check_tensor("allgather", o);
    check_like("allgather", o, input, backend_name(), rank_);
  }
  bump_versions(outputs);
  return issue("allgather", Tensors{input}, [] { return std::string(); },
               [&] { return do_allgather(outputs, input); });
}

WorkPtr ProcessGroup::reduce_scatter(const Tensor& output, Tensors inputs, ReduceOp op) {
  check_tensor("reduce_scatter", output);
  check_avg("reduce_scatter", op, output, backend_name(), rank_);
  DDP_CHECK_T(ShapeError, int(inputs.size()) == size_,
              "reduce_scatter ({} rank {}): {} input tensors for world size {}", backend_name(),
              rank_, inputs.size(), size_);
  for (const Tensor& i : inputs) {
    check_tensor("reduce_scatter", i);
    check_like("reduce_scatter", i, output, backend_name(), rank_);
  }
  bump_versions({output});
  return issue("reduce_scatter", Tensors{output},
               [&] { return fmt::format("op={}", reduce_op_name(op)); },
               [&] { return do_reduce_scatter(output, inputs, op); });
}

WorkPtr ProcessGroup::all_to_all(const Tensor& output, const Tensor& input) {
  check_tensor("all_to_all", input);
  check_tensor("all_to_all", output);
  check_like("all_to_all", output, input, backend_name(), rank_);
  DDP_CHECK_T(ShapeError, input.dim() >= 1 && input.size(0) % size_ == 0,
              "all_to_all ({} rank {}): dim 0 of {} must split into {} equal chunks",
              backend_name(), rank_, input.describe(), size_);
  // The chunks are byte ranges: dim 0 must be the outermost in memory.
  DDP_CHECK_T(ValueError, input.numel() == 0 || input.size(0) == 1 ||
                              input.stride(0) * input.size(0) == input.numel(),
              "all_to_all ({} rank {}): dim 0 of {} (strides {}) is not outermost in memory, so "
              "its chunks are not blocks; make it contiguous first",
              backend_name(), rank_, input.describe(), fmt::join(input.strides(), ", "));
  bump_versions({output});
  return issue("all_to_all", Tensors{input}, [] { return std::string(); },
               [&] { return do_all_to_all(output, input); });
}

WorkPtr ProcessGroup::barrier() {
  return issue("barrier", Tensors{}, [] { return std::string(); }, [&] { return do_barrier(); });
}

WorkPtr ProcessGroup::send(const Tensor& tensor, int dst, int tag) {
  check_tensor("send", tensor);
  check_rank("send", dst, "destination");
  DDP_CHECK(dst != rank_, "send ({} rank {}): cannot send to itself", backend_name(), rank_);
  DDP_CHECK(tag >= 0, "send ({} rank {}): negative tag {}", backend_name(), rank_, tag);
  return issue("send", Tensors{tensor}, nullptr, [&] { return do_send(tensor, dst, tag); });
}

WorkPtr ProcessGroup::recv(const Tensor& tensor, int src, int tag) {
  check_tensor("recv", tensor);
  check_rank("recv", src, "source");
  DDP_CHECK(src != rank_, "recv ({} rank {}): cannot receive from itself", backend_name(), rank_);
  DDP_CHECK(tag >= 0, "recv ({} rank {}): negative tag {}", backend_name(), rank_, tag);
  bump_versions({tensor});
  return issue("recv", Tensors{tensor}, nullptr, [&] { return do_recv(tensor, src, tag); });
}

}  // namespace ddp::dist
