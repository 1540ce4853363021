// ElasticGroup over a backend of the registry (Note [Elastic backends] in
// src/parallel/elastic.cpp). The test registers "fake_nccl": a gloo group
// over the store the registry's context gives, wrapped so that every
// creation and destruction is logged by the thread (the replica) that made
// it. Replicas are threads, as in elastic_test.cpp. Checked: the survivors
// of a loss heal; the factory runs once per generation per member, over
// that generation's keys; each member's old group is destroyed before its
// next one is created (abort and re-create, as nccl needs); training equals
// the gloo run bit for bit; a per-device spec routes; bad backends are
// refused before the store is touched.

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <regex>
#include <thread>

#include "ddp/config.h"
#include "ddp/dist/backend_registry.h"
#include "ddp/dist/prefix_store.h"
#include "parallel/elastic_replica.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace ddp::test::elastic;

namespace {

#if DDP_HAVE_GLOO

constexpr auto kTimeout = 10s;  // fast_options()'s

// ---- the fake backend ------------------------------------------------------------

// What the fake factory saw. Reset by each test.
struct FakeLog {
  std::mutex mu;
  int created = 0, destroyed = 0;
  std::map<int64_t, int> by_generation;        // creations per generation
  std::map<std::thread::id, int> live;         // groups alive per creating thread
  std::vector<std::string> problems;           // what must not happen
  void reset() {
    std::lock_guard<std::mutex> lk(mu);
    created = destroyed = 0;
    by_generation.clear();
    live.clear();
    problems.clear();
  }
};

FakeLog& fake_log() {
  static FakeLog log;
  return log;
}

// A gloo group that logs its destruction.
class FakeNccl : public dist::ProcessGroup {
 public:
  FakeNccl(std::shared_ptr<dist::ProcessGroup> inner, std::thread::id owner)
      : ProcessGroup(inner->rank(), inner->size()), inner_(std::move(inner)), owner_(owner) {}
  ~FakeNccl() override {
    inner_.reset();  // the connections close first, as a real backend's would
    FakeLog& log = fake_log();
    std::lock_guard<std::mutex> lk(log.mu);
    ++log.destroyed;
    --log.live[owner_];
  }
  std::string backend_name() const override { return "fake_nccl"; }
  dist::BackendCaps caps() const override { return inner_->caps(); }
  void set_timeout(std::chrono::milliseconds t) override {
    ProcessGroup::set_timeout(t);
    inner_->set_timeout(t);
  }

 protected:
  dist::WorkPtr do_allreduce(Tensors& ts, dist::ReduceOp op) override {
    return inner_->allreduce(ts, op);
  }
  dist::WorkPtr do_broadcast(Tensors& ts, int root) override { return inner_->broadcast(ts, root); }
  dist::WorkPtr do_reduce(Tensors& ts, int root, dist::ReduceOp op) override {
    return inner_->reduce(ts, root, op);
  }
  dist::WorkPtr do_allgather(Tensors& outs, const Tensor& in) override {
    return inner_->allgather(outs, in);
  }
  dist::WorkPtr do_reduce_scatter(const Tensor& out, Tensors& ins, dist::ReduceOp op) override {
    return inner_->reduce_scatter(out, ins, op);
  }
  dist::WorkPtr do_all_to_all(const Tensor& out, const Tensor& in) override {
    return inner_->all_to_all(out, in);
  }
  dist::WorkPtr do_barrier() override { return inner_->barrier(); }
  dist::WorkPtr do_send(const Tensor& t, int dst, int tag) override {
    return inner_->send(t, dst, tag);
  }
  dist::WorkPtr do_recv(const Tensor& t, int src, int tag) override {
    return inner_->recv(t, src, tag);
  }

 private:
  std::shared_ptr<dist::ProcessGroup> inner_;
  std::thread::id owner_;
};

std::shared_ptr<dist::ProcessGroup> make_fake(const dist::BackendContext& ctx) {
  FakeLog& log = fake_log();
  const auto me = std::this_thread::get_id();
  int64_t generation = -1;
  {
    std::lock_guard<std::mutex> lk(log.mu);
    // The generation's keys: "<key_prefix>g<N>/fake_nccl".
    auto* ps = dynamic_cast<dist::PrefixStore*>(ctx.store.get());
    std::smatch m;
    if (ps == nullptr)
      log.problems.push_back("the store is not a PrefixStore");
    else if (std::regex_search(ps->prefix(), m, std::regex("^ddp/elastic/g([0-9]+)/fake_nccl$")))
      generation = std::stoll(m[1].str());
    else
      log.problems.push_back("store prefix '" + ps->prefix() + "'");
    if (log.live[me] != 0)
      log.problems.push_back(fmt::format("generation {}: created while {} older group(s) of the "
                                         "same member were alive",
                                         generation, log.live[me]));
    if (ctx.async_error_handling != dist::AsyncErrorHandling::raise)
      log.problems.push_back("async_error_handling is not raise");
    if (ctx.timeout != kTimeout) log.problems.push_back("timeout not passed");
    if (!ctx.device.is_cpu()) log.problems.push_back("device " + ctx.device.str());
  }
  dist::GlooOptions go;
  go.group_name = "fake";
  go.timeout = ctx.timeout;
  go.roll_call_grace = 50ms;
  auto inner = dist::ProcessGroupGloo::create(ctx.store, ctx.rank, ctx.size, go);
  std::lock_guard<std::mutex> lk(log.mu);
  ++log.created;
  ++log.by_generation[generation];
  ++log.live[me];
  return std::make_shared<FakeNccl>(std::move(inner), me);
}

void register_fake_backend() {
  static const bool once = [] {
    dist::register_backend(dist::BackendInfo{
        .name = "fake_nccl",
        .devices = {DeviceType::CPU},
        .native_cuda = false,
        .preference = 1000,
        .unusable = [](const dist::BackendContext&) { return std::string(); },
        .create = make_fake,
    });
    return true;
  }();
  (void)once;
}

// ---- the tests ---------------------------------------------------------------------

struct LossRun {
  std::vector<std::vector<double>> params{3};
  std::vector<int64_t> heals = std::vector<int64_t>(3), generations = std::vector<int64_t>(3),
                       sizes = std::vector<int64_t>(3);
  std::vector<std::string> backend_names = std::vector<std::string>(3);
};

// Replica 2 dies before its forward of step 3 (Elastic.SurvivorsHealAndGoOnWithTheirAverage).
LossRun run_with_a_loss(const std::string& backend) {
  constexpr int kWorld = 3, kSteps = 6, kDiesAt = 3;
  Store store;
  LossRun out;
  auto errors = on_threads(kWorld, [&](int r) {
    auto rep = std::make_unique<Replica>(store.client(), r, kWorld, 21, fast_options(backend));
    while (rep->elastic->step() < kSteps) {
      if (r == 2 && rep->elastic->step() == kDiesAt) {
        rep.reset();  // closes its connections, as a killed process's close
        return;
      }
      rep->step();
    }
    out.params[size_t(r)] = rep->parameters();
    out.heals[size_t(r)] = rep->elastic->heals();
    out.generations[size_t(r)] = rep->elastic->generation();
    out.sizes[size_t(r)] = rep->elastic->size();
    out.backend_names[size_t(r)] = rep->elastic->group()->backend_name();
  });
  for (const auto& e : errors) EXPECT_EQ(e, "");
  return out;
}

TEST(ElasticBackend, ARegisteredBackendIsAbortedAndRecreatedAcrossALoss) {
  register_fake_backend();
  fake_log().reset();
  LossRun fake = run_with_a_loss("fake_nccl");
  {
    FakeLog& log = fake_log();
    std::lock_guard<std::mutex> lk(log.mu);
    EXPECT_TRUE(log.problems.empty()) << fmt::format("{}", fmt::join(log.problems, "\n"));
    // Once per generation per member: 3 founders, then 2 survivors.
    EXPECT_EQ(log.by_generation, (std::map<int64_t, int>{{0, 3}, {1, 2}}));
    EXPECT_EQ(log.created, 5);
    EXPECT_EQ(log.destroyed, log.created);  // nothing outlives its replica
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(fake.heals[size_t(r)], 1);
    EXPECT_EQ(fake.generations[size_t(r)], 1);
    EXPECT_EQ(fake.sizes[size_t(r)], 2);
    EXPECT_EQ(fake.backend_names[size_t(r)], "fake_nccl");
  }
  EXPECT_EQ(fake.params[0], fake.params[1]);
  ASSERT_FALSE(fake.params[0].empty());

  LossRun gloo = run_with_a_loss("gloo");
  EXPECT_EQ(gloo.backend_names[0], "gloo");
  EXPECT_EQ(gloo.heals[0], 1);
  EXPECT_EQ(fake.params[0], gloo.params[0]);  // bit for bit
}

// "cpu:fake_nccl" makes a routing group; a joiner enters through it and
// receives the state; the healthy generation's groups are closed before the
// next ones are made.
TEST(ElasticBackend, APerDeviceSpecRoutesAndAJoinerReceivesTheState) {
  register_fake_backend();
  fake_log().reset();
  constexpr int kSteps = 8;
  Store store;
  std::vector<std::vector<double>> params(3), momentum(3);
  std::vector<std::string> names(3);
  std::vector<int64_t> joined_at(3, -1), sizes(3);
  std::atomic<int> founders_at_step2{0};
  const ElasticOptions o = fast_options("cpu:fake_nccl");
  auto errors = on_threads(3, [&](int i) {
    std::unique_ptr<Replica> rep;
    if (i < 2) {
      auto probe = store.client();
      rep = std::make_unique<Replica>(store.client(), i, 2, 31, o);
      while (rep->elastic->step() < kSteps) {
        if (rep->elastic->step() == 2) ++founders_at_step2;
        // As in Elastic.AJoinerReceivesTheStateFromAPeer: admitted at step 4.
        if (rep->elastic->step() == 4)
          while (!probe->check({"ddp/elastic/join/0"})) std::this_thread::sleep_for(1ms);
        rep->step();
      }
    } else {
      while (founders_at_step2 < 2) std::this_thread::sleep_for(1ms);
      rep = std::make_unique<Replica>(store.client(), 9, 2, /*seed*/ 999, o);
      joined_at[2] = rep->elastic->step();
      while (rep->elastic->step() < kSteps) rep->step();
    }
    params[size_t(i)] = rep->parameters();
    momentum[size_t(i)] = rep->momentum();
    sizes[size_t(i)] = rep->elastic->size();
    names[size_t(i)] = rep->elastic->group()->backend_name();
  });
  for (const auto& e : errors) ASSERT_EQ(e, "");
  EXPECT_GE(joined_at[2], 3);
  EXPECT_LE(joined_at[2], 5);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sizes[size_t(i)], 3);
    EXPECT_EQ(names[size_t(i)], "cpu:fake_nccl");
  }
  EXPECT_EQ(params[0], params[1]);
  EXPECT_EQ(params[0], params[2]);
  EXPECT_EQ(momentum[0], momentum[2]);
  FakeLog& log = fake_log();
  std::lock_guard<std::mutex> lk(log.mu);
  EXPECT_TRUE(log.problems.empty()) << fmt::format("{}", fmt::join(log.problems, "\n"));
  EXPECT_EQ(log.by_generation, (std::map<int64_t, int>{{0, 2}, {1, 3}}));
  EXPECT_EQ(log.destroyed, log.created);
}

// Refused in the constructor, before the store is touched.
TEST(ElasticBackend, BadBackendsAreNamedAndChangeNothing) {
  register_fake_backend();
  Store store;
  io::Checkpoint state(false);
  auto refusal = [&](const std::string& backend) -> std::string {
    try {
      ElasticGroup g(store.client(), 0, 1, state, fast_options(backend));
    } catch (const ValueError& e) {
      return e.what();
    }
    return "accepted";
  };
  auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  std::string e = refusal("no_such_backend");
  EXPECT_TRUE(has(e, "no backend 'no_such_backend'")) << e;
  EXPECT_TRUE(has(e, "gloo") && has(e, "fake_nccl")) << e;  // the registered ones
  for (const std::string spec : {"mpi", "cpu:mpi", "cpu:gloo,cuda:mpi"}) {
    e = refusal(spec);
    EXPECT_TRUE(has(e, "MPI_COMM_WORLD") && has(e, "ULFM") && has(e, "\"gloo\"")) << e;
  }
  EXPECT_TRUE(has(refusal("cpu:gloo,cpu:fake_nccl"), "named twice"));
  EXPECT_TRUE(has(refusal("gpu:gloo"), "unknown device type 'gpu'"));
  EXPECT_TRUE(has(refusal("cpu:"), "not DEVICE:BACKEND"));
  EXPECT_TRUE(has(refusal("cuda:fake_nccl"), "does not take cuda tensors"));
  EXPECT_TRUE(has(refusal("cuda:gloo"), "no backend for cpu tensors")) << refusal("cuda:gloo");
  if (dist::find_backend("nccl")) {  // a CUDA build, on a CPU device
    e = refusal("cpu:gloo,cuda:nccl");
    EXPECT_TRUE(has(e, "nccl backend cannot run here") && has(e, "CUDA device")) << e;
  }
  EXPECT_EQ(store.client()->num_keys(), 0);  // nothing was written
  // A good spec after all that: a world of one.
  EXPECT_EQ(refusal("cpu:fake_nccl"), "accepted");
}

#endif  // DDP_HAVE_GLOO

}  // namespace
