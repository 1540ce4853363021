// Join: uneven inputs. See Note [Join] in join.h.

#include "ddp/parallel/join.h"

#include <string>

#include "ddp/autograd/grad_mode.h"
#include "ddp/core/error.h"
#include "ddp/tensor/ops.h"

namespace ddp::parallel {

namespace {

thread_local std::vector<JoinCollective>* t_join_log = nullptr;

// The vector every iteration's allreduce carries: one slot per rank (1: still
// in its loop), then "this iteration synchronises", then "a rebuild is due".
struct Presence {
  std::vector<float> slots;
  int world = 0;
  int active() const {
    int n = 0;
    for (int r = 0; r < world; ++r) n += slots[size_t(r)] > 0;
    return n;
  }
  int highest_active() const {
    for (int r = world; r-- > 0;)
      if (slots[size_t(r)] > 0) return r;
    return -1;
  }
  std::string missing() const {
    std::string out;
    for (int r = 0; r < world; ++r)
      if (slots[size_t(r)] == 0) out += (out.empty() ? "" : ",") + std::to_string(r);
    return out;
  }
  bool syncing() const { return slots[size_t(world)] > 0; }
  bool rebuild() const { return slots[size_t(world) + 1] > 0; }
};

Presence exchange(Joinable& model, std::vector<float> slots) {
  dist::ProcessGroup& g = model.join_process_group();
  NoGradGuard no_grad;
  Tensor t = Tensor::from_vector(slots, {int64_t(slots.size())})
                 .to(dist::control_device(g, model.join_device()));
  g.allreduce({t}, dist::ReduceOp::sum)->wait(g.timeout());
  return Presence{t.cpu().to_vector<float>(), g.size()};
}

[[noreturn]] void raise_early_termination(const Presence& p, int rank) {
  throw Error(fmt::format(
      "Join (rank {}): rank(s) {} ran out of inputs before the others "
      "(throw_on_early_termination is set, so every rank stops here)",
      rank, p.missing()));
}

}  // namespace

namespace detail {
void set_join_log(std::vector<JoinCollective>* log) { t_join_log = log; }
}  // namespace detail

void note_collective_for_join(dist::ProcessGroup& group, const Tensor& tensor) {
  if (t_join_log == nullptr) return;
  t_join_log->push_back(JoinCollective{&group, tensor.shape(), tensor.dtype(), tensor.device()});
}

Join::Join(std::vector<Joinable*> models, JoinOptions options)
    : models_(std::move(models)), options_(options) {
  DDP_CHECK_T(ValueError, !models_.empty(), "Join: no models given");
  for (size_t k = 0; k < models_.size(); ++k) {
    DDP_CHECK_T(ValueError, models_[k] != nullptr, "Join: model {} is null", k);
    DDP_CHECK_T(ValueError, &models_[k]->join_process_group() == &models_[0]->join_process_group(),
                "Join: model {} uses a different process group than model 0", k);
    const std::string refusal = models_[k]->join_refusal();
    DDP_CHECK_T(ValueError, refusal.empty(), "Join: model {} {}", k, refusal);
  }
}

Join::Notice Join::notify(Joinable& model, bool syncing, bool rebuild) {
  if (&model != models_[0]) return last_;
  dist::ProcessGroup& group = model.join_process_group();
  const int n = group.size();
  std::vector<float> slots(size_t(n) + 2, 0.0f);
  slots[size_t(group.rank())] = 1;
  slots[size_t(n)] = syncing ? 1 : 0;
  slots[size_t(n) + 1] = rebuild ? 1 : 0;
  Presence p = exchange(model, std::move(slots));
  if (options_.throw_on_early_termination && p.active() < n)
    raise_early_termination(p, group.rank());
  last_.active = p.active();
  last_.root = p.highest_active();
  last_.grad_scale = options_.divide_by_initial_world_size ? 1.0 : double(n) / p.active();
  last_root_ = last_.root;
  return last_;
}

void Join::run(const std::function<void()>& body) {
  DDP_CHECK_T(ValueError, body != nullptr, "Join::run: no body given");
  if (!options_.enable) {
    body();
    return;
  }
  struct Scope {
    Join* join;
    explicit Scope(Join* j) : join(j) {
      for (auto* m : join->models_) m->set_join_context(join);
    }
    ~Scope() {
      for (auto* m : join->models_) m->set_join_context(nullptr);
      detail::set_join_log(nullptr);
    }
  } scope(this);
  body();
  for (auto* m : models_) m->join_close_iteration();
  detail::set_join_log(nullptr);
  shadow_until_all_joined();
}

void Join::shadow_until_all_joined() {
  Joinable& first = *models_[0];
  const dist::ProcessGroup& group = first.join_process_group();
  const int n = group.size();
  for (;;) {
    Presence p = exchange(first, std::vector<float>(size_t(n) + 2, 0.0f));
    if (p.active() == 0) break;
    if (options_.throw_on_early_termination) raise_early_termination(p, group.rank());
    last_root_ = p.highest_active();
    for (auto* m : models_) m->join_shadow_iteration(p.syncing(), p.rebuild(), last_root_);
  }
  if (last_root_ >= 0)
    for (auto* m : models_) m->join_final_sync(last_root_);
}

}  // namespace ddp::parallel
