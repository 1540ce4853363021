// ZeroRedundancyOptimizer's checkpoints: this rank's shard, and loading the
// shards of a job of any world size. See Note [ZeRO-1 checkpoints] in
// ddp/parallel/zero.h.

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <regex>
#include <set>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/io/safetensors.h"
#include "ddp/parallel/zero.h"
#include "ddp/tensor/dense_layout.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/ops.h"
#include "parallel/zero_shared.h"

namespace ddp::parallel {

namespace {

constexpr const char* kWho = "ZeroRedundancyOptimizer.load_sharded_state_dict";
constexpr const char* kLocal = "local.";              // the local optimizer's own keys
constexpr const char* kLocalState = "local.state.";   // local.state.<segment>.<name>

double scalar_of(const TensorDict& shard, const std::string& key, size_t which) {
  const Tensor* t = shard.find(key);
  DDP_CHECK_T(ValueError, t && t->defined() && t->numel() == 1,
              "{}: shard {} has no '{}' (is it a ZeroRedundancyOptimizer shard?)", kWho, which,
              key);
  return t->cpu().to(DType::f64).item<double>();
}

const Tensor& tensor_of(const TensorDict& shard, const std::string& key, size_t which) {
  const Tensor* t = shard.find(key);
  DDP_CHECK_T(ValueError, t && t->defined(),
              "{}: shard {} has no '{}' (is it a ZeroRedundancyOptimizer shard?)", kWho, which,
              key);
  return *t;
}

std::string shard_file(const std::string& dir, int rank, int world) {
  return (std::filesystem::path(dir) /
          ("zero_shard_" + std::to_string(rank) + "_of_" + std::to_string(world) + ".safetensors"))
      .string();
}

// Note [ZeRO-1 checkpoints across layouts]: the dims of a dense tensor
// from outermost to innermost in memory, padded with -1 to kMaxDims.
constexpr int64_t kMaxDims = 8;
std::vector<int64_t> dim_order(const Tensor& p) {
  std::vector<int64_t> order(size_t(p.dim()));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!p.is_contiguous())
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return p.stride(a) > p.stride(b); });
  order.resize(size_t(kMaxDims), -1);
  return order;
}

// `flat` (p's elements in the memory order `saved` describes) re-laid in
// p's own memory order.
Tensor relay(const Tensor& flat, const std::vector<int64_t>& saved, const Tensor& p) {
  Shape strides(size_t(p.dim()));
  int64_t expected = 1;
  for (int64_t k = p.dim(); k-- > 0;) {
    const int64_t d = saved[size_t(k)];
    strides[size_t(d)] = expected;
    expected *= p.size(d);
  }
  Tensor logical = Tensor::from_storage(flat.storage(), p.shape(), strides, flat.offset(),
                                        flat.dtype());
  Tensor out = empty_in_layout_of({p}, p.shape(), TensorOptions(flat.dtype()));
  out.copy_(logical);
  return flat_view(out, kWho);
}

// One parameter's state reassembled from the shards.
struct FullState {
  std::map<std::string, Tensor> flat;  // name -> the whole flattened state
  double step = -1;                    // AdamW's count, when saved
  std::vector<char> covered;           // per element
};

}  // namespace

TensorDict ZeroRedundancyOptimizer::sharded_state_dict() const {
  const ZeroShared& s = *shared_;
  TensorDict out;
  out.insert("zero.world_size", Tensor::scalar(double(s.world), DType::f64));
  out.insert("zero.rank", Tensor::scalar(double(s.rank), DType::f64));
  std::vector<int64_t> segs;
  for (const ZeroSegment& seg : s.segments) {
    segs.push_back(int64_t(seg.param));
    segs.push_back(seg.offset);
    segs.push_back(seg.length);
  }
  out.insert("zero.segments", Tensor::from_vector(segs, {int64_t(s.segments.size()), 3}));
  std::vector<int64_t> numels, orders;
  for (const Tensor& p : s.params) {
    numels.push_back(p.numel());
    for (int64_t d : dim_order(p)) orders.push_back(d);
  }
  out.insert("zero.numels", Tensor::from_vector(numels, {int64_t(numels.size())}));
  out.insert("zero.dim_orders", Tensor::from_vector(orders, {int64_t(numels.size()), kMaxDims}));
  for (const auto& [key, t] : local_->state_dict()) out.insert(kLocal + key, t);
  return out;
}

void ZeroRedundancyOptimizer::load_sharded_state_dict(const std::vector<TensorDict>& shards) {
  load_shards_into_local(shards, /*partial=*/false);
}

void ZeroRedundancyOptimizer::load_shards_into_local(const std::vector<TensorDict>& shards,
                                                     bool partial) {
  const ZeroShared& me = *shared_;
  DDP_CHECK_T(ValueError, !shards.empty(), "{}: no shards given", kWho);
  const size_t world = size_t(scalar_of(shards[0], "zero.world_size", 0));
  DDP_CHECK_T(ValueError, world >= shards.size(),
              "{}: {} shards were given, but they were saved by a job of {} ranks", kWho,
              shards.size(), world);
  std::vector<const TensorDict*> by_rank(world, nullptr);
  for (size_t k = 0; k < shards.size(); ++k) {
    const double w = scalar_of(shards[k], "zero.world_size", k);
    DDP_CHECK_T(ValueError, w == double(world) && (partial || shards.size() == world),
                "{}: shard {} was saved by a job of {} ranks, but {} shards were given; pass the "
                "shard of every rank of the saving job",
                kWho, k, w, shards.size());
    const double r = scalar_of(shards[k], "zero.rank", k);
    DDP_CHECK_T(ValueError, r >= 0 && r < double(world) && by_rank[size_t(r)] == nullptr,
                "{}: shard {} claims rank {}, which is out of range or given twice", kWho, k, r);
    by_rank[size_t(r)] = &shards[k];
    const Tensor numels = tensor_of(shards[k], "zero.numels", k).cpu().to(DType::i64);
    DDP_CHECK_T(ValueError, numels.numel() == int64_t(me.params.size()),
                "{}: the checkpoint was saved for a model of {} trainable parameters, this one "
                "has {}",
                kWho, numels.numel(), me.params.size());
    for (size_t i = 0; i < me.params.size(); ++i)
      DDP_CHECK_T(ValueError, numels.data<int64_t>()[i] == me.params[i].numel(),
                  "{}: parameter {} has {} elements in the checkpoint but {} here", kWho, i,
                  numels.data<int64_t>()[i], me.params[i].numel());
  }

  // Reassemble every parameter's state from the segments of all shards.
  std::vector<FullState> full(me.params.size());
  NoGradGuard no_grad;
  for (size_t r = 0; r < world; ++r) {
    if (by_rank[r] == nullptr) continue;  // lost (partial only)
    const TensorDict& shard = *by_rank[r];
    const Tensor segs = tensor_of(shard, "zero.segments", r).cpu().to(DType::i64);
    DDP_CHECK_T(ValueError, segs.dim() == 2 && segs.size(1) == 3,
                "{}: shard of rank {}: zero.segments must be [n, 3], got {}", kWho, r,
                shape_str(segs.shape()));
    const int64_t* v = segs.data<int64_t>();
    for (int64_t k = 0; k < segs.size(0); ++k) {
      const int64_t i = v[3 * k], off = v[3 * k + 1], len = v[3 * k + 2];
      DDP_CHECK_T(ValueError,
                  i >= 0 && size_t(i) < me.params.size() && off >= 0 && len > 0 &&
                      off + len <= me.params[size_t(i)].numel(),
                  "{}: shard of rank {}: segment {} (parameter {}, elements [{}, {})) lies outside "
                  "the model",
                  kWho, r, k, i, off, off + len);
      const std::string prefix = kLocalState + std::to_string(k) + ".";
      FullState& f = full[size_t(i)];
      const Tensor& p = me.params[size_t(i)];
      bool any = false;
      for (const auto& [key, t] : shard) {
        if (key.rfind(prefix, 0) != 0) continue;
        any = true;
        const std::string name = key.substr(prefix.size());
        if (name == "step") {
          f.step = t.cpu().to(DType::f64).item<double>();
          continue;
        }
        DDP_CHECK_T(ValueError, t.numel() == len,
                    "{}: shard of rank {}: '{}' has {} elements, its segment {}", kWho, r, key,
                    t.numel(), len);
        auto it = f.flat.find(name);
        if (it == f.flat.end())
          it = f.flat.emplace(name, Tensor::zeros({p.numel()}, TensorOptions(p.dtype()))).first;
        it->second.narrow(0, off, len).copy_(t.reshape({len}));
      }
      if (!any) continue;  // not stepped yet
      if (f.covered.empty()) f.covered.assign(size_t(p.numel()), 0);
      for (int64_t e = off; e < off + len; ++e) {
        DDP_CHECK_T(ValueError, !f.covered[size_t(e)],
                    "{}: element {} of parameter {} is in two shards' segments", kWho, e, i);
        f.covered[size_t(e)] = 1;
      }
    }
  }
  for (size_t i = 0; i < full.size() && !partial; ++i) {
    const auto& c = full[i].covered;
    if (c.empty()) continue;
    const auto missing = std::find(c.begin(), c.end(), 0);
    DDP_CHECK_T(ValueError, missing == c.end(),
                "{}: element {} of parameter {} has no optimizer state in any shard (a shard is "
                "missing or from another job)",
                kWho, missing - c.begin(), i);
  }

  // Note [ZeRO-1 in an elastic job]: a lost shard's elements restart from
  // zero, but a second moment of zero beside the parameter's step count
  // would make AdamW's first update of them (1 - beta1) / sqrt(1 - beta2)
  // times too large; they get the mean of the parameter's surviving ones.
  if (partial)
    for (FullState& f : full) {
      const auto& c = f.covered;
      const int64_t kept = std::count(c.begin(), c.end(), char(1));
      if (c.empty() || kept == int64_t(c.size()) || kept == 0) continue;
      std::vector<double> keep(c.begin(), c.end());
      for (auto& [name, flat] : f.flat) {
        if (name != "exp_avg_sq" && name != "max_exp_avg_sq") continue;
        const Tensor mask = Tensor::from_vector(keep, {int64_t(keep.size())}).to(flat.dtype());
        const double mean = sum(flat * mask).to(DType::f64).item<double>() / double(kept);
        flat = flat * mask + (mask - 1.0) * (-mean);
      }
    }

  // Note [ZeRO-1 checkpoints across layouts]: a parameter saved in another
  // memory order (a contiguous job resumed channels-last, or the reverse)
  // has its state re-laid into this one's. Shards without the record were
  // saved contiguous.
  const TensorDict& first = shards[0];
  if (const Tensor* saved = first.find("zero.dim_orders")) {
    const Tensor orders = saved->cpu().to(DType::i64);
    DDP_CHECK_T(ValueError,
                orders.dim() == 2 && orders.size(0) == int64_t(me.params.size()) &&
                    orders.size(1) == kMaxDims,
                "{}: zero.dim_orders must be [{}, {}], got {}", kWho, me.params.size(), kMaxDims,
                shape_str(orders.shape()));
    for (size_t i = 0; i < full.size(); ++i) {
      const Tensor& p = me.params[i];
      const int64_t* row = orders.data<int64_t>() + i * size_t(kMaxDims);
      std::vector<int64_t> order(row, row + kMaxDims);
      std::vector<int64_t> sorted(order.begin(), order.begin() + p.dim());
      std::sort(sorted.begin(), sorted.end());
      bool valid = p.dim() <= kMaxDims;
      for (int64_t d = 0; valid && d < p.dim(); ++d) valid = sorted[size_t(d)] == d;
      for (int64_t k = p.dim(); valid && k < kMaxDims; ++k) valid = order[size_t(k)] == -1;
      DDP_CHECK_T(ValueError, valid,
                  "{}: zero.dim_orders row {} ({}) is not an order of the {} dims of parameter "
                  "{} ({})",
                  kWho, i, fmt::join(order, ", "), p.dim(), i, p.describe());
      if (order == dim_order(p)) continue;
      for (auto& [name, flat] : full[i].flat) flat = relay(flat, order, p);
    }
  }

  // This rank's segments, in the local optimizer's layout.
  TensorDict local;
  for (const auto& [key, t] : first)
    if (key.rfind("local.param_groups.", 0) == 0 && key != "local.param_groups.0.params")
      local.insert(key.substr(6), t);
  std::vector<int64_t> numbers;
  for (size_t k = 0; k < me.segments.size(); ++k) numbers.push_back(int64_t(k));
  local.insert("param_groups.0.params",
               Tensor::from_vector(numbers, {int64_t(numbers.size())}));
  for (size_t k = 0; k < me.segments.size(); ++k) {
    const ZeroSegment& seg = me.segments[k];
    const FullState& f = full[seg.param];
    if (f.covered.empty()) continue;
    const std::string prefix = "state." + std::to_string(k) + ".";
    if (f.step >= 0) local.insert(prefix + "step", Tensor::scalar(f.step, DType::f64));
    for (const auto& [name, flat] : f.flat)
      local.insert(prefix + name, flat.narrow(0, seg.offset, seg.length).clone());
  }
  local_->load_state_dict(local);
  param_groups()[0].lr = local_->param_groups()[0].lr;
  param_groups()[0].weight_decay = local_->param_groups()[0].weight_decay;
}

TensorDict ZeroRedundancyOptimizer::peer_shard() const {
  TensorDict out = sharded_state_dict();
  for (size_t k = 0; k < shared_->segment_params.size(); ++k)
    out.insert("zero.values." + std::to_string(k), shared_->segment_params[k].detach().clone());
  return out;
}

void ZeroRedundancyOptimizer::load_peer_shards(const std::vector<TensorDict>& shards) {
  const char* who = "ZeroRedundancyOptimizer.load_peer_shards";
  ZeroShared& me = *shared_;
  DDP_CHECK_T(ValueError, !me.any_gather_pending(),
              "{}: the last step's all-gather is still in flight; call synchronize_parameters() "
              "in the elastic step's apply (Note [ZeRO-1 in an elastic job])",
              who);
  DDP_CHECK_T(ValueError, !shards.empty(), "{}: no shards given", who);
  // Every value is checked before anything changes.
  struct Write {
    size_t param;
    int64_t offset;
    Tensor values;
  };
  std::vector<Write> writes;
  for (size_t r = 0; r < shards.size(); ++r) {
    const Tensor segs = tensor_of(shards[r], "zero.segments", r).cpu().to(DType::i64);
    DDP_CHECK_T(ValueError, segs.dim() == 2 && segs.size(1) == 3,
                "{}: shard {}: zero.segments must be [n, 3], got {}", who, r,
                shape_str(segs.shape()));
    const int64_t* v = segs.data<int64_t>();
    for (int64_t k = 0; k < segs.size(0); ++k) {
      const int64_t i = v[3 * k], off = v[3 * k + 1], len = v[3 * k + 2];
      const Tensor& values = tensor_of(shards[r], "zero.values." + std::to_string(k), r);
      DDP_CHECK_T(ValueError,
                  i >= 0 && size_t(i) < me.params.size() && off >= 0 && len > 0 &&
                      off + len <= me.params[size_t(i)].numel() && values.numel() == len,
                  "{}: shard {}: segment {} (parameter {}, elements [{}, {}), {} values) does not "
                  "fit the model",
                  who, r, k, i, off, off + len, values.numel());
      writes.push_back({size_t(i), off, values});
    }
  }
  // The old layout and state, put back if the new state is refused.
  const ZeroShared old = me;
  std::unique_ptr<optim::Optimizer> old_local = std::move(local_);
  try {
    me.lay_out();
    local_ = make_local_({optim::ParamGroup{me.segment_params, {}, {}}});
    local_->param_groups()[0].lr = param_groups()[0].lr;
    local_->param_groups()[0].weight_decay = param_groups()[0].weight_decay;
    load_shards_into_local(shards, /*partial=*/true);
  } catch (...) {
    me = old;
    local_ = std::move(old_local);
    throw;
  }
  reset_group_parameters(0, me.segment_params);
  NoGradGuard no_grad;
  for (const Write& w : writes) {
    Tensor p = flat_view(me.params[w.param], who);
    p.narrow(0, w.offset, w.values.numel()).copy_(w.values.to(p.device(), p.dtype()));
  }
}

void ZeroRedundancyOptimizer::save_shard(const std::string& dir) const {
  std::filesystem::create_directories(dir);
  io::save_safetensors(shard_file(dir, shared_->rank, shared_->world), sharded_state_dict());
}

void ZeroRedundancyOptimizer::load_shards(const std::string& dir) {
  const char* who = "ZeroRedundancyOptimizer.load_shards";
  const std::regex pattern(R"(zero_shard_(\d+)_of_(\d+)\.safetensors)");
  std::set<int> worlds;
  std::set<int> ranks;
  DDP_CHECK_T(ValueError, std::filesystem::is_directory(dir), "{}: '{}' is not a directory", who,
              dir);
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, pattern)) continue;
    ranks.insert(std::stoi(m[1]));
    worlds.insert(std::stoi(m[2]));
  }
  DDP_CHECK_T(ValueError, !worlds.empty(), "{}: no zero_shard_*_of_*.safetensors in '{}'", who,
              dir);
  DDP_CHECK_T(ValueError, worlds.size() == 1,
              "{}: '{}' holds shards of {} different world sizes; keep one job's shards per "
              "directory",
              who, dir, worlds.size());
  const int world = *worlds.begin();
  for (int r = 0; r < world; ++r)
    DDP_CHECK_T(ValueError, std::filesystem::exists(shard_file(dir, r, world)),
                "{}: the shard of rank {} of {} is missing ({})", who, r, world,
                shard_file(dir, r, world));
  std::vector<TensorDict> shards;
  for (int r = 0; r < world; ++r) shards.push_back(io::load_safetensors(shard_file(dir, r, world)));
  load_sharded_state_dict(shards);
}

}  // namespace ddp::parallel
