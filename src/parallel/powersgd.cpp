// The PowerSGD communication hook. See powersgd.h for the algorithm and its
// Notes, docs/powersgd.md for the user's side.

#include "ddp/parallel/powersgd.h"

#include <cmath>
#include <cstdio>
#include <exception>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/dense_layout.h"
#include "ddp/tensor/ops.h"
#include "parallel/powersgd_kernels.h"

namespace ddp::parallel {

using powersgd_detail::add_error_and_project;
using powersgd_detail::orthogonalize;
using powersgd_detail::project_back;
using powersgd_detail::reconstruct;

void validate(const PowerSGDOptions& o) {
  if (o.matrix_approximation_rank < 1)
    DDP_THROW(ValueError, "PowerSGDOptions.matrix_approximation_rank must be >= 1, got {}",
              o.matrix_approximation_rank);
  if (o.start_powerSGD_iter < 0)
    DDP_THROW(ValueError, "PowerSGDOptions.start_powerSGD_iter must be >= 0, got {}",
              o.start_powerSGD_iter);
  if ((o.use_error_feedback || o.warm_start) && o.start_powerSGD_iter < 2)
    DDP_THROW(ValueError,
              "PowerSGDOptions.start_powerSGD_iter must be >= 2 when use_error_feedback or "
              "warm_start is on (DDP rebuilds its buckets after the first iteration; Note "
              "[PowerSGD state and bucket rebuilds]), got {}",
              o.start_powerSGD_iter);
  if (!std::isfinite(o.min_compression_rate) || o.min_compression_rate < 1.0)
    DDP_THROW(ValueError, "PowerSGDOptions.min_compression_rate must be a number >= 1, got {}",
              o.min_compression_rate);
  if (!std::isfinite(o.orthogonalization_epsilon) || o.orthogonalization_epsilon < 0.0)
    DDP_THROW(ValueError, "PowerSGDOptions.orthogonalization_epsilon must be >= 0, got {}",
              o.orthogonalization_epsilon);
}

namespace powersgd_detail {

// One gradient of a bucket that is worth compressing, as an n x m matrix.
struct Compressed {
  Tensor matrix;      // view into the bucket buffer
  Tensor error;       // its error memory (view), when error feedback is on
  int64_t rank = 0;   // min(n, m, matrix_approximation_rank)
  int64_t p_offset = 0, q_offset = 0, error_offset = 0;
};

}  // namespace powersgd_detail
using powersgd_detail::Compressed;

namespace {

// The uncompressed path: like allreduce_hook, but a sum of pre-divided
// gradients, as the sum is the one reduction every backend has.
BucketWork average(dist::ProcessGroup& group, GradBucket& bucket) {
  bucket.buffer.mul_(1.0 / group.size());
  return BucketWork{group.allreduce({bucket.buffer}, dist::ReduceOp::sum), {}};
}

Tensor factor(const Tensor& memory, int64_t offset, int64_t rows, int64_t rank) {
  return memory.narrow(0, offset, rows * rank).view({rows, rank});
}

}  // namespace

struct PowerSGDState::Bucket {
  // The layout the memory below belongs to.
  std::vector<Shape> shapes;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  Tensor error;  // residual of the compressed tensors, flat in bucket order
  Tensor p, q;   // the factors of the compressed tensors, flat in bucket order
  // Loaded from a checkpoint (on the CPU): moves to the gradients' device at
  // its first step (Note [PowerSGD checkpoints]).
  bool restored = false;
};

// One compressed bucket between its launch and its finish.
struct PowerSGDState::Step {
  std::mutex mu;  // start_q may come from the next launch or from finish
  bool q_started = false;
  std::exception_ptr failure;  // of start_q, raised by finish
  dist::ProcessGroup* group = nullptr;
  std::shared_ptr<Bucket> state;
  std::vector<Compressed> compressed;
  Tensor flat;  // the uncompressed gradients, summed in place
  dist::WorkPtr exact_work, p_work, q_work;
  Tensors exact_views;
  double inv_world = 1.0;
  PowerSGDOptions options;

  // Waits for the summed P; orthogonalises it, computes Q = input^T P and
  // starts its allreduce. Once only.
  void start_q(bool rethrow);
  // Starts Q if not yet done, then writes the averaged gradients.
  void finish();
};

PowerSGDState::PowerSGDState(PowerSGDOptions options)
    : options_(options), generator_(options.seed) {
  validate(options_);
}

int64_t PowerSGDState::iteration() const {
  std::lock_guard<std::mutex> g(mu_);
  return iteration_;
}
int64_t PowerSGDState::numel_before_compression() const {
  std::lock_guard<std::mutex> g(mu_);
  return numel_before_;
}
int64_t PowerSGDState::numel_after_compression() const {
  std::lock_guard<std::mutex> g(mu_);
  return numel_after_;
}
double PowerSGDState::compression_rate() const {
  std::lock_guard<std::mutex> g(mu_);
  return numel_after_ > 0 ? double(numel_before_) / double(numel_after_) : 0.0;
}

namespace {
Tensor copy_or_undefined(const Tensor& t) { return t.defined() ? t.clone() : Tensor(); }
}  // namespace

Tensor PowerSGDState::error(int bucket_index) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = buckets_.find(bucket_index);
  return it == buckets_.end() ? Tensor() : copy_or_undefined(it->second->error);
}
Tensor PowerSGDState::q_memory(int bucket_index) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = buckets_.find(bucket_index);
  return it == buckets_.end() ? Tensor() : copy_or_undefined(it->second->q);
}
Tensor PowerSGDState::p_memory(int bucket_index) const {
  std::lock_guard<std::mutex> g(mu_);
  auto it = buckets_.find(bucket_index);
  return it == buckets_.end() ? Tensor() : copy_or_undefined(it->second->p);
}

void PowerSGDState::set_q_memory(int bucket_index, const Tensor& q) {
  if (!options_.warm_start)
    DDP_THROW(ValueError, "PowerSGDState::set_q_memory: needs PowerSGDOptions.warm_start");
  if (!q.defined() || q.dim() != 1)
    DDP_THROW(ValueError, "PowerSGDState::set_q_memory: expected a flat tensor, got {}",
              q.defined() ? q.describe() : std::string("an undefined tensor"));
  std::lock_guard<std::mutex> g(mu_);
  std::shared_ptr<Bucket>& slot = buckets_[bucket_index];
  if (!slot) slot = std::make_shared<Bucket>();
  slot->q = q.clone();
  slot->p = Tensor();
}

BucketWork PowerSGDState::run(dist::ProcessGroup& group, GradBucket& bucket) {
  // Note [PowerSGD chaining]: every launch first starts the Q half of the
  // bucket before it, on every rank alike.
  start_pending_q();
  bool plain;
  {
    std::lock_guard<std::mutex> g(mu_);
    plain = iteration_ < std::max(options_.start_powerSGD_iter, resume_at_);
    // The last bucket is launched after every other one of this backward.
    if (bucket.is_last) ++iteration_;
  }
  if (plain) return average(group, bucket);
  return compress(group, bucket);
}

BucketWork PowerSGDState::compress(dist::ProcessGroup& group, GradBucket& bucket) {
  const double inv_world = 1.0 / group.size();
  const Tensor& buffer = bucket.buffer;

  // Sort the gradients: compressed matrices, and the rest.
  std::vector<Compressed> compressed;
  Tensors uncompressed;
  std::vector<Shape> shapes;
  int64_t p_size = 0, q_size = 0, error_size = 0, before = 0, after = 0;
  for (const Tensor& grad : bucket.gradients) {
    shapes.push_back(grad.shape());
    const int64_t numel = grad.numel();
    before += numel;
    const int64_t n = grad.dim() == 0 ? 1 : grad.size(0);
    const int64_t m = n == 0 ? 0 : numel / n;
    const int64_t r = std::min<int64_t>({n, m, options_.matrix_approximation_rank});
    const bool worth = double((n + m) * r) * options_.min_compression_rate < double(numel);
    // The matrix is the gradient's block in memory order, n rows of m: a
    // channels-last weight [O, I, KH, KW] gives O rows of its KH*KW*I
    // elements (a column permutation of the contiguous matrix, which a
    // low-rank approximation does not care about). A layout whose dim 0 is
    // not outermost has no such rows and is sent exactly.
    const bool rows_outermost = grad.dim() == 0 || grad.is_contiguous() ||
                                grad.stride(0) * grad.size(0) == numel;
    if (!worth || !rows_outermost) {
      uncompressed.push_back(grad);
      after += numel;
      continue;
    }
    compressed.push_back(
        {flat_view(grad, "PowerSGD").view({n, m}), Tensor(), r, p_size, q_size, error_size});
    p_size += n * r;
    q_size += m * r;
    error_size += numel;
    after += (n + m) * r;
  }
  std::shared_ptr<Bucket> state;
  {
    std::lock_guard<std::mutex> g(mu_);
    numel_before_ += before;
    numel_after_ += after;
    std::shared_ptr<Bucket>& slot = buckets_[bucket.index];
    if (slot && slot->restored) {
      slot->restored = false;
      slot->device = buffer.device();
      if (slot->error.defined()) slot->error = slot->error.to(buffer.device());
      if (slot->q.defined()) slot->q = slot->q.to(buffer.device());
    }
    if (slot && slot->shapes.empty() && !slot->error.defined()) {  // only a set_q_memory so far
      slot->shapes = shapes;
      slot->dtype = buffer.dtype();
      slot->device = buffer.device();
    }
    if (slot && (slot->shapes != shapes || slot->dtype != buffer.dtype() ||
                 slot->device != buffer.device()))
      DDP_THROW(ValueError,
                "powersgd_hook: bucket {} changed its layout after PowerSGD started (now {} "
                "gradients in {}); its error and factors belong to other tensors. Register a "
                "new hook after rebuilding buckets (Note [PowerSGD state and bucket rebuilds])",
                bucket.index, shapes.size(), buffer.describe());
    if (!slot) {
      slot = std::make_shared<Bucket>();
      slot->shapes = shapes;
      slot->dtype = buffer.dtype();
      slot->device = buffer.device();
    }
    state = slot;
  }
  if (compressed.empty()) return average(group, bucket);

  const TensorOptions opts = TensorOptions(buffer.dtype()).device(buffer.device());
  // Note [PowerSGD error feedback]: add last residual; the error memory
  // keeps the input until the result is known, and is the input from here on.
  if (options_.use_error_feedback && !state->error.defined())
    state->error = Tensor::zeros({error_size}, opts);
  if (options_.use_error_feedback && state->error.numel() != error_size)  // from load_state_dict
    DDP_THROW(ValueError,
              "powersgd_hook: bucket {} needs an error memory of {} elements, the loaded state "
              "has {}",
              bucket.index, error_size, state->error.describe());
  for (Compressed& c : compressed)
    if (options_.use_error_feedback)
      c.error = state->error.narrow(0, c.error_offset, c.matrix.numel()).view(c.matrix.shape());

  // The exact part: one flat sum of every uncompressed gradient.
  Tensor flat;
  dist::WorkPtr exact_work;
  if (!uncompressed.empty()) {
    Tensors pieces;
    for (const Tensor& t : uncompressed) pieces.push_back(flat_view(t, "PowerSGD"));
    flat = cat(pieces, 0);
    exact_work = group.allreduce({flat}, dist::ReduceOp::sum);
  }

  // Note [PowerSGD warm start]: a fresh random Q, or last iteration's.
  if (!options_.warm_start || !state->q.defined()) {
    state->q = randn({q_size}, TensorOptions(DType::f32), &generator_).to(buffer.device(), buffer.dtype());
  } else if (state->q.numel() != q_size) {  // from set_q_memory
    DDP_THROW(ValueError, "powersgd_hook: bucket {} needs a Q of {} elements, set_q_memory gave {}",
              bucket.index, q_size, state->q.describe());
  } else {
    state->q = state->q.to(buffer.device(), buffer.dtype());  // no copy when already so
  }
  if (!state->p.defined()) state->p = Tensor::empty({p_size}, opts);
  for (const Compressed& c : compressed) {
    Tensor q = factor(state->q, c.q_offset, c.matrix.size(1), c.rank);
    orthogonalize(q, options_.orthogonalization_epsilon);
    add_error_and_project(c.matrix, c.error, q, factor(state->p, c.p_offset, c.matrix.size(0), c.rank));
  }
  dist::WorkPtr p_work = group.allreduce({state->p}, dist::ReduceOp::sum);

  // The rest needs the summed P. Note [PowerSGD chaining]: the Q half is
  // started when the next bucket launches, or at the latest by finish.
  auto step = std::make_shared<Step>();
  step->group = &group;
  step->state = state;
  step->compressed = std::move(compressed);
  step->flat = flat;
  step->exact_work = exact_work;
  step->exact_views = uncompressed;
  step->p_work = p_work;
  step->inv_world = inv_world;
  step->options = options_;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!bucket.is_last) pending_ = step;
  }
  return BucketWork{std::move(p_work), [step] { step->finish(); }};
}

void PowerSGDState::start_pending_q() {
  std::shared_ptr<Step> pending;
  {
    std::lock_guard<std::mutex> g(mu_);
    pending.swap(pending_);
  }
  if (pending) pending->start_q(/*rethrow=*/false);
}

void PowerSGDState::Step::start_q(bool rethrow) {
  std::lock_guard<std::mutex> g(mu);
  if (!q_started) {
    q_started = true;
    try {
      p_work->wait();
      for (const Compressed& c : compressed) {
        Tensor p = factor(state->p, c.p_offset, c.matrix.size(0), c.rank);
        orthogonalize(p, options.orthogonalization_epsilon);
        project_back(c.error.defined() ? c.error : c.matrix, p,
                     factor(state->q, c.q_offset, c.matrix.size(1), c.rank));
      }
      q_work = group->allreduce({state->q}, dist::ReduceOp::sum);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (rethrow && failure) std::rethrow_exception(failure);
}

void PowerSGDState::Step::finish() {
  start_q(/*rethrow=*/true);
  if (exact_work) {
    exact_work->wait();
    flat.mul_(inv_world);
    int64_t offset = 0;
    for (Tensor& t : exact_views) {
      flat_view(t, "PowerSGD").copy_(flat.narrow(0, offset, t.numel()));
      offset += t.numel();
    }
  }
  q_work->wait();
  state->q.mul_(inv_world);
  for (const Compressed& c : compressed) {
    Tensor p = factor(state->p, c.p_offset, c.matrix.size(0), c.rank);
    Tensor q = factor(state->q, c.q_offset, c.matrix.size(1), c.rank);
    reconstruct(c.matrix, c.error, p, q);
  }
  if (!options.warm_start) {
    state->p = Tensor();
    state->q = Tensor();
  }
}

CommHook powersgd_hook(std::shared_ptr<PowerSGDState> state) {
  if (!state) DDP_THROW(ValueError, "powersgd_hook: the state is null");
  return [state](dist::ProcessGroup& group, GradBucket& bucket) { return state->run(group, bucket); };
}

// ---- Note [PowerSGD checkpoints] ----------------------------------------------------

namespace {

constexpr const char* kLoadWho = "PowerSGDState.load_state_dict";

Tensor i64(int64_t v) { return Tensor::from_vector(std::vector<int64_t>{v}, {1}); }

int64_t i64_of(const TensorDict& d, const std::string& key) {
  const Tensor* t = d.find(key);
  DDP_CHECK_T(ValueError, t && t->defined() && t->numel() == 1 && !is_floating(t->dtype()),
              "{}: missing or malformed '{}' (an integer scalar); is this a PowerSGD state?",
              kLoadWho, key);
  return t->to_vector<int64_t>()[0];
}

// Shapes as one i64 list: ndim, then the sizes, for each.
Tensor encode_shapes(const std::vector<Shape>& shapes) {
  std::vector<int64_t> v;
  for (const Shape& s : shapes) {
    v.push_back(int64_t(s.size()));
    v.insert(v.end(), s.begin(), s.end());
  }
  return Tensor::from_vector(v, {int64_t(v.size())});
}

std::vector<Shape> decode_shapes(const Tensor& t, const std::string& key) {
  DDP_CHECK_T(ValueError, t.dim() == 1 && t.dtype() == DType::i64, "{}: '{}' must be a 1-D i64 "
              "tensor, got {}", kLoadWho, key, t.describe());
  const std::vector<int64_t> v = t.to_vector<int64_t>();
  std::vector<Shape> out;
  for (size_t k = 0; k < v.size();) {
    const int64_t nd = v[k++];
    DDP_CHECK_T(ValueError, nd >= 0 && nd <= 16 && k + size_t(nd) <= v.size(),
                "{}: '{}' is malformed at entry {}", kLoadWho, key, k - 1);
    Shape s(v.begin() + int64_t(k), v.begin() + int64_t(k) + nd);
    for (int64_t d : s)
      DDP_CHECK_T(ValueError, d >= 0, "{}: '{}' has a negative size", kLoadWho, key);
    out.push_back(std::move(s));
    k += size_t(nd);
  }
  return out;
}

}  // namespace

TensorDict PowerSGDState::state_dict() const {
  std::lock_guard<std::mutex> g(mu_);
  TensorDict out;
  out.insert("matrix_approximation_rank", i64(options_.matrix_approximation_rank));
  out.insert("use_error_feedback", i64(options_.use_error_feedback));
  out.insert("warm_start", i64(options_.warm_start));
  out.insert("iteration", i64(iteration_));
  if (resume_at_ > iteration_) out.insert("resume_at", i64(resume_at_));
  out.insert("numel_before_compression", i64(numel_before_));
  out.insert("numel_after_compression", i64(numel_after_));
  out.insert("generator.seed", i64(int64_t(generator_.seed())));
  out.insert("generator.offset", i64(int64_t(generator_.offset())));
  for (const auto& [index, b] : buckets_) {
    const std::string prefix = fmt::format("bucket.{}.", index);
    out.insert(prefix + "shapes", encode_shapes(b->shapes));
    if (b->error.defined()) out.insert(prefix + "error", b->error.to(Device::cpu()).clone());
    if (b->q.defined()) out.insert(prefix + "q", b->q.to(Device::cpu()).clone());
  }
  return out;
}

void PowerSGDState::load_state_dict(const TensorDict& dict) {
  // Everything is checked and built aside first: a bad state changes nothing.
  auto expect_option = [&](const char* key, int64_t mine) {
    const int64_t saved = i64_of(dict, key);
    DDP_CHECK_T(ValueError, saved == mine,
                "{}: the state was saved with {} = {}, this hook has {}; its memory would not "
                "fit",
                kLoadWho, key, saved, mine);
  };
  expect_option("matrix_approximation_rank", options_.matrix_approximation_rank);
  expect_option("use_error_feedback", options_.use_error_feedback);
  expect_option("warm_start", options_.warm_start);
  const int64_t iteration = i64_of(dict, "iteration");
  const int64_t resume_at = dict.contains("resume_at") ? i64_of(dict, "resume_at") : 0;
  const int64_t before = i64_of(dict, "numel_before_compression");
  const int64_t after = i64_of(dict, "numel_after_compression");
  const int64_t seed = i64_of(dict, "generator.seed"), offset = i64_of(dict, "generator.offset");
  DDP_CHECK_T(ValueError, iteration >= 0 && before >= 0 && after >= 0 && offset >= 0,
              "{}: negative iteration, statistics or generator offset", kLoadWho);
  std::map<int, std::shared_ptr<Bucket>> buckets;
  static const std::set<std::string> kTop = {
      "matrix_approximation_rank", "use_error_feedback", "warm_start", "iteration",
      "numel_before_compression", "numel_after_compression", "generator.seed", "generator.offset",
      "resume_at"};
  for (const auto& [key, t] : dict) {
    if (kTop.count(key)) continue;
    int index = -1;
    char field[16] = {};
    int used = 0;
    const bool ok = std::sscanf(key.c_str(), "bucket.%d.%15[a-z]%n", &index, field, &used) == 2 &&
                    size_t(used) == key.size() && index >= 0;
    DDP_CHECK_T(ValueError, ok, "{}: unexpected key '{}'", kLoadWho, key);
    DDP_CHECK_T(ValueError, t.defined(), "{}: '{}' is undefined", kLoadWho, key);
    std::shared_ptr<Bucket>& b = buckets[index];
    if (!b) b = std::make_shared<Bucket>();
    const std::string name = field;
    if (name == "shapes") {
      b->shapes = decode_shapes(t, key);
      continue;
    }
    DDP_CHECK_T(ValueError, name == "error" || name == "q", "{}: unexpected key '{}'", kLoadWho,
                key);
    DDP_CHECK_T(ValueError, t.dim() == 1 && is_floating(t.dtype()),
                "{}: '{}' must be a flat floating tensor, got {}", kLoadWho, key, t.describe());
    DDP_CHECK_T(ValueError, name != "error" || options_.use_error_feedback,
                "{}: '{}' given, but error feedback is off", kLoadWho, key);
    (name == "error" ? b->error : b->q) = t.to(Device::cpu()).clone();
  }
  for (auto& [index, b] : buckets) {
    DDP_CHECK_T(ValueError, dict.contains(fmt::format("bucket.{}.shapes", index)),
                "{}: bucket {} has memory but no 'bucket.{}.shapes'", kLoadWho, index, index);
    DDP_CHECK_T(ValueError,
                !b->error.defined() || !b->q.defined() || b->error.dtype() == b->q.dtype(),
                "{}: bucket {}'s error and Q differ in dtype", kLoadWho, index);
    b->dtype = b->error.defined() ? b->error.dtype() : b->q.defined() ? b->q.dtype() : DType::f32;
    b->restored = true;
  }
  std::lock_guard<std::mutex> g(mu_);
  iteration_ = iteration;
  resume_at_ = resume_at;
  numel_before_ = before;
  numel_after_ = after;
  generator_.set_state(uint64_t(seed), uint64_t(offset));
  buckets_ = std::move(buckets);
  pending_.reset();
}

void PowerSGDState::load_peer_state(const TensorDict& dict) {
  load_state_dict(dict);  // checks everything first
  std::lock_guard<std::mutex> g(mu_);
  buckets_.clear();
  pending_.reset();
  resume_at_ = iteration_ + 2;
}

CommHook powersgd_hook(PowerSGDOptions options) {
  return powersgd_hook(std::make_shared<PowerSGDState>(options));
}

}  // namespace ddp::parallel
