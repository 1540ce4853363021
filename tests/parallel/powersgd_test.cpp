// The PowerSGD hook against an independent f64 reference (plain loops, in
// this file), over thread ranks: the compressed result after several
// iterations, error feedback, warm start, the plain phase, the uncompressed
// path, equal gradients on every rank, inside DDP, and the bad options.

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ddp/nn/container.h"
#include "ddp/nn/linear.h"
#include "ddp/parallel/distributed.h"
#include "ddp/parallel/powersgd.h"
#include "ddp/tensor/ops.h"
#include "parallel/powersgd_reference.h"
#include "parallel/thread_group.h"
#include "parallel/world_of_one.h"

using namespace ddp;
using namespace ddp::parallel;
using ddp::test::on_every_rank;
using ddp::test::thread_groups;
using namespace ddp::test::powersgd;

namespace {

// A weight (compressed at rank 1 and 2), a bias (1-D: never), a 3x2 matrix
// (too small to pay) and a conv-like 5x2x3 kernel (a 5x6 matrix).
const std::vector<Shape> kShapes = {{8, 6}, {8}, {3, 2}, {5, 2, 3}};

// Runs `iters` iterations of the hook and of the reference on `world` thread
// ranks and compares every rank's result with the reference's, and the
// kept error and Q with the reference's state.
void check_against_reference(int world, PowerSGDOptions options, int iters) {
  Reference ref(kShapes, world, options.matrix_approximation_rank, options.min_compression_rate,
                options.use_error_feedback, options.warm_start, options.seed);
  auto groups = thread_groups(world);
  std::vector<std::shared_ptr<PowerSGDState>> states;
  std::vector<CommHook> hooks;
  for (int r = 0; r < world; ++r) {
    states.push_back(std::make_shared<PowerSGDState>(options));
    hooks.push_back(powersgd_hook(states.back()));
  }
  for (int it = 0; it < iters; ++it) {
    std::vector<std::vector<Matrix>> inputs(world);
    std::vector<std::vector<double>> results(world);
    for (int r = 0; r < world; ++r)
      for (const Shape& s : kShapes) inputs[r].push_back(gradient_values(shape_numel(s), r, it * 10 + int(inputs[r].size())));
    on_every_rank(world, [&](int r) {
      GradBucket b = make_bucket(kShapes);
      for (size_t k = 0; k < kShapes.size(); ++k)
        b.gradients[k].copy_(Tensor::from_vector(inputs[r][k], kShapes[k], TensorOptions(DType::f64)));
      reduce(hooks[r], *groups[r], b);
      results[r] = b.buffer.to_vector<double>();
    });
    const bool compressing = it >= options.start_powerSGD_iter;
    std::vector<double> want;
    if (compressing) {
      for (const Matrix& m : ref.step(inputs)) want.insert(want.end(), m.begin(), m.end());
    } else {
      for (size_t k = 0; k < kShapes.size(); ++k)
        for (size_t i = 0; i < inputs[0][k].size(); ++i) {
          double s = 0;
          for (int r = 0; r < world; ++r) s += inputs[r][k][i];
          want.push_back(s / world);
        }
    }
    for (int r = 0; r < world; ++r) {
      expect_near(results[r], want, "iteration " + std::to_string(it) + " rank " + std::to_string(r));
      EXPECT_EQ(results[r], results[0]) << "ranks differ at iteration " << it;
    }
    if (!compressing) {
      EXPECT_FALSE(states[0]->error(0).defined()) << "state kept before start_powerSGD_iter";
      EXPECT_FALSE(states[0]->q_memory(0).defined());
      continue;
    }
    // The kept state: error (compressed tensors only) and, with warm start, Q.
    for (int r = 0; r < world; ++r) {
      std::vector<double> want_error, want_q;
      for (const RefTensor& t : ref.tensors()) {
        if (t.r == 0) continue;
        want_error.insert(want_error.end(), t.error[r].begin(), t.error[r].end());
        want_q.insert(want_q.end(), t.q.begin(), t.q.end());
      }
      if (options.use_error_feedback)
        expect_near(states[r]->error(0).to_vector<double>(), want_error, "error, rank " + std::to_string(r));
      else
        EXPECT_FALSE(states[r]->error(0).defined());
      if (options.warm_start)
        expect_near(states[r]->q_memory(0).to_vector<double>(), want_q, "Q, rank " + std::to_string(r));
      else
        EXPECT_FALSE(states[r]->q_memory(0).defined()) << "Q kept without warm start";
    }
  }
  EXPECT_EQ(states[0]->iteration(), iters);
  // Something was compressed (else the reference comparison proves little).
  EXPECT_LT(states[0]->numel_after_compression(), states[0]->numel_before_compression());
}

}  // namespace

TEST(PowerSGD, MatchesTheReferenceOnTwoRanks) {
  check_against_reference(2, {.matrix_approximation_rank = 1, .start_powerSGD_iter = 2}, 6);
}

TEST(PowerSGD, MatchesTheReferenceAtRankTwoOnThreeRanks) {
  check_against_reference(3, {.matrix_approximation_rank = 2, .start_powerSGD_iter = 2,
                              .min_compression_rate = 1.0, .seed = 7}, 5);
}

TEST(PowerSGD, MatchesTheReferenceWithoutErrorFeedbackOrWarmStart) {
  check_against_reference(2, {.matrix_approximation_rank = 1, .start_powerSGD_iter = 0,
                              .use_error_feedback = false, .warm_start = false}, 4);
}

TEST(PowerSGD, MatchesTheReferenceWithErrorFeedbackOnly) {
  check_against_reference(4, {.matrix_approximation_rank = 1, .start_powerSGD_iter = 3,
                              .warm_start = false}, 5);
}

// Error feedback loses nothing: on one rank, what the hook handed back over
// k iterations plus the error it keeps is exactly what went in.
// Note [PowerSGD chaining]: launching bucket 1 starts bucket 0's Q
// allreduce. Launching both buckets before finishing either (as DDP does)
// must give the same gradients as running them one after the other.
TEST(PowerSGD, ChainingBucketsGivesTheSameGradientsAsOneAtATime) {
  constexpr int world = 2;
  const PowerSGDOptions options{.matrix_approximation_rank = 2, .start_powerSGD_iter = 2,
                                .min_compression_rate = 1.0};
  auto groups = thread_groups(world);
  std::vector<CommHook> chained, one_at_a_time;
  for (int r = 0; r < world; ++r) {
    chained.push_back(powersgd_hook(options));
    one_at_a_time.push_back(powersgd_hook(options));
  }
  for (int it = 0; it < 5; ++it) {
    std::vector<std::vector<double>> got(world), want(world);
    on_every_rank(world, [&](int r) {
      auto fill = [&](GradBucket& b, int bucket) {
        for (size_t k = 0; k < kShapes.size(); ++k)
          b.gradients[k].copy_(Tensor::from_vector(
              gradient_values(shape_numel(kShapes[k]), r, 100 * bucket + 10 * it + int(k)),
              kShapes[k], TensorOptions(DType::f64)));
      };
      GradBucket a0 = make_bucket(kShapes, 0, false), a1 = make_bucket(kShapes, 1, true);
      fill(a0, 0);
      fill(a1, 1);
      BucketWork w0 = chained[r](*groups[r], a0);
      BucketWork w1 = chained[r](*groups[r], a1);
      for (BucketWork* w : {&w0, &w1}) {
        w->work->wait();
        if (w->finish) w->finish();
      }
      GradBucket b0 = make_bucket(kShapes, 0, false), b1 = make_bucket(kShapes, 1, true);
      fill(b0, 0);
      fill(b1, 1);
      reduce(one_at_a_time[r], *groups[r], b0);
      reduce(one_at_a_time[r], *groups[r], b1);
      for (const GradBucket* b : {&a0, &a1}) {
        std::vector<double> v = b->buffer.to_vector<double>();
        got[r].insert(got[r].end(), v.begin(), v.end());
      }
      for (const GradBucket* b : {&b0, &b1}) {
        std::vector<double> v = b->buffer.to_vector<double>();
        want[r].insert(want[r].end(), v.begin(), v.end());
      }
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(got[r], want[r]) << "iteration " << it << " rank " << r;
      EXPECT_EQ(got[r], got[0]) << "ranks differ at iteration " << it;
    }
  }
}

TEST(PowerSGD, ErrorFeedbackKeepsTheResidual) {
  auto group = ddp::test::solo();
  auto state = std::make_shared<PowerSGDState>(PowerSGDOptions{.start_powerSGD_iter = 2});
  CommHook hook = powersgd_hook(state);
  const Shape shape{12, 10};  // rank 1 of a full-rank gradient: lossy
  Tensor handed_back = Tensor::zeros(shape, DType::f64), went_in = Tensor::zeros(shape, DType::f64);
  for (int it = 0; it < 8; ++it) {
    GradBucket b = make_bucket({shape});
    b.buffer.copy_(Tensor::from_vector(gradient_values(120, 0, it), {120}, TensorOptions(DType::f64)));
    went_in.add_(b.gradients[0]);
    reduce(hook, *group, b);
    handed_back.add_(b.gradients[0]);
    if (it >= 2) {
      Tensor error = state->error(0).view(shape);
      ASSERT_TRUE(allclose(handed_back + error, went_in, 1e-10, 1e-10)) << "iteration " << it;
      EXPECT_GT(max(abs(error)).item<double>(), 1e-3) << "rank 1 of a random 12x10 is not exact";
    } else {
      EXPECT_TRUE(allclose(handed_back, went_in, 0, 0)) << "plain phase, iteration " << it;
    }
  }
  EXPECT_EQ(state->numel_before_compression(), 6 * 120);
  EXPECT_EQ(state->numel_after_compression(), 6 * 22);
  EXPECT_NEAR(state->compression_rate(), 120.0 / 22.0, 1e-12);
}

// A bucket of 1-D and small tensors is averaged exactly, in one allreduce;
// a mixed bucket costs three (exact part, P, Q); a compressed-only one two.
TEST(PowerSGD, UncompressedTensorsAreAveragedExactly) {
  struct Case { std::vector<Shape> shapes; int allreduces; };
  for (const Case& c : {Case{{{16}, {3, 2}, {4}}, 1}, Case{{{16}, {9, 7}}, 3}, Case{{{9, 7}}, 2}}) {
    auto groups = thread_groups(2);
    std::vector<std::vector<double>> results(2), inputs(2);
    on_every_rank(2, [&](int r) {
      CommHook hook = powersgd_hook({.start_powerSGD_iter = 2});
      for (int it = 0; it < 3; ++it) {
        GradBucket b = make_bucket(c.shapes);
        inputs[r] = gradient_values(b.buffer.numel(), r, it);
        b.buffer.copy_(Tensor::from_vector(inputs[r], {b.buffer.numel()}, TensorOptions(DType::f64)));
        const int before = groups[r]->allreduces;
        reduce(hook, *groups[r], b);
        if (it == 2) EXPECT_EQ(groups[r]->allreduces - before, c.allreduces) << c.shapes.size() << " tensors";
        results[r] = b.buffer.to_vector<double>();
      }
    });
    EXPECT_EQ(results[0], results[1]);
    // The 1-D and small tensors come first in every case: exact averages.
    int64_t exact = 0;
    for (const Shape& s : c.shapes)
      if (s.size() == 1 || shape_numel(s) == 6) exact += shape_numel(s);
    for (int64_t i = 0; i < exact; ++i)
      EXPECT_NEAR(results[0][i], (inputs[0][i] + inputs[1][i]) / 2, 1e-14) << "element " << i;
  }
}

std::shared_ptr<nn::Sequential> two_layers() {
  manual_seed(11);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(32, 24), std::make_shared<nn::Linear>(24, 8)});
}

// Inside DDP (buckets rebuilt after the first iteration): plain gradients
// until start_powerSGD_iter, then rank-1 approximations of them, whose
// error the state keeps.
TEST(PowerSGD, InsideDistributedDataParallel) {
  const int steps = 5;
  auto group = std::make_shared<ddp::test::WorldOfOne>();
  auto model = two_layers(), plain = two_layers();
  DistributedDataParallel<nn::Sequential> ddp_model(model, group, {});
  auto state = std::make_shared<PowerSGDState>(PowerSGDOptions{.start_powerSGD_iter = 2});
  ddp_model.register_comm_hook(powersgd_hook(state));
  for (int s = 0; s < steps; ++s) {
    Generator gen{uint64_t(s)};
    Tensor x = randn({4, 32}, {}, &gen);
    for (auto& m : {model, plain})
      for (const Tensor& p : m->parameters())
        if (p.grad().defined()) Tensor(p.grad()).zero_();
    // A squared loss: the weight gradients have rank 4 (a plain sum gives
    // rank-1 gradients, which a rank-1 PowerSGD reproduces exactly).
    Tensor y = ddp_model(x), y_plain = plain->forward(x);
    sum(y * y).backward();
    sum(y_plain * y_plain).backward();
    Tensors got = model->parameters(), want = plain->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      const bool is_weight = got[i].dim() == 2;
      const bool exact = s < 2 || !is_weight;
      EXPECT_EQ(allclose(got[i].grad(), want[i].grad(), 1e-6, 1e-7), exact)
          << "step " << s << " parameter " << i;
    }
  }
  EXPECT_EQ(state->iteration(), steps);
  EXPECT_GT(state->compression_rate(), 2.0);  // the two weights are compressed
  bool some_error = false;
  for (int b = 0; b < int(ddp_model.reducer().num_buckets()); ++b)
    some_error = some_error || state->error(b).defined();
  EXPECT_TRUE(some_error);
}

TEST(PowerSGD, ABucketThatChangesItsLayoutRaises) {
  auto group = ddp::test::solo();
  CommHook hook = powersgd_hook({.start_powerSGD_iter = 2});
  for (int it = 0; it < 3; ++it) {
    GradBucket b = make_bucket({{8, 8}});
    reduce(hook, *group, b);
  }
  GradBucket other = make_bucket({{4, 16}});
  try {
    reduce(hook, *group, other);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("bucket 0 changed its layout"), std::string::npos) << e.what();
  }
}

// ---- Note [PowerSGD checkpoints] ----------------------------------------------

// Two buckets, compressed from iteration 2 with error feedback and warm
// start; gradients depend on the iteration only.
std::vector<double> powersgd_iteration(CommHook& hook, dist::ProcessGroup& group, int it) {
  std::vector<double> out;
  for (int index : {0, 1}) {
    const std::vector<Shape> shapes = index == 0 ? kShapes : std::vector<Shape>{{6, 9}, {9}};
    GradBucket b = make_bucket(shapes, index, index == 1);
    int64_t salt = 0;
    for (Tensor& g : b.gradients)
      g.copy_(Tensor::from_vector(gradient_values(g.numel(), 0, it * 10 + int(salt++)), g.shape(),
                                  TensorOptions(DType::f64)));
    reduce(hook, group, b);
    const auto v = b.buffer.to_vector<double>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// A run saved after 4 iterations and resumed in a new state continues bit
// for bit: error memory, warm-started Q, iteration and generator included.
TEST(PowerSGD, StateDictResumesBitForBit) {
  auto group = ddp::test::solo();
  const PowerSGDOptions o{
      .matrix_approximation_rank = 2, .start_powerSGD_iter = 2, .min_compression_rate = 1.0, .seed = 5};
  auto a = std::make_shared<PowerSGDState>(o);
  CommHook hook_a = powersgd_hook(a);
  std::vector<std::vector<double>> whole;
  TensorDict saved;
  for (int it = 0; it < 7; ++it) {
    if (it == 4) saved = a->state_dict();
    whole.push_back(powersgd_iteration(hook_a, *group, it));
  }
  EXPECT_EQ(saved.at("iteration").to_vector<int64_t>()[0], 4);
  ASSERT_TRUE(saved.contains("bucket.0.error"));
  ASSERT_TRUE(saved.contains("bucket.1.q"));

  auto b = std::make_shared<PowerSGDState>(o);
  b->load_state_dict(saved);
  EXPECT_EQ(b->iteration(), 4);
  CommHook hook_b = powersgd_hook(b);
  for (int it = 4; it < 7; ++it)
    EXPECT_EQ(powersgd_iteration(hook_b, *group, it), whole[size_t(it)]) << "iteration " << it;
  EXPECT_EQ(b->numel_before_compression(), a->numel_before_compression());
  // Without the state the resumed run differs (so the check above can fail).
  auto c = std::make_shared<PowerSGDState>(PowerSGDOptions{.matrix_approximation_rank = 2,
                                                           .start_powerSGD_iter = 0,
                                                           .min_compression_rate = 1.0,
                                                           .use_error_feedback = false,
                                                           .warm_start = false,
                                                           .seed = 5});
  CommHook hook_c = powersgd_hook(c);
  EXPECT_NE(powersgd_iteration(hook_c, *group, 4), whole[4]);
}

TEST(PowerSGD, BadStateDictsRaiseAndChangeNothing) {
  auto group = ddp::test::solo();
  const PowerSGDOptions o{
      .matrix_approximation_rank = 2, .start_powerSGD_iter = 2, .min_compression_rate = 1.0};
  auto a = std::make_shared<PowerSGDState>(o);
  CommHook hook = powersgd_hook(a);
  for (int it = 0; it < 3; ++it) powersgd_iteration(hook, *group, it);
  const TensorDict good = a->state_dict();
  auto expect_refused = [&](TensorDict bad, const std::string& words) {
    auto fresh = std::make_shared<PowerSGDState>(o);
    try {
      fresh->load_state_dict(bad);
      ADD_FAILURE() << "accepted; expected '" << words << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
    EXPECT_EQ(fresh->iteration(), 0);
    EXPECT_FALSE(fresh->q_memory(0).defined());
  };
  TensorDict other_rank = good;
  other_rank.set("matrix_approximation_rank", Tensor::from_vector(std::vector<int64_t>{4}, {1}));
  expect_refused(other_rank, "matrix_approximation_rank = 4");
  TensorDict extra = good;
  extra.insert("bucket.0.momentum", Tensor::zeros({3}));
  expect_refused(extra, "unexpected key 'bucket.0.momentum'");
  TensorDict no_iteration = good;
  no_iteration.erase("iteration");
  expect_refused(no_iteration, "'iteration'");
  TensorDict bad_shapes = good;
  bad_shapes.set("bucket.0.shapes", Tensor::from_vector(std::vector<int64_t>{3, 4}, {2}));
  expect_refused(bad_shapes, "malformed");
  TensorDict matrix_error = good;
  matrix_error.set("bucket.0.error", Tensor::zeros({2, 3}, DType::f64));
  expect_refused(matrix_error, "flat floating tensor");
  // An error memory of the wrong size loads, and is refused at its bucket's step.
  TensorDict short_error = good;
  short_error.set("bucket.0.error", Tensor::zeros({5}, DType::f64));
  auto d = std::make_shared<PowerSGDState>(o);
  d->load_state_dict(short_error);
  CommHook hook_d = powersgd_hook(d);
  EXPECT_THROW(powersgd_iteration(hook_d, *group, 3), ValueError);
}

TEST(PowerSGD, BadOptionsRaiseValueErrorNamingTheOption) {
  struct Case { PowerSGDOptions options; std::string name; };
  const std::vector<Case> cases = {
      {{.matrix_approximation_rank = 0}, "matrix_approximation_rank"},
      {{.matrix_approximation_rank = -3}, "matrix_approximation_rank"},
      {{.start_powerSGD_iter = -1, .use_error_feedback = false, .warm_start = false}, "start_powerSGD_iter"},
      {{.start_powerSGD_iter = 1}, "start_powerSGD_iter"},
      {{.start_powerSGD_iter = 0, .use_error_feedback = false}, "start_powerSGD_iter"},
      {{.min_compression_rate = 0.5}, "min_compression_rate"},
      {{.min_compression_rate = std::nan("")}, "min_compression_rate"},
      {{.orthogonalization_epsilon = -1e-8}, "orthogonalization_epsilon"},
  };
  for (const Case& c : cases) {
    try {
      powersgd_hook(c.options);
      ADD_FAILURE() << "no error for " << c.name;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("PowerSGDOptions." + c.name), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(powersgd_hook(std::shared_ptr<PowerSGDState>()), ValueError);
  // The plain-allreduce-only setting is allowed.
  EXPECT_NO_THROW(powersgd_hook({.start_powerSGD_iter = 0, .use_error_feedback = false, .warm_start = false}));
}
