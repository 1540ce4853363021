// The nccl backend at world size 1 (what a one-GPU machine can run), with a
// TCPStore on 127.0.0.1 port 0: every collective and dtype, odd sizes, the
// buffer layouts the backend treats apart (chunks of one tensor, separate
// tensors, in place, overlapping), stream ordering, the watchdog's timeout,
// shutdown with work in flight, and bad input. Every test needs a GPU and
// skips without one. With one rank every reduction is the identity, so the
// expected values are the inputs. Multi-rank runs need one GPU per rank (NCCL
// refuses two ranks on one GPU).
#include "ddp/config.h"

#if DDP_HAVE_NCCL

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddp/core/error.h"
#include "ddp/dist/process_group_nccl.h"
#include "ddp/dist/tcp_store.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/tensor.h"
#include "dist/store_test_util.h"

namespace ddp::dist {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

#define REQUIRE_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << cuda::unavailable_reason()

const Device kGpu = Device::cuda(0);
const std::vector<DType> kDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                    DType::i32, DType::i64, DType::u8};
const std::vector<int64_t> kSizes = {0, 1, (int64_t(1) << 20) + 3};
const std::vector<ReduceOp> kOps = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max,
                                    ReduceOp::product};

// Values every dtype holds exactly (u8 non-negative), varied along the tensor.
std::vector<double> pattern(int64_t n, DType d, int salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[size_t(i)] = d == DType::u8 ? double((i + salt) % 251) : double((i + salt) % 101 - 50);
  return v;
}
Tensor on_gpu(const std::vector<double>& v, DType d) {
  return Tensor::from_vector(v, {int64_t(v.size())}, TensorOptions(d).device(kGpu));
}
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }
// "" when equal, else how many elements differ and the first few (index: got
// vs want), so a failure on a 2^20-element tensor says where.
std::string mismatch(const std::vector<double>& got, const std::vector<double>& want) {
  if (got.size() != want.size())
    return "sizes " + std::to_string(got.size()) + " vs " + std::to_string(want.size());
  std::string s;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ < 4)
      s += " [" + std::to_string(i) + "]: " + std::to_string(got[i]) + " vs " + std::to_string(want[i]);
  return bad ? std::to_string(bad) + " of " + std::to_string(got.size()) + " differ:" + s : "";
}

// Holds a stream back until release() (or 30 s, so a failing test cannot
// hang CI): a host function that waits for a flag. cudaLaunchHostFunc comes
// from the libcudart that libddp loaded; the tests do not link CUDA.
class StreamGate {
 public:
  explicit StreamGate(const cuda::Stream& s) : state_(std::make_shared<State>()) {
    using LaunchHostFunc = int (*)(void* stream, void (*fn)(void*), void* data);
    auto launch = reinterpret_cast<LaunchHostFunc>(dlsym(RTLD_DEFAULT, "cudaLaunchHostFunc"));
    if (!launch) throw std::runtime_error("cudaLaunchHostFunc not found in the process");
    auto* arg = new std::shared_ptr<State>(state_);
    if (launch(s.handle(), &StreamGate::hold, arg) != 0) {
      delete arg;
      throw std::runtime_error("cudaLaunchHostFunc failed");
    }
  }
  ~StreamGate() { release(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void release() { state_->open.store(true); }

 private:
  struct State {
    std::atomic<bool> open{false};
  };
  static void hold(void* arg) {
    std::unique_ptr<std::shared_ptr<State>> state(static_cast<std::shared_ptr<State>*>(arg));
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (!(*state)->open.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(1ms);
  }
  std::shared_ptr<State> state_;
};

// Polls until the Work completes (the watchdog completes it), up to limit.
bool completes_within(const WorkPtr& w, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!w->is_completed()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// One finished collective, so that NCCL's lazy set-up is done before a test
// holds a stream back.
void warm_up(ProcessGroup& pg) { pg.barrier()->wait(); }

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    store_ = std::make_unique<TCPStore>(test::server_options(10s));
    pg_ = ProcessGroupNCCL::create(*store_, 0, 1, options());
  }
  void TearDown() override {
    pg_.reset();
    store_.reset();
  }
  virtual ProcessGroupNCCLOptions options() const {
    ProcessGroupNCCLOptions o;
    o.device = 0;
    return o;
  }
  std::unique_ptr<TCPStore> store_;
  std::shared_ptr<ProcessGroupNCCL> pg_;
};

TEST_F(NcclTest, Basics) {
  EXPECT_EQ(pg_->backend_name(), "nccl");
  EXPECT_EQ(pg_->rank(), 0);
  EXPECT_EQ(pg_->size(), 1);
  EXPECT_EQ(pg_->device(), 0);
  EXPECT_FALSE(pg_->is_aborted());
  EXPECT_TRUE(pg_->caps().cuda_tensors);
  EXPECT_FALSE(pg_->caps().cpu_tensors);
  EXPECT_EQ(pg_->timeout(), ProcessGroupNCCL::default_timeout());
}

TEST_F(NcclTest, AllreduceEveryDTypeOpAndSize) {
  for (DType d : kDTypes)
    for (ReduceOp op : kOps)
      for (int64_t n : kSizes) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(d) << " " << reduce_op_name(op) << " " << n);
        if (op == ReduceOp::avg && !is_floating(d)) {
          EXPECT_THROW(pg_->allreduce({on_gpu(pattern(n, d), d)}, op), DTypeError);
          continue;
        }
        std::vector<double> in = pattern(n, d);
        Tensor t = on_gpu(in, d);
        WorkPtr w = pg_->allreduce({t}, op);
        w->wait();
        EXPECT_EQ(values(t), in);
        ASSERT_EQ(w->result().size(), 1u);
        EXPECT_TRUE(w->result()[0].is_same(t));
      }
}

TEST_F(NcclTest, AllreduceCoalescesSeveralTensors) {
  // Mixed dtypes and sizes (an empty one among them) in one call.
  std::vector<std::vector<double>> in;
  Tensors ts;
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    in.push_back(pattern(int64_t(i * 1000 + (i == 3 ? 0 : 7)), kDTypes[i], int(i)));
    ts.push_back(on_gpu(in.back(), kDTypes[i]));
  }
  pg_->allreduce(ts, ReduceOp::max)->wait();
  for (size_t i = 0; i < ts.size(); ++i) EXPECT_EQ(values(ts[i]), in[i]) << i;

  // Many views of one flat buffer, as DDP's buckets look.
  std::vector<double> flat_in = pattern(64 * 1001, DType::f32);
  Tensor flat = on_gpu(flat_in, DType::f32);
  Tensors chunks;
  for (int i = 0; i < 64; ++i) chunks.push_back(flat.narrow(0, i * 1001, 1001));
  pg_->allreduce(chunks, ReduceOp::avg)->wait();
  EXPECT_EQ(values(flat), flat_in);
}

TEST_F(NcclTest, BroadcastAndReduce) {
  for (DType d : kDTypes)
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(d) << " " << n);
      std::vector<double> a = pattern(n, d), b = pattern(n + 5, d, 3);
      Tensor ta = on_gpu(a, d), tb = on_gpu(b, d);
      pg_->broadcast({ta, tb}, 0)->wait();
      EXPECT_EQ(values(ta), a);
      EXPECT_EQ(values(tb), b);
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::avg && !is_floating(d)) continue;
        pg_->reduce({ta, tb}, 0, op)->wait();
        EXPECT_EQ(values(ta), a);
        EXPECT_EQ(values(tb), b);
      }
    }
}

TEST_F(NcclTest, AllgatherLayouts) {
  for (DType d : kDTypes)
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(d) << " " << n);
      std::vector<double> in = pattern(n, d, 1);
      Tensor input = on_gpu(in, d);
      // A separate output tensor.
      Tensors outs = {Tensor::zeros({n}, TensorOptions(d).device(kGpu))};
      WorkPtr w = pg_->allgather(outs, input);
      w->wait();
      EXPECT_EQ(values(outs[0]), in);
      ASSERT_EQ(w->result().size(), 1u);
      EXPECT_TRUE(w->result()[0].is_same(outs[0]));
      // In place: the input is the rank's own slot.
      Tensor same = on_gpu(in, d);
      pg_->allgather({same}, same)->wait();
      EXPECT_EQ(values(same), in);
    }
  // The input overlaps the output off its slot: gathered through a copy.
  std::vector<double> buf = pattern(1001, DType::f32);
  Tensor b = on_gpu(buf, DType::f32);
  pg_->allgather({b.narrow(0, 0, 1000)}, b.narrow(0, 1, 1000))->wait();
  std::vector<double> want(buf.begin() + 1, buf.end());
  want.push_back(buf.back());
  EXPECT_EQ(values(b), want);
}

TEST_F(NcclTest, ReduceScatterLayouts) {
  for (DType d : kDTypes)
    for (ReduceOp op : kOps)
      for (int64_t n : kSizes) {
        if (op == ReduceOp::avg && !is_floating(d)) continue;
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(d) << " " << reduce_op_name(op) << " " << n);
        std::vector<double> in = pattern(n, d, 2);
        Tensor input = on_gpu(in, d);
        Tensor out = Tensor::zeros({n}, TensorOptions(d).device(kGpu));
        WorkPtr w = pg_->reduce_scatter(out, {input}, op);
        w->wait();
        EXPECT_EQ(mismatch(values(out), in), "");
        EXPECT_EQ(values(input), in);
        ASSERT_EQ(w->result().size(), 1u);
        EXPECT_TRUE(w->result()[0].is_same(out));
      }
  // In place, and overlapping off the slot (packed through a copy).
  std::vector<double> buf = pattern(1001, DType::f64);
  Tensor b = on_gpu(buf, DType::f64);
  pg_->reduce_scatter(b.narrow(0, 0, 1000), {b.narrow(0, 0, 1000)})->wait();
  EXPECT_EQ(values(b), buf);
  pg_->reduce_scatter(b.narrow(0, 1, 1000), {b.narrow(0, 0, 1000)})->wait();
  std::vector<double> want(buf.begin(), buf.begin() + 1);
  want.insert(want.end(), buf.begin(), buf.end() - 1);
  EXPECT_EQ(values(b), want);
}

TEST_F(NcclTest, AllToAll) {
  for (DType d : kDTypes)
    for (int64_t n : kSizes) {
      SCOPED_TRACE(::testing::Message() << dtype_name(d) << " " << n);
      std::vector<double> in = pattern(n, d, 4);
      Tensor input = on_gpu(in, d);
      Tensor out = Tensor::zeros({n}, TensorOptions(d).device(kGpu));
      pg_->all_to_all(out, input)->wait();
      EXPECT_EQ(values(out), in);
      pg_->all_to_all(input, input)->wait();  // in place
      EXPECT_EQ(values(input), in);
    }
  // Two dimensions: chunks are along dim 0.
  std::vector<double> in = pattern(6 * 7, DType::f32);
  Tensor a = Tensor::from_vector(in, {6, 7}, TensorOptions(DType::f32).device(kGpu));
  Tensor b = Tensor::zeros({6, 7}, TensorOptions(DType::f32).device(kGpu));
  pg_->all_to_all(b, a)->wait();
  EXPECT_EQ(values(b), in);
}

TEST_F(NcclTest, BarrierBlocksUntilDone) {
  for (int i = 0; i < 3; ++i) {
    WorkPtr w = pg_->barrier();
    w->wait();
    EXPECT_TRUE(w->is_completed());  // a barrier's wait blocks the host
    EXPECT_TRUE(w->is_success());
  }
}

TEST_F(NcclTest, WorkCompletesWithoutWait) {
  Tensor t = on_gpu(pattern(1000, DType::f32), DType::f32);
  WorkPtr w = pg_->allreduce({t});
  EXPECT_TRUE(completes_within(w, 20s));  // the watchdog completes it
  EXPECT_TRUE(w->is_success());
  EXPECT_NO_THROW(w->wait());
}

// Note [NCCL stream ordering]: the collective runs after the kernels already
// queued on the caller's current stream, and kernels queued after wait() see
// its result, with no host synchronisation in between.
TEST_F(NcclTest, OrdersAgainstTheCurrentStream) {
  warm_up(*pg_);
  cuda::Stream s = cuda::Stream::create(0);
  {
    cuda::StreamGuard on_s(s);
    Tensor input = Tensor::zeros({1 << 16}, TensorOptions(DType::f32).device(kGpu));
    Tensor out = Tensor::zeros({1 << 16}, TensorOptions(DType::f32).device(kGpu));
    s.synchronize();
    WorkPtr w;
    {
      StreamGate gate(s);  // everything queued on s from here waits
      input.fill_(7.0);    // the kernel that produces the input, held back
      w = pg_->allgather({out}, input);
      std::this_thread::sleep_for(200ms);
      // Had the collective not waited for s, it would have gathered zeros by now.
      EXPECT_FALSE(w->is_completed());
    }  // opens the gate
    w->wait();
    out.add_(Tensor::ones({1 << 16}, TensorOptions(DType::f32).device(kGpu)));  // after wait: 8
    EXPECT_EQ(values(out), std::vector<double>(1 << 16, 8.0));
    EXPECT_TRUE(completes_within(w, 20s));
  }
  s.synchronize();
  s.destroy();
}

TEST_F(NcclTest, SecondGroupOnTheSameStore) {
  auto pg2 = ProcessGroupNCCL::create(*store_, 0, 1, options());
  Tensor t = on_gpu(pattern(100, DType::i64), DType::i64);
  pg2->allreduce({t})->wait();
  pg_->allreduce({t})->wait();
  EXPECT_EQ(values(t), pattern(100, DType::i64));
}

TEST_F(NcclTest, DestroyWithWorkInFlight) {
  warm_up(*pg_);
  cuda::Stream s = cuda::Stream::create(0);
  WorkPtr w;
  Tensor t = on_gpu(pattern(5000, DType::f32), DType::f32);
  {
    cuda::StreamGuard on_s(s);
    StreamGate gate(s);
    w = pg_->allreduce({t});
    std::thread opener([&gate] {
      std::this_thread::sleep_for(300ms);
      gate.release();
    });
    pg_.reset();  // waits for the allreduce, then frees the communicator
    opener.join();
  }
  EXPECT_TRUE(w->is_completed());
  EXPECT_NO_THROW(w->wait());
  EXPECT_EQ(values(t), pattern(5000, DType::f32));
  s.synchronize();
  s.destroy();
}

TEST_F(NcclTest, BadInputNamesTheOp) {
  Tensor cpu = Tensor::ones({4});
  Tensor gpu = Tensor::ones({4}, TensorOptions(DType::f32).device(kGpu));
  auto expect_device_error = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << op << ": no error";
    } catch (const DeviceError& e) {
      EXPECT_THAT(e.what(), HasSubstr(op));
      EXPECT_THAT(e.what(), HasSubstr("nccl rank 0"));
      EXPECT_THAT(e.what(), HasSubstr("needs CUDA tensors"));
    }
  };
  expect_device_error([&] { pg_->allreduce({cpu}); }, "allreduce");
  expect_device_error([&] { pg_->allreduce({gpu, cpu}); }, "allreduce");
  expect_device_error([&] { pg_->broadcast({cpu}); }, "broadcast");
  expect_device_error([&] { pg_->reduce({cpu}); }, "reduce");
  expect_device_error([&] { pg_->allgather({gpu}, cpu); }, "allgather");
  expect_device_error([&] { pg_->reduce_scatter(cpu, {gpu}); }, "reduce_scatter");
  expect_device_error([&] { pg_->all_to_all(gpu, cpu); }, "all_to_all");
  EXPECT_THROW(pg_->allreduce({Tensor::ones({4}, TensorOptions(DType::bool_).device(kGpu))}),
               DTypeError);
  EXPECT_THROW(pg_->send(gpu, 0), ValueError);  // to itself
  EXPECT_THROW(pg_->recv(gpu, 0), ValueError);
  EXPECT_THROW(pg_->send(gpu, 1), IndexError);
  EXPECT_THROW(pg_->allgather({gpu, gpu}, gpu), ShapeError);
  EXPECT_THROW(
      pg_->allreduce({Tensor::ones({4, 8}, TensorOptions(DType::f32).device(kGpu)).slice(1, 0, 8, 2)}),
      ValueError);  // not dense (Note [Dense tensors in collectives])
  // None of it reached NCCL: the group still works.
  EXPECT_FALSE(pg_->is_aborted());
  pg_->allreduce({gpu})->wait();
  EXPECT_EQ(values(gpu), std::vector<double>(4, 1.0));
}

// Note [NCCL out of memory]: running out of device memory for a temporary
// (here the copy an in-place all_to_all sends from) raises OutOfMemoryError
// and leaves the communicator usable. The GPU is filled with 256 MiB blocks
// until it is full, two are freed, and the victim takes 384 MiB of those 512:
// the 384 MiB temporary no longer fits.
TEST_F(NcclTest, OutOfMemoryWhileQueueingKeepsTheGroup) {
  warm_up(*pg_);
  const int64_t block = int64_t(256) << 20;
  std::vector<Tensor> hold;
  try {
    for (int i = 0; i < 4096; ++i)
      hold.push_back(Tensor::empty({block}, TensorOptions(DType::u8).device(kGpu)));
  } catch (const OutOfMemoryError&) {
  }
  ASSERT_GE(hold.size(), 2u) << "too little GPU memory for the test";
  hold.pop_back();
  hold.pop_back();
  Tensor victim = Tensor::zeros({int64_t(384) << 20}, TensorOptions(DType::u8).device(kGpu));
  EXPECT_THROW(pg_->all_to_all(victim, victim), OutOfMemoryError);
  EXPECT_FALSE(pg_->is_aborted());
  hold.clear();
  victim = Tensor();
  Tensor ones = on_gpu(std::vector<double>(4, 1.0), DType::f32);
  pg_->allreduce({ones})->wait();
  EXPECT_EQ(values(ones), std::vector<double>(4, 1.0));  // the group still works
}

// Note [NCCL watchdog]: an operation that outlives the timeout fails with
// TimeoutError naming it, the rank and the time, together with everything
// else outstanding, and the group refuses further work. The collective is
// held back by a gated stream, which cannot hang: the gate opens by itself.
TEST_F(NcclTest, TimeoutAbortsTheGroup) {
  warm_up(*pg_);  // barrier #0
  pg_->set_timeout(300ms);
  cuda::Stream s = cuda::Stream::create(0);
  {
    cuda::StreamGuard on_s(s);
    Tensor t = Tensor::ones({1024}, TensorOptions(DType::f32).device(kGpu));
    s.synchronize();
    StreamGate gate(s);
    auto start = std::chrono::steady_clock::now();
    WorkPtr first = pg_->allreduce({t});
    WorkPtr second = pg_->broadcast({t});
    ASSERT_TRUE(completes_within(first, 20s));
    ASSERT_TRUE(completes_within(second, 20s));
    EXPECT_GE(test::ms_since(start), 300);
    try {
      first->wait();
      FAIL() << "no error";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(e.what(), HasSubstr("allreduce #1 (nccl rank 0/1)"));
      EXPECT_THAT(e.what(), HasSubstr("timed out after"));
      EXPECT_THAT(e.what(), HasSubstr("timeout 0.3 s"));
      EXPECT_THAT(e.what(), HasSubstr("aborted"));
    }
    try {
      second->wait();
      FAIL() << "no error";
    } catch (const TimeoutError& e) {
      EXPECT_THAT(e.what(), HasSubstr("broadcast #2 (nccl rank 0/1): aborted after"));
    }
    EXPECT_TRUE(pg_->is_aborted());
    try {
      pg_->allreduce({t});
      FAIL() << "no error";
    } catch (const NcclError& e) {
      EXPECT_THAT(e.what(), HasSubstr("allreduce (nccl rank 0/1): the process group was aborted"));
    }
    gate.release();
  }
  pg_.reset();  // the communicator is gone already: nothing to wait for
  s.synchronize();
  s.destroy();
}

// Note [NCCL checks before side effects]: a collective on an aborted group
// raises before it marks its tensors for the communication stream. The group
// is aborted as in TimeoutAbortsTheGroup, and its communication stream stays
// held back behind the gate meanwhile, so an event recorded there when a
// marked tensor is freed could not pass: the caching allocator would keep the
// block out of its cache. Unmarked, the block is back in the cache at once
// and the next request of its size and stream gets it again, without a
// cudaMalloc (as tests/tensor/cuda_allocator_gpu_test.cpp shows for
// record_stream itself). Every collective that takes tensors is tried, each
// on views of one 24 MiB block: a large-pool segment of exactly that size,
// which is never split or merged.
TEST_F(NcclTest, RefusedCollectiveLeavesNoMarks) {
  warm_up(*pg_);
  pg_->set_timeout(300ms);
  cuda::Stream s = cuda::Stream::create(0);
  {
    cuda::StreamGuard on_s(s);
    const int64_t n = int64_t(6) << 20;  // f32: 24 MiB
    const TensorOptions f32 = TensorOptions(DType::f32).device(kGpu);
    cuda::empty_cache();  // no stale blocks: the block below is the only large one of s
    const void* block = Tensor::empty({n}, f32).data_ptr();  // freed at once, cached for s
    Tensor t = Tensor::ones({1024}, f32);
    s.synchronize();
    StreamGate gate(s);
    WorkPtr held = pg_->allreduce({t});
    ASSERT_TRUE(completes_within(held, 20s));
    EXPECT_THROW(held->wait(), TimeoutError);
    ASSERT_TRUE(pg_->is_aborted());

    const uint64_t mallocs = cuda::memory_stats(0).num_cuda_mallocs;
    const std::vector<std::pair<std::string, std::function<void(const Tensor&)>>> calls = {
        {"allreduce", [&](const Tensor& x) { pg_->allreduce({x}); }},
        {"broadcast", [&](const Tensor& x) { pg_->broadcast({x}); }},
        {"reduce", [&](const Tensor& x) { pg_->reduce({x}); }},
        {"allgather",
         [&](const Tensor& x) {
           pg_->allgather({x.narrow(0, 0, n / 2)}, x.narrow(0, n / 2, n / 2));
         }},
        {"reduce_scatter",
         [&](const Tensor& x) {
           pg_->reduce_scatter(x.narrow(0, 0, n / 2), {x.narrow(0, n / 2, n / 2)});
         }},
        {"all_to_all",
         [&](const Tensor& x) {
           pg_->all_to_all(x.narrow(0, 0, n / 2), x.narrow(0, n / 2, n / 2));
         }},
    };
    for (const auto& [op, call] : calls) {
      SCOPED_TRACE(op);
      {
        Tensor x = Tensor::empty({n}, f32);
        ASSERT_EQ(x.data_ptr(), block) << "the cached block was not reused";
        try {
          call(x);
          ADD_FAILURE() << "no error";
        } catch (const Error& e) {
          EXPECT_THAT(e.what(), HasSubstr(op + " (nccl rank 0/1): the process group was aborted"));
        }
      }  // x freed: back in the cache at once unless the refused call marked it
      EXPECT_EQ(Tensor::empty({n}, f32).data_ptr(), block)
          << "the refused " << op << " left its tensor marked for the communication stream";
    }
    EXPECT_EQ(cuda::memory_stats(0).num_cuda_mallocs, mallocs);
    gate.release();
  }
  pg_.reset();
  s.synchronize();
  s.destroy();
}

class NcclBlockingWaitTest : public NcclTest {
 protected:
  ProcessGroupNCCLOptions options() const override {
    ProcessGroupNCCLOptions o = NcclTest::options();
    o.blocking_wait = true;
    o.timeout = 30s;
    o.high_priority_stream = true;
    o.name = "blocking";
    return o;
  }
};

TEST_F(NcclBlockingWaitTest, WaitBlocksTheHost) {
  EXPECT_EQ(pg_->timeout(), 30s);
  Tensor t = on_gpu(pattern(1 << 20, DType::bf16), DType::bf16);
  WorkPtr w = pg_->allreduce({t}, ReduceOp::avg);
  w->wait();
  EXPECT_TRUE(w->is_completed());
  EXPECT_EQ(values(t), pattern(1 << 20, DType::bf16));
}

TEST(NcclCreate, TimeoutFromEnvironment) {
  REQUIRE_GPU();
  test::EnvGuard guard("DDP_NCCL_TIMEOUT_S");
  ::setenv("DDP_NCCL_TIMEOUT_S", "123", 1);
  TCPStore store(test::server_options(10s));
  auto pg = ProcessGroupNCCL::create(store, 0, 1);
  EXPECT_EQ(pg->timeout(), 123s);
}

// A world of one on the CPU whose collectives do nothing, to bootstrap the
// NCCL id exchange as an MPI or gloo group would.
class SoloGroup : public ProcessGroup {
 public:
  SoloGroup() : ProcessGroup(0, 1) {}
  std::string backend_name() const override { return "solo"; }

 protected:
  WorkPtr do_allreduce(Tensors& t, ReduceOp) override { return completed_work("allreduce", t); }
  WorkPtr do_broadcast(Tensors& t, int) override { return completed_work("broadcast", t); }
  WorkPtr do_reduce(Tensors& t, int, ReduceOp) override { return completed_work("reduce", t); }
  WorkPtr do_allgather(Tensors& o, const Tensor&) override {
    return completed_work("allgather", o);
  }
  WorkPtr do_reduce_scatter(const Tensor& o, Tensors&, ReduceOp) override {
    return completed_work("reduce_scatter", {o});
  }
  WorkPtr do_all_to_all(const Tensor& o, const Tensor&) override {
    return completed_work("all_to_all", {o});
  }
  WorkPtr do_barrier() override { return completed_work("barrier"); }
  WorkPtr do_send(const Tensor& t, int, int) override { return completed_work("send", {t}); }
  WorkPtr do_recv(const Tensor& t, int, int) override { return completed_work("recv", {t}); }
};

TEST(NcclCreate, ThroughABootstrapGroup) {
  REQUIRE_GPU();
  SoloGroup solo;
  ProcessGroupNCCLOptions o;
  o.device = 0;
  auto pg = ProcessGroupNCCL::create(solo, o);
  EXPECT_EQ(pg->size(), 1);
  Tensor t = on_gpu(pattern(10, DType::u8), DType::u8);
  pg->allreduce({t}, ReduceOp::product)->wait();
  EXPECT_EQ(values(t), pattern(10, DType::u8));
  // An nccl group (CUDA tensors only) can bootstrap another.
  auto pg2 = ProcessGroupNCCL::create(*pg, o);
  pg2->barrier()->wait();
}

TEST(NcclCreate, BadDevice) {
  REQUIRE_GPU();
  TCPStore store(test::server_options(10s));
  ProcessGroupNCCLOptions o;
  o.device = cuda::device_count();
  EXPECT_THROW(ProcessGroupNCCL::create(store, 0, 1, o), DeviceError);
}

}  // namespace
}  // namespace ddp::dist

#endif  // DDP_HAVE_NCCL
