// More than one gloo collective in flight (GlooOptions::threads, Note [Gloo
// collectives in flight] in src/dist/process_group_gloo.cpp): ranks as
// threads in one process, many collectives issued before any is waited.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <vector>

#include "ddp/config.h"
#include "ddp/dist/flight_recorder.h"
#include "store_test_util.h"
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace ddp::dist;
using namespace ddp::dist::test;

namespace {

#if DDP_HAVE_GLOO

constexpr std::chrono::milliseconds kWait{60'000};

// Stores for `world` ranks: rank 0's hosts the server.
std::vector<std::shared_ptr<Store>> stores(int world) {
  auto server = std::make_shared<TCPStore>(server_options(std::chrono::seconds(30)));
  std::vector<std::shared_ptr<Store>> out{server};
  for (int r = 1; r < world; ++r)
    out.push_back(
        std::make_shared<TCPStore>(client_options(server->port(), std::chrono::seconds(30))));
  return out;
}

// Non-integer data, so that a different order of additions would show.
Tensor data_of(int rank, int64_t n, int k, DType dtype) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 0.1 * double(rank + 1) + 1e-3 * double(i % 97) + 0.37 * k;
  return Tensor::from_vector(v, {n}).to(dtype);
}

// world equal views of t, back to back.
Tensors pieces(const Tensor& t, int world) {
  const int64_t n = t.numel() / world;
  Tensors out;
  for (int r = 0; r < world; ++r) out.push_back(t.narrow(0, r * n, n));
  return out;
}

// Every collective's result on this rank, as bytes, in issue order.
using Results = std::vector<std::vector<std::byte>>;

std::vector<std::byte> bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<std::byte> b(c.nbytes());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

// Issues 24 collectives of different sizes and kinds without waiting, then
// waits them all in reverse order.
Results run_many(std::shared_ptr<Store> store, int rank, int world, int threads) {
  GlooOptions o;
  o.threads = threads;
  auto pg = ProcessGroupGloo::create(store, rank, world, o);
  const std::vector<int64_t> sizes = {1, 7, 1000, 300'000, 3, 600'000, 65'536, 12};
  Tensors outs;
  std::vector<WorkPtr> works;
  int k = 0;
  for (int64_t n : sizes) {
    const DType dt = k % 3 == 1 ? DType::f64 : DType::f32;
    Tensor a = data_of(rank, n, k++, dt);
    works.push_back(pg->allreduce({a}));
    outs.push_back(a);
    Tensor h = data_of(rank, n, k++, DType::f16);  // reduced in f32 on the wire
    works.push_back(pg->allreduce({h}, ReduceOp::avg));
    outs.push_back(h);
    Tensor gathered = Tensor::zeros({n * world});
    works.push_back(pg->allgather(pieces(gathered, world), data_of(rank, n, k++, DType::f32)));
    outs.push_back(gathered);
  }
  Tensor rs_in = data_of(rank, 3 * 400'000 * world, k++, DType::f32);  // > 1 MiB pieces
  Tensor rs = Tensor::zeros({3 * 400'000});
  works.push_back(pg->reduce_scatter(rs, pieces(rs_in, world)));
  outs.push_back(rs);
  Tensor b = data_of(rank, 5000, k++, DType::f64);
  works.push_back(pg->broadcast({b}, world - 1));
  outs.push_back(b);
  Tensor big = data_of(rank, 2'000'000, k++, DType::f32);
  works.push_back(pg->allreduce({big}));
  outs.push_back(big);
  // The barrier completes only after everything issued before it.
  WorkPtr barrier = pg->barrier();
  barrier->wait(kWait);
  for (const WorkPtr& w : works) EXPECT_TRUE(w->is_completed()) << w->op() << " after barrier";
  for (size_t i = works.size(); i-- > 0;) works[i]->wait(kWait);
  Results r;
  for (const Tensor& t : outs) r.push_back(bytes_of(t));
  return r;
}

std::vector<Results> run_world(int world, int threads) {
  auto ss = stores(world);
  std::vector<std::future<Results>> fs;
  for (int r = 0; r < world; ++r)
    fs.push_back(std::async(std::launch::async, run_many, ss[size_t(r)], r, world, threads));
  std::vector<Results> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

TEST(GlooConcurrency, ManyCollectivesInFlightEqualSequentialOnes) {
  for (int world : {2, 3}) {
    const auto sequential = run_world(world, 1);
    for (int threads : {2, 4}) {
      const auto concurrent = run_world(world, threads);
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(concurrent[size_t(r)].size(), sequential[size_t(r)].size());
        for (size_t i = 0; i < concurrent[size_t(r)].size(); ++i)
          EXPECT_TRUE(concurrent[size_t(r)][i] == sequential[size_t(r)][i])
              << "world " << world << ", threads " << threads << ", rank " << r
              << ", collective " << i;
      }
    }
  }
}

// The environment variable picks K when the option is 0.
TEST(GlooConcurrency, EnvironmentVariableSetsTheThreads) {
  EnvGuard guard("DDP_GLOO_THREADS");
  ::setenv("DDP_GLOO_THREADS", "3", 1);
  const auto concurrent = run_world(2, 0);
  ::unsetenv("DDP_GLOO_THREADS");
  const auto sequential = run_world(2, 1);
  EXPECT_TRUE(concurrent == sequential);
}

// Rank 1 issues only the first two of three allreduces: with all three in
// flight on rank 0, the first two complete there and the third times out,
// named by its number.
TEST(GlooConcurrency, ATimeoutInOneOfSeveralInFlightIsReported) {
  auto ss = stores(2);
  std::promise<void> rank0_done;
  auto rank1 = std::async(std::launch::async, [&] {
    GlooOptions o;
    o.threads = 4;
    o.timeout = std::chrono::milliseconds(1500);
    o.roll_call_grace = std::chrono::milliseconds(300);
    auto pg = ProcessGroupGloo::create(ss[1], 1, 2, o);
    Tensor a = Tensor::full({100'000}, 1.0), b = Tensor::full({10}, 2.0);
    auto wa = pg->allreduce({a});
    auto wb = pg->allreduce({b});
    wa->wait(kWait);
    wb->wait(kWait);
    rank0_done.get_future().wait();  // stays alive, outside any collective
    return a.to_vector<float>()[0] + b.to_vector<float>()[0];
  });
  GlooOptions o;
  o.threads = 4;
  o.timeout = std::chrono::milliseconds(1500);
  o.roll_call_grace = std::chrono::milliseconds(300);
  auto pg = ProcessGroupGloo::create(ss[0], 0, 2, o);
  Tensor a = Tensor::full({100'000}, 10.0), b = Tensor::full({10}, 20.0), c = Tensor::full({10}, 5.0);
  auto wa = pg->allreduce({a});
  auto wb = pg->allreduce({b});
  auto wc = pg->allreduce({c});
  const auto start = std::chrono::steady_clock::now();
  wa->wait(kWait);
  wb->wait(kWait);
  EXPECT_EQ(a.to_vector<float>()[0], 11.0f);
  EXPECT_EQ(b.to_vector<float>()[0], 22.0f);
  std::string what;
  try {
    wc->wait(kWait);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_LT(ms_since(start), 1500 + 300 + kSlackMs + 3000);
  EXPECT_NE(what.find("allreduce #3 (gloo rank 0 of 2)"), std::string::npos) << what;
  // The group is broken: a later call raises the same error.
  Tensor d = Tensor::full({4}, 1.0);
  EXPECT_THROW(pg->allreduce({d})->wait(kWait), Error);
  rank0_done.set_value();
  EXPECT_EQ(rank1.get(), 33.0f);
}

TEST(GlooConcurrency, BadThreadCountsRaiseValueError) {
  auto server = std::make_shared<TCPStore>(server_options(std::chrono::seconds(5)));
  for (int bad : {-1, 65, 1000}) {
    GlooOptions o;
    o.threads = bad;
    try {
      ProcessGroupGloo::create(server, 0, 1, o);
      ADD_FAILURE() << "threads = " << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("GlooOptions.threads"), std::string::npos) << e.what();
    }
  }
  EnvGuard guard("DDP_GLOO_THREADS");
  for (const char* bad : {"0", "-2", "65", "two"}) {
    ::setenv("DDP_GLOO_THREADS", bad, 1);
    try {
      ProcessGroupGloo::create(server, 0, 1);
      ADD_FAILURE() << "DDP_GLOO_THREADS=" << bad << " accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("DDP_GLOO_THREADS"), std::string::npos) << e.what();
    }
  }
  ::setenv("DDP_GLOO_THREADS", "2", 1);
  EXPECT_NO_THROW(ProcessGroupGloo::create(server, 0, 1));
}

#else
TEST(GlooConcurrency, Skipped) { GTEST_SKIP() << "built without gloo"; }
#endif

}  // namespace
