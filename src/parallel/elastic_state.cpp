// The state a joining rank receives from rank 0 of its new generation
// (Note [Elastic membership]), and each generation's process group (Note
// [Elastic backends] in elastic.cpp).

#include "elastic_state.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <vector>

#include "ddp/autograd/grad_mode.h"
#include "ddp/config.h"
#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/dist/backend_registry.h"
#include "ddp/dist/prefix_store.h"
#include "ddp/dist/routing_process_group.h"

namespace ddp::parallel::detail {

namespace {

// The text travels as a u8 tensor, its length first, so that no side needs
// to know its size in advance.
// It travels on `on` (the group's control device) and is read back on the host.
std::string broadcast_text(dist::ProcessGroup& group, const std::string& text, int root,
                           const Device& on) {
  const bool sending = group.rank() == root;
  Tensor len = Tensor::from_vector(std::vector<int64_t>{sending ? int64_t(text.size()) : 0}, {1})
                   .to(on);
  group.broadcast({len}, root)->wait(group.timeout());
  const int64_t n = len.to(Device::cpu()).item<int64_t>();
  if (n == 0) return "";
  Tensor blob = Tensor::zeros({n}, DType::u8);
  if (sending) std::memcpy(blob.data<uint8_t>(), text.data(), size_t(n));
  Tensor moving = blob.to(on);
  group.broadcast({moving}, root)->wait(group.timeout());
  blob = moving.to(Device::cpu());
  return std::string(reinterpret_cast<const char*>(blob.data<uint8_t>()), size_t(n));
}

const char* type_text(DeviceType t) { return t == DeviceType::CUDA ? "cuda" : "cpu"; }

std::string shape_text(const Tensor& t) {
  std::string s;
  for (int64_t d : t.shape()) s += (s.empty() ? "" : ",") + std::to_string(d);
  return "[" + s + "]";
}

std::vector<int64_t> parse_shape(const std::string& s) {
  std::vector<int64_t> dims;
  std::string inner = s.substr(1, s.size() - 2);
  std::stringstream in(inner);
  std::string part;
  while (std::getline(in, part, ',')) dims.push_back(std::stoll(part));
  return dims;
}

// Where a tensor that lives on device type t travels: the same device type
// on every rank, since every rank derives it from the listing. CUDA tensors
// stay on the GPU when the group takes them natively (nccl, or a routing
// group with a CUDA backend); the rest go by the control device, which is
// the CPU unless the group takes no CPU tensors (a bare nccl group).
Device travel_device(const dist::ProcessGroup& group, DeviceType t, const Device& compute) {
  if (t == DeviceType::CUDA && compute.is_cuda() && group.caps().cuda_tensors) return compute;
  return dist::control_device(group, compute);
}

}  // namespace

BroadcastDicts broadcast_dicts(dist::ProcessGroup& group, const std::string& header,
                               const NamedDicts& dicts, int root, const Device& compute) {
  NoGradGuard no_grad;
  const bool sending = group.rank() == root;
  const Device control = dist::control_device(group, compute);
  // The listing: the header's lines, then per dict "section NAME" and one
  // "tensor NAME SHAPE DTYPE DEVICE_TYPE" per tensor.
  std::vector<Tensor> tensors;
  std::vector<DeviceType> homes;  // the device type each tensor lives on
  std::string listing;
  if (sending) {
    listing = header;
    for (const auto& [section, dict] : dicts) {
      listing += "section\t" + section + "\n";
      for (const auto& [name, t] : dict) {
        const DeviceType home = t.device().type;
        tensors.push_back(t.contiguous().to(travel_device(group, home, compute)));
        homes.push_back(home);
        listing += fmt::format("tensor\t{}\t{}\t{}\t{}\n", name, shape_text(t),
                               dtype_name(t.dtype()), type_text(home));
      }
    }
  }
  listing = broadcast_text(group, listing, root, control);

  // Parse it (also on the root, which thereby checks its own listing).
  BroadcastDicts out;
  std::vector<std::pair<size_t, std::string>> entries;  // (dict, tensor name)
  std::stringstream lines(listing);
  std::string line;
  size_t k = 0;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, '\t')) f.push_back(field);
    if (f.size() == 2 && f[0] == "section") {
      out.dicts.emplace_back(f[1], TensorDict());
    } else if (f.size() == 5 && f[0] == "tensor" && !out.dicts.empty() &&
               (f[4] == "cpu" || f[4] == "cuda")) {
      entries.emplace_back(out.dicts.size() - 1, f[1]);
      if (!sending) {
        const DeviceType home = f[4] == "cuda" ? DeviceType::CUDA : DeviceType::CPU;
        const Device on = travel_device(group, home, compute);
        tensors.push_back(Tensor::empty(parse_shape(f[2]),
                                        TensorOptions(dtype_from_name(f[3])).device(on)));
        homes.push_back(home);
      }
      ++k;
    } else {
      DDP_CHECK(out.dicts.empty(), "elastic: a malformed state listing line '{}'", line);
      out.header += line + "\n";
    }
  }
  DDP_CHECK(k == tensors.size(), "elastic: the state listing does not match");

  // One broadcast per device and dtype: a coalesced collective takes one of each.
  std::map<std::pair<std::string, DType>, Tensors> batches;
  for (const Tensor& t : tensors) batches[{t.device().str(), t.dtype()}].push_back(t);
  for (auto& [what, ts] : batches) group.broadcast(ts, root)->wait(group.timeout());
  if (sending) {
    out.dicts = dicts;
    return out;
  }
  // Each tensor goes home (CUDA tensors to this rank's GPU).
  for (size_t i = 0; i < entries.size(); ++i) {
    const Device home =
        homes[i] == DeviceType::CUDA && compute.is_cuda() ? compute : Device::cpu();
    out.dicts[entries[i].first].second.insert(entries[i].second, tensors[i].to(home));
  }
  return out;
}

int64_t broadcast_training_state(dist::ProcessGroup& group, io::Checkpoint& state, int64_t step,
                                 int root, const Device& compute) {
  const bool sending = group.rank() == root;
  // The header: "step N", and "generator NAME SEED OFFSET" per generator.
  // Per-rank sections travel later, from every member that holds one (Note
  // [Elastic per-rank state]).
  std::string header;
  NamedDicts dicts;
  if (sending) {
    header = "step\t" + std::to_string(step) + "\n";
    for (const auto& section : state.sections())
      if (!section.per_rank()) dicts.emplace_back(section.name, section.save());
    for (const auto& [name, g] : state.generators())
      header += fmt::format("generator\t{}\t{}\t{}\n", name, g->seed(), g->offset());
  }
  const BroadcastDicts got = broadcast_dicts(group, header, dicts, root, compute);
  std::map<std::string, std::pair<uint64_t, uint64_t>> generators;
  int64_t sent_step = -1;
  std::stringstream lines(got.header);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<std::string> f;
    std::stringstream fields(line);
    std::string field;
    while (std::getline(fields, field, '\t')) f.push_back(field);
    if (f.size() == 2 && f[0] == "step")
      sent_step = std::stoll(f[1]);
    else if (f.size() == 4 && f[0] == "generator")
      generators[f[1]] = {std::stoull(f[2]), std::stoull(f[3])};
    else
      DDP_THROW(ValueError, "elastic: a malformed state listing line '{}'", line);
  }
  DDP_CHECK(sent_step >= 0, "elastic: the state listing has no step");
  if (sending) return step;

  std::vector<std::string> sent;
  for (const auto& [name, dict] : got.dicts) sent.push_back(name);
  for (const auto& section : state.sections()) {
    if (section.per_rank()) continue;
    auto it = std::find_if(got.dicts.begin(), got.dicts.end(),
                           [&](const auto& d) { return d.first == section.name; });
    DDP_CHECK(it != got.dicts.end(), "elastic: the peer's state has no section '{}' (it has {})",
              section.name, fmt::join(sent, ", "));
    section.load(it->second);
  }
  for (const auto& [name, g] : state.generators()) {
    auto it = generators.find(name);
    DDP_CHECK(it != generators.end(), "elastic: the peer's state has no generator '{}'", name);
    g->set_state(it->second.first, it->second.second);
  }
  return sent_step;
}

std::string describe_section(const io::Checkpoint& state, const std::string& section) {
  std::string out;
  for (const auto& s : state.sections()) {
    if (s.name != section) continue;
    for (const auto& [name, t] : s.save())
      out += fmt::format("{} {} {}\n", name, shape_text(t), dtype_name(t.dtype()));
  }
  return out;
}

std::string first_difference(const std::string& ours, const std::string& theirs) {
  std::stringstream a(ours), b(theirs);
  std::string la, lb;
  for (int64_t i = 0;; ++i) {
    bool ha = bool(std::getline(a, la)), hb = bool(std::getline(b, lb));
    if (!ha && !hb) return "";
    if (ha && hb && la == lb) continue;
    return fmt::format("parameter {}: the job has {}, the joining rank has {}", i,
                       ha ? "'" + la + "'" : "(none)", hb ? "'" + lb + "'" : "(none)");
  }
}

// ---- each generation's group (Note [Elastic backends] in elastic.cpp) -------------

namespace {

std::string registered_list() {
  std::string s;
  for (const std::string& b : dist::registered_backends()) s += (s.empty() ? "" : ", ") + b;
  return s.empty() ? "none" : s;
}

// The registry's entry, or ValueError; "mpi" is refused with the reason.
const dist::BackendInfo& elastic_backend(const std::string& spec, const std::string& name) {
  DDP_CHECK(name != "mpi",
            "ElasticGroup: backend '{}': mpi cannot change its membership. Its group is "
            "MPI_COMM_WORLD, fixed at launch; dropping a dead rank needs ULFM (MPIX_Comm_shrink, "
            "Open MPI built --with-ft=ulfm and run with mpirun --enable-recovery), which libddp "
            "does not use. Use backend \"gloo\" (CPU) or \"cpu:gloo,cuda:nccl\" (GPU) with a "
            "store that outlives the ranks (ddprun --nproc-per-node MIN:MAX)",
            spec);
  const dist::BackendInfo* info = dist::find_backend(name);
  DDP_CHECK(info != nullptr, "ElasticGroup: backend '{}': this libddp has no backend '{}' (it has: {})",
            spec, name, registered_list());
  return *info;
}

}  // namespace

ElasticBackend::ElasticBackend(std::string spec, const Device& device, dist::GlooOptions gloo,
                               std::chrono::milliseconds timeout,
                               std::shared_ptr<dist::Store> store)
    : spec_(std::move(spec)), device_(device), gloo_(std::move(gloo)), timeout_(timeout) {
  // init_process_group's grammar, by the same parser (Note [Choosing the
  // backend]), with mpi refused by the lookup.
  routed_ = spec_.find(':') != std::string::npos;
  plan_ = dist::parse_backend_spec(
      spec_, "ElasticGroup",
      [this](const std::string& name) -> const dist::BackendInfo& {
        return elastic_backend(spec_, name);
      });
  DDP_CHECK_T(DeviceError, plan_.count(device_.type),
              "ElasticGroup: backend '{}' has no backend for {} tensors, and the device is {}",
              spec_, type_text(device_.type), device_.str());
  for (const auto& [t, name] : plan_)
    if (name != "gloo") {
      env_ = dist::detect_launch_env();
      break;
    }
  dist::BackendContext ctx;
  ctx.device = device_;
  ctx.env = env_;
  ctx.store = std::move(store);
  ctx.store_from_caller = true;
  for (const auto& [t, name] : plan_) {
    const std::string why = dist::find_backend(name)->unusable(ctx);
    DDP_CHECK(why.empty(), "ElasticGroup: the {} backend cannot run here: {}", name, why);
  }
}

std::shared_ptr<dist::ProcessGroup> ElasticBackend::create_one(
    const std::string& name, const std::shared_ptr<dist::Store>& store, const std::string& prefix,
    int rank, int size, std::shared_ptr<dist::ProcessGroup> host) const {
  std::shared_ptr<dist::ProcessGroup> pg;
#if DDP_HAVE_GLOO
  // The registry's gloo factory takes no GlooOptions: our group name (the
  // generation's keys), timeout and short roll call need the direct path.
  if (name == "gloo") {
    dist::GlooOptions g = gloo_;
    g.group_name = prefix + name;
    g.timeout = timeout_;
    pg = dist::ProcessGroupGloo::create(store, rank, size, g);
  }
#endif
  if (!pg) {
    dist::BackendContext ctx;
    ctx.rank = rank;
    ctx.size = size;
    ctx.device = device_;
    ctx.env = env_;
    ctx.store = std::make_shared<dist::PrefixStore>(prefix + name, store);
    ctx.store_from_caller = true;
    ctx.timeout = timeout_;
    // A survivor must survive: nccl's tear_down would end the process.
    ctx.async_error_handling = dist::AsyncErrorHandling::raise;
    ctx.host_group = std::move(host);
    pg = dist::find_backend(name)->create(ctx);
    DDP_CHECK(pg != nullptr && pg->rank() == rank && pg->size() == size,
              "ElasticGroup: the {} backend made {} instead of rank {} of {}", name,
              pg ? fmt::format("rank {} of {}", pg->rank(), pg->size()) : "no group", rank, size);
  }
  pg->set_timeout(timeout_);
  return pg;
}

std::shared_ptr<dist::ProcessGroup> ElasticBackend::create(
    const std::shared_ptr<dist::Store>& store, const std::string& prefix, int rank,
    int size) const {
  // Each backend once, CPU first (nccl could bootstrap through it).
  std::map<std::string, std::shared_ptr<dist::ProcessGroup>> made;
  std::vector<dist::RoutingProcessGroup::Route> routes;
  std::shared_ptr<dist::ProcessGroup> host;
  for (const auto& [t, name] : plan_) {
    if (!made.count(name)) made[name] = create_one(name, store, prefix, rank, size, host);
    if (t == DeviceType::CPU) host = made[name];
    routes.emplace_back(t, made[name]);
  }
  if (!routed_) return made.begin()->second;
  return std::make_shared<dist::RoutingProcessGroup>(std::move(routes));
}

namespace {

const dist::ProcessGroup& checked(const std::shared_ptr<dist::ProcessGroup>& g) {
  DDP_CHECK(g != nullptr, "GenerationGroup: no group given");
  return *g;
}

}  // namespace

GenerationGroup::GenerationGroup(std::shared_ptr<dist::ProcessGroup> inner, int64_t generation)
    : ProcessGroup(checked(inner).rank(), checked(inner).size()),
      generation_(generation),
      name_(inner->backend_name()),
      caps_(inner->caps()),
      inner_(std::move(inner)) {
  ProcessGroup::set_timeout(inner_->timeout());
  // Checked once, here (DDP_DEBUG=detail, or set_collective_checks on
  // ElasticGroup::group()), not again by the backend.
  inner_->set_collective_checks(false);
}

GenerationGroup::~GenerationGroup() = default;

void GenerationGroup::close(bool failed) {
  std::shared_ptr<dist::ProcessGroup> victim;
  {
    std::lock_guard<std::mutex> lk(mu_);
    victim = std::move(inner_);
  }
  if (!victim) return;
  try {
    if (failed) victim->set_timeout(std::chrono::milliseconds(1));
    victim.reset();  // the backend's destructor, unless a collective in flight still holds it
  } catch (const std::exception& e) {
    DDP_LOG_ERROR("elastic: closing generation {}'s {} group: {}", generation_, name_, e.what());
  }
}

bool GenerationGroup::closed() const {
  std::lock_guard<std::mutex> lk(mu_);
  return inner_ == nullptr;
}

void GenerationGroup::set_timeout(std::chrono::milliseconds t) {
  ProcessGroup::set_timeout(t);
  std::lock_guard<std::mutex> lk(mu_);
  if (inner_) inner_->set_timeout(t);
}

std::shared_ptr<dist::ProcessGroup> GenerationGroup::inner(const char* op) const {
  std::lock_guard<std::mutex> lk(mu_);
  DDP_CHECK_T(DistNetworkError, inner_ != nullptr,
              "{} ({} rank {}): generation {} of the elastic group was closed after a membership "
              "change; use ElasticGroup::group() (DDP: reset_group from on_change)",
              op, name_, rank(), generation_);
  return inner_;
}

dist::WorkPtr GenerationGroup::do_allreduce(Tensors& tensors, dist::ReduceOp op) {
  return inner("allreduce")->allreduce(tensors, op);
}
dist::WorkPtr GenerationGroup::do_broadcast(Tensors& tensors, int root) {
  return inner("broadcast")->broadcast(tensors, root);
}
dist::WorkPtr GenerationGroup::do_reduce(Tensors& tensors, int root, dist::ReduceOp op) {
  return inner("reduce")->reduce(tensors, root, op);
}
dist::WorkPtr GenerationGroup::do_allgather(Tensors& outputs, const Tensor& input) {
  return inner("allgather")->allgather(outputs, input);
}
dist::WorkPtr GenerationGroup::do_reduce_scatter(const Tensor& output, Tensors& inputs,
                                                 dist::ReduceOp op) {
  return inner("reduce_scatter")->reduce_scatter(output, inputs, op);
}
dist::WorkPtr GenerationGroup::do_all_to_all(const Tensor& output, const Tensor& input) {
  return inner("all_to_all")->all_to_all(output, input);
}
dist::WorkPtr GenerationGroup::do_barrier() { return inner("barrier")->barrier(); }
dist::WorkPtr GenerationGroup::do_send(const Tensor& tensor, int dst, int tag) {
  return inner("send")->send(tensor, dst, tag);
}
dist::WorkPtr GenerationGroup::do_recv(const Tensor& tensor, int src, int tag) {
  return inner("recv")->recv(tensor, src, tag);
}

}  // namespace ddp::parallel::detail
