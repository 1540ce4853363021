// Every collective of a process group against a serial computation of what
// each rank contributed, for any backend:
//   mpirun -np N pg_collectives_main --backend mpi
//   ddprun --nproc-per-node N pg_collectives_main --backend gloo
//   ddprun --nproc-per-node N pg_collectives_main --backend cpu:gloo   (routed)
// The group comes from init_process_group, so this also tests that it reads
// the launcher's environment. Every rank runs every test in the same order
// (the collectives must match), only rank 0 prints gtest's report, other
// ranks print their own failures, and the exit status is non-zero when any
// rank failed. With a GPU, CUDA tensors are staged through host memory.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/config.h"
#include "ddp/dist/init.h"
#include "ddp/dist/routing_process_group.h"
#include "ddp/tensor/cuda.h"
#include "dist/multi_rank_main.h"
#if DDP_HAVE_MPI
#include "ddp/dist/process_group_mpi.h"
#endif
#if DDP_HAVE_GLOO
#include "ddp/dist/process_group_gloo.h"
#endif

using namespace ddp;
using namespace ddp::dist;

namespace {

World g_world;
std::string g_backend;
ProcessGroup& pg() { return *g_world.group; }
const std::string& backend() { return g_backend; }

// A second group over the same ranks, made the backend's own way.
std::shared_ptr<ProcessGroup> new_group() {
#if DDP_HAVE_MPI
  if (backend() == "mpi") return ProcessGroupMPI::create();
#endif
#if DDP_HAVE_GLOO
  if (backend() == "gloo")
    return ProcessGroupGloo::create(g_world.store, pg().rank(), pg().size());
#endif
  return nullptr;
}
constexpr std::chrono::milliseconds kWait{120'000};  // a hang fails, not blocks CTest

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                         DType::i32, DType::i64, DType::u8};
const ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::min, ReduceOp::max,
                         ReduceOp::product};

// What rank r holds at element i of tensor `salt`: small integers, so every
// sum and product is exact in f32 and the only rounding is the final one.
double value(int r, int64_t i, int salt = 0) { return double((i * 7 + r * 3 + salt * 5) % 5 + 1); }

Tensor make(DType d, int64_t n, int r, int salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value(r, i, salt);
  return Tensor::from_vector(v, {n}, TensorOptions(d));
}

double combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      return a + b;
    case ReduceOp::min:
      return std::min(a, b);
    case ReduceOp::max:
      return std::max(a, b);
    case ReduceOp::product:
      return a * b;
  }
  return 0;
}

// The serial reduction over all ranks, as a tensor of dtype d (so it carries
// the same final rounding; u8 wraps like the backend's 8-bit arithmetic).
Tensor expected_reduce(DType d, int64_t n, ReduceOp op, int salt = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double acc = value(0, i, salt);
    for (int r = 1; r < pg().size(); ++r) acc = combine(op, acc, value(r, i, salt));
    if (op == ReduceOp::avg) acc /= pg().size();
    if (d == DType::u8) acc = double(int64_t(acc) % 256);
    v[size_t(i)] = acc;
  }
  return Tensor::from_vector(v, {n}, TensorOptions(d));
}

void expect_equal(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what;
  auto a = actual.to_vector<double>();
  auto e = expected.to_vector<double>();
  double tol = actual.dtype() == DType::f16 || actual.dtype() == DType::bf16 ? 1e-2
               : actual.dtype() == DType::f32                                ? 1e-6
                                                                             : 1e-12;
  int bad = 0;
  for (size_t i = 0; i < a.size() && bad < 5; ++i)
    if (std::abs(a[i] - e[i]) > tol * std::max(1.0, std::abs(e[i]))) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i]
                    << " (rank " << pg().rank() << ")";
      ++bad;
    }
}

std::string name(DType d, ReduceOp op, int64_t n) {
  return std::string(dtype_name(d)) + " " + reduce_op_name(op) + " n=" + std::to_string(n);
}

// ---- allreduce ----------------------------------------------------------------

TEST(Allreduce, EveryDTypeAndOpSmall) {
  for (DType d : kDTypes)
    for (ReduceOp op : kOps) {
      if (op == ReduceOp::avg && !is_floating(d)) continue;
      for (int64_t n : {0, 1, 37}) {
        Tensor t = make(d, n, pg().rank());
        pg().allreduce({t}, op)->wait(kWait);
        expect_equal(t, expected_reduce(d, n, op), "allreduce " + name(d, op, n));
      }
    }
}

TEST(Allreduce, Large) {
  const int64_t n = (int64_t(1) << 20) + 3;
  struct Case {
    DType d;
    ReduceOp op;
  };
  for (Case c : {Case{DType::f32, ReduceOp::sum}, Case{DType::f64, ReduceOp::avg},
                 Case{DType::bf16, ReduceOp::max}, Case{DType::i64, ReduceOp::product}}) {
    Tensor t = make(c.d, n, pg().rank());
    pg().allreduce({t}, c.op)->wait(kWait);
    expect_equal(t, expected_reduce(c.d, n, c.op), "allreduce " + name(c.d, c.op, n));
  }
}

TEST(Allreduce, CoalescedMixedTensors) {
  struct Spec {
    DType d;
    int64_t n;
  };
  const std::vector<Spec> specs = {{DType::f32, 3}, {DType::f32, 0},    {DType::f64, 5},
                                   {DType::f16, 7}, {DType::f32, 1000}, {DType::bf16, 2},
                                   {DType::f16, 9}};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::min}) {
    Tensors ts;
    for (size_t k = 0; k < specs.size(); ++k)
      ts.push_back(make(specs[k].d, specs[k].n, pg().rank(), int(k)));
    pg().allreduce(ts, op)->wait(kWait);
    for (size_t k = 0; k < specs.size(); ++k)
      expect_equal(ts[k], expected_reduce(specs[k].d, specs[k].n, op, int(k)),
                   "coalesced #" + std::to_string(k) + " " + name(specs[k].d, op, specs[k].n));
  }
  // Integers coalesced too.
  Tensors ints = {make(DType::i32, 4, pg().rank(), 1), make(DType::i64, 3, pg().rank(), 2),
                  make(DType::i32, 6, pg().rank(), 3)};
  pg().allreduce(ints, ReduceOp::max)->wait(kWait);
  expect_equal(ints[0], expected_reduce(DType::i32, 4, ReduceOp::max, 1), "coalesced i32");
  expect_equal(ints[1], expected_reduce(DType::i64, 3, ReduceOp::max, 2), "coalesced i64");
  expect_equal(ints[2], expected_reduce(DType::i32, 6, ReduceOp::max, 3), "coalesced i32 b");
}

TEST(Allreduce, ManyOutstandingWaitedInReverse) {
  std::vector<Tensor> ts;
  std::vector<WorkPtr> ws;
  for (int k = 0; k < 16; ++k) {
    ts.push_back(make(DType::f32, 100 + k, pg().rank(), k));
    ws.push_back(pg().allreduce({ts.back()}));
  }
  for (int k = 15; k >= 0; --k) {
    ws[size_t(k)]->wait(kWait);
    EXPECT_TRUE(ws[size_t(k)]->is_success());
    expect_equal(ts[size_t(k)], expected_reduce(DType::f32, 100 + k, ReduceOp::sum, k),
                 "outstanding");
  }
}

TEST(Allreduce, SecondGroupIsIndependent) {
  auto pg2 = new_group();
  ASSERT_TRUE(pg2);
  EXPECT_EQ(pg2->rank(), pg().rank());
  EXPECT_EQ(pg2->size(), pg().size());
  Tensor a = make(DType::f32, 50, pg().rank(), 1), b = make(DType::f32, 50, pg().rank(), 2);
  // Interleaved submissions on the two groups, waited in the opposite order.
  auto wa = pg().allreduce({a});
  auto wb = pg2->allreduce({b}, ReduceOp::max);
  wb->wait(kWait);
  wa->wait(kWait);
  expect_equal(a, expected_reduce(DType::f32, 50, ReduceOp::sum, 1), "group 1");
  expect_equal(b, expected_reduce(DType::f32, 50, ReduceOp::max, 2), "group 2");
}

// ---- broadcast, reduce ------------------------------------------------------------

TEST(Broadcast, FromEveryRoot) {
  for (int root = 0; root < pg().size(); ++root)
    for (DType d : {DType::f32, DType::f16, DType::i64, DType::u8}) {
      Tensors ts = {make(d, 33, pg().rank(), 1), make(d, 0, pg().rank()),
                    make(d, 5, pg().rank(), 2)};
      pg().broadcast(ts, root)->wait(kWait);
      std::string what = "broadcast root " + std::to_string(root) + " " + dtype_name(d);
      expect_equal(ts[0], make(d, 33, root, 1), what);
      expect_equal(ts[2], make(d, 5, root, 2), what);
    }
}

TEST(Reduce, ToEveryRoot) {
  for (int root = 0; root < pg().size(); ++root)
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
      for (DType d : {DType::f32, DType::bf16, DType::i32}) {
        if (op == ReduceOp::avg && !is_floating(d)) continue;
        Tensors ts = {make(d, 21, pg().rank(), 1), make(d, 4, pg().rank(), 2)};
        pg().reduce(ts, root, op)->wait(kWait);
        if (pg().rank() != root) continue;  // unspecified elsewhere
        std::string what = "reduce root " + std::to_string(root) + " " + name(d, op, 21);
        expect_equal(ts[0], expected_reduce(d, 21, op, 1), what);
        expect_equal(ts[1], expected_reduce(d, 4, op, 2), what);
      }
}

// ---- allgather, reduce_scatter, all_to_all ---------------------------------------

TEST(Allgather, SeparateAndChunkedOutputs) {
  const int n = pg().size();
  for (DType d : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
    Tensor in = make(d, 17, pg().rank(), 3);
    Tensors outs;
    for (int r = 0; r < n; ++r) outs.push_back(Tensor::zeros({17}, TensorOptions(d)));
    pg().allgather(outs, in)->wait(kWait);
    for (int r = 0; r < n; ++r) expect_equal(outs[size_t(r)], make(d, 17, r, 3), "allgather");
    // Outputs that are chunks of one tensor (received without a copy).
    Tensor flat = Tensor::zeros({n * 17}, TensorOptions(d));
    Tensors chunks;
    for (int r = 0; r < n; ++r) chunks.push_back(flat.narrow(0, r * 17, 17));
    pg().allgather(chunks, in)->wait(kWait);
    for (int r = 0; r < n; ++r)
      expect_equal(chunks[size_t(r)], make(d, 17, r, 3), "allgather chunked");
  }
}

TEST(ReduceScatter, OpsAndDTypes) {
  const int n = pg().size();
  struct Case {
    DType d;
    ReduceOp op;
  };
  for (Case c : {Case{DType::f32, ReduceOp::sum}, Case{DType::f16, ReduceOp::avg},
                 Case{DType::f64, ReduceOp::product}, Case{DType::i32, ReduceOp::min},
                 Case{DType::bf16, ReduceOp::max}}) {
    // inputs[j] on every rank uses salt j, so rank j's output reduces salt j.
    Tensors ins;
    for (int j = 0; j < n; ++j) ins.push_back(make(c.d, 11, pg().rank(), j));
    Tensor out = Tensor::zeros({11}, TensorOptions(c.d));
    pg().reduce_scatter(out, ins, c.op)->wait(kWait);
    expect_equal(out, expected_reduce(c.d, 11, c.op, pg().rank()),
                 "reduce_scatter " + name(c.d, c.op, 11));
    // Inputs as chunks of one tensor.
    Tensor flat = Tensor::zeros({n * 11}, TensorOptions(c.d));
    Tensors chunks;
    for (int j = 0; j < n; ++j) chunks.push_back(flat.narrow(0, j * 11, 11).copy_(ins[size_t(j)]));
    Tensor out2 = Tensor::zeros({11}, TensorOptions(c.d));
    pg().reduce_scatter(out2, chunks, c.op)->wait(kWait);
    expect_equal(out2, expected_reduce(c.d, 11, c.op, pg().rank()), "reduce_scatter chunked");
  }
}

// Gloo's ring reduce-scatter (Note [Gloo ring reduce-scatter]) with chunks
// of one element and chunks of several 1 MiB pieces (kRingPieceBytes).
TEST(ReduceScatter, TinyAndLargeChunks) {
  const int n = pg().size();
  for (int64_t len : {int64_t(1), int64_t(3), int64_t(300001)})  // the last: several 1 MiB pieces
    for (DType d : {DType::f32, DType::f64, DType::i64}) {
      Tensors ins;
      for (int j = 0; j < n; ++j) ins.push_back(make(d, len, pg().rank(), j));
      Tensor out = Tensor::zeros({len}, TensorOptions(d));
      pg().reduce_scatter(out, ins, ReduceOp::sum)->wait(kWait);
      expect_equal(out, expected_reduce(d, len, ReduceOp::sum, pg().rank()),
                   "reduce_scatter " + name(d, ReduceOp::sum, len));
      for (int j = 0; j < n; ++j)
        expect_equal(ins[size_t(j)], make(d, len, pg().rank(), j), "reduce_scatter input kept");
    }
}

// Note [Coalesced broadcast]: many small tensors of several dtypes, more
// than one pack's worth, with large ones and empty ones between them.
TEST(Broadcast, ManySmallTensorsCoalesced) {
  for (int root : {0, pg().size() - 1}) {
    Tensors ts;
    std::vector<std::pair<DType, int64_t>> layout;
    for (int k = 0; k < 150; ++k) {
      const DType d = k % 3 == 0 ? DType::f32 : (k % 3 == 1 ? DType::i64 : DType::u8);
      // 8000 elements (up to 64,000 bytes) each: well over 4 MiB in all.
      int64_t len = k % 10 == 9 ? 0 : 8000 - k;
      if (k == 40 || k == 100) len = 300000;  // large: sent on its own
      layout.push_back({d, len});
      ts.push_back(make(d, len, pg().rank(), k));
    }
    pg().broadcast(ts, root)->wait(kWait);
    for (size_t k = 0; k < ts.size(); ++k)
      expect_equal(ts[k], make(layout[k].first, layout[k].second, root, int(k)),
                   "coalesced broadcast tensor " + std::to_string(k));
  }
}

TEST(AllToAll, OutOfPlaceAndInPlace) {
  const int n = pg().size(), rows = 3, cols = 2;
  // Element (chunk j, k) on rank r is r*1000 + j*10 + k: chunk j goes to rank j.
  auto input = [&](int r) {
    std::vector<double> v;
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < rows * cols; ++k) v.push_back(r * 1000 + j * 10 + k);
    return Tensor::from_vector(v, {n * rows, cols}, TensorOptions(DType::f64));
  };
  std::vector<double> want;
  for (int j = 0; j < n; ++j)
    for (int k = 0; k < rows * cols; ++k) want.push_back(j * 1000 + pg().rank() * 10 + k);
  Tensor expected = Tensor::from_vector(want, {n * rows, cols}, TensorOptions(DType::f64));

  Tensor in = input(pg().rank());
  Tensor out = Tensor::zeros({n * rows, cols}, TensorOptions(DType::f64));
  pg().all_to_all(out, in)->wait(kWait);
  expect_equal(out, expected, "all_to_all");
  expect_equal(in, input(pg().rank()), "all_to_all leaves the input");
  pg().all_to_all(in, in)->wait(kWait);
  expect_equal(in, expected, "all_to_all in place");
}

TEST(Barrier, Completes) {
  for (int k = 0; k < 5; ++k) {
    auto w = pg().barrier();
    w->wait(kWait);
    EXPECT_TRUE(w->is_success());
  }
}

// ---- point to point ------------------------------------------------------------

TEST(SendRecv, RingWithTags) {
  const int n = pg().size(), r = pg().rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const int64_t big =
      (int64_t(1) << 20) + 3;  // beyond the eager limit: a blocking send would deadlock
  Tensor small_out = make(DType::f32, 10, r, 1), big_out = make(DType::f32, big, r, 2);
  Tensor small_in = Tensor::zeros({10}), big_in = Tensor::zeros({big});
  // Receives posted in the opposite order of the sends: tags keep them apart.
  auto ws1 = pg().send(big_out, next, 7);
  auto ws2 = pg().send(small_out, next, 3);
  auto wr1 = pg().recv(small_in, prev, 3);
  auto wr2 = pg().recv(big_in, prev, 7);
  for (auto& w : {wr2, wr1, ws2, ws1}) w->wait(kWait);
  expect_equal(small_in, make(DType::f32, 10, prev, 1), "recv small");
  expect_equal(big_in, make(DType::f32, big, prev, 2), "recv big");
  // f16 and i64 over the wire, and a collective in between.
  Tensor h = make(DType::f16, 5, r, 4), h_in = Tensor::zeros({5}, TensorOptions(DType::f16));
  auto a = pg().recv(h_in, prev, 0);
  pg().barrier()->wait(kWait);
  pg().send(h, next, 0)->wait(kWait);
  a->wait(kWait);
  expect_equal(h_in, make(DType::f16, 5, prev, 4), "recv f16");
}

TEST(SendRecv, SizeMismatchFailsTheReceive) {
  // Gloo checks sizes in its transport thread, where a mismatch breaks the
  // connection rather than one receive.
  if (backend() != "mpi") GTEST_SKIP() << "mpi only";
  const int n = pg().size(), r = pg().rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  // A shorter message than the buffer: ShapeError from the Work.
  Tensor in = Tensor::zeros({8});
  auto wr = pg().recv(in, prev, 11);
  pg().send(Tensor::ones({4}), next, 11)->wait(kWait);
  EXPECT_THROW(wr->wait(kWait), ShapeError);
  // A longer message than the buffer: MPI truncation, an MpiError.
  Tensor in2 = Tensor::zeros({2});
  auto wr2 = pg().recv(in2, prev, 12);
  auto ws2 = pg().send(Tensor::ones({4}), next, 12);
  try {
    wr2->wait(kWait);
    ADD_FAILURE() << "a truncated receive succeeded";
  } catch (const Error& e) {
    // The MPI error string, the op and the rank.
    std::string msg = e.what();
    EXPECT_NE(msg.find("recv"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank " + std::to_string(r)), std::string::npos) << msg;
    EXPECT_NE(msg.find("MPI error"), std::string::npos) << msg;
  }
  ws2->wait(kWait);
  pg().barrier()->wait(kWait);
}

// ---- CUDA tensors on a host backend ------------------------------------------------

// Several ranks may share one GPU: the host backends stage CUDA tensors
// through host memory (Note [Host staging]).
TEST(CudaStaging, AllreduceBroadcastAllgather) {
  if (!cuda::is_available()) GTEST_SKIP() << "no GPU: " << cuda::unavailable_reason();
  if (!pg().caps().cuda_tensors && !pg().caps().stage_cuda_through_host)
    GTEST_SKIP() << pg().backend_name() << " has no backend for CUDA tensors";
  const Device dev = Device::cuda(select_local_device(g_world.env, cuda::device_count()));
  const int r = pg().rank(), n = pg().size();
  for (DType d : {DType::f32, DType::bf16}) {
    Tensor t = make(d, 1000, r).to(dev);
    pg().allreduce({t}, ReduceOp::sum)->wait(kWait);
    ASSERT_TRUE(t.is_cuda());
    expect_equal(t.cpu(), expected_reduce(d, 1000, ReduceOp::sum), "cuda allreduce");
  }
  Tensor b = make(DType::f32, 10, r, 5).to(dev);
  pg().broadcast({b}, n - 1)->wait(kWait);
  expect_equal(b.cpu(), make(DType::f32, 10, n - 1, 5), "cuda broadcast");
  Tensors outs;
  for (int k = 0; k < n; ++k) outs.push_back(Tensor::zeros({7}, TensorOptions().device(dev)));
  pg().allgather(outs, make(DType::f32, 7, r, 6).to(dev))->wait(kWait);
  for (int k = 0; k < n; ++k) expect_equal(outs[size_t(k)].cpu(), make(DType::f32, 7, k, 6), "cuda allgather");
}

// ---- routing (Note [Routing by device]) ---------------------------------------------

// With --backend cpu:gloo (or cpu:mpi) every test here ran through a
// RoutingProcessGroup; this one checks that it really was one, and that a
// CUDA tensor, which it has no backend for, is refused on every rank.
TEST(Routing, CpuTensorsReachedTheCpuBackend) {
  auto* routed = dynamic_cast<RoutingProcessGroup*>(&pg());
  if (!routed) GTEST_SKIP() << "not a routing group: " << pg().backend_name();
  ASSERT_NE(routed->backend(DeviceType::CPU), nullptr);
  EXPECT_EQ(routed->backend(DeviceType::CPU)->backend_name(), backend());
  EXPECT_EQ(pg().backend_name(), "cpu:" + backend());
  Tensor t = Tensor::full({3}, double(pg().rank() + 1));
  pg().allreduce({t}, ReduceOp::max)->wait(kWait);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(3, float(pg().size())));
  if (!cuda::is_available()) return;  // no CUDA tensor to refuse
  Tensor c = Tensor::ones({3}, TensorOptions().device(Device::cuda(0)));
  try {
    pg().allreduce({c});
    ADD_FAILURE() << "a CUDA tensor was taken";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("no backend for cuda tensors"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("cpu:" + backend()), std::string::npos);
  }
}

// ---- bad input: the same error on every rank, and nothing hangs afterwards ------

// ---- dense layouts other than contiguous ----------------------------------------

// t laid out NHWC (channels-last), the same values.
Tensor nhwc(const Tensor& t) {
  return t.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
}
Tensor make4(DType d, int r, int salt) { return make(d, 2 * 3 * 4 * 5, r, salt).view({2, 3, 4, 5}); }

// Note [Dense tensors in collectives]: channels-last and transposed tensors
// go through every collective as the blocks they are, and give the values
// of their contiguous twins.
TEST(DenseLayouts, ChannelsLastAndTransposedTensors) {
  const int n = pg().size(), me = pg().rank();
  for (DType d : {DType::f32, DType::bf16, DType::i64}) {
    // allreduce, several layouts in one call (coalesced).
    Tensor a = nhwc(make4(d, me, 1));
    Tensor b = make(d, 6 * 7, me, 2).view({6, 7}).t().contiguous().t();  // [6, 7] column-major
    ASSERT_FALSE(a.is_contiguous());
    ASSERT_FALSE(b.is_contiguous());
    void* a_data = a.data_ptr();
    pg().allreduce({a, b})->wait(kWait);
    EXPECT_EQ(a.data_ptr(), a_data);
    EXPECT_FALSE(a.is_contiguous());
    expect_equal(a.contiguous().view({-1}), expected_reduce(d, 120, ReduceOp::sum, 1), "nhwc allreduce");
    expect_equal(b.contiguous().view({-1}), expected_reduce(d, 42, ReduceOp::sum, 2), "column-major allreduce");

    // broadcast
    Tensor c = nhwc(make4(d, me, 3));
    pg().broadcast({c}, n - 1)->wait(kWait);
    expect_equal(c.contiguous(), make4(d, n - 1, 3), "nhwc broadcast");

    // allgather into NHWC outputs, separate and as chunks of one NHWC tensor
    Tensors outs;
    for (int r = 0; r < n; ++r) outs.push_back(nhwc(Tensor::zeros({2, 3, 4, 5}, TensorOptions(d))));
    pg().allgather(outs, nhwc(make4(d, me, 4)))->wait(kWait);
    for (int r = 0; r < n; ++r) expect_equal(outs[size_t(r)].contiguous(), make4(d, r, 4), "nhwc allgather");
    Tensor big = nhwc(Tensor::zeros({2 * n, 3, 4, 5}, TensorOptions(d)));
    Tensors chunks;
    for (int r = 0; r < n; ++r) chunks.push_back(big.narrow(0, 2 * r, 2));
    pg().allgather(chunks, nhwc(make4(d, me, 4)))->wait(kWait);
    for (int r = 0; r < n; ++r)
      expect_equal(chunks[size_t(r)].contiguous(), make4(d, r, 4), "nhwc allgather chunked");

    // reduce_scatter from NHWC inputs into an NHWC output
    Tensors ins;
    for (int j = 0; j < n; ++j) ins.push_back(nhwc(make4(d, me, 10 + j)));
    Tensor out = nhwc(Tensor::zeros({2, 3, 4, 5}, TensorOptions(d)));
    pg().reduce_scatter(out, ins, ReduceOp::sum)->wait(kWait);
    expect_equal(out.contiguous().view({-1}), expected_reduce(d, 120, ReduceOp::sum, 10 + me),
                 "nhwc reduce_scatter");

    // all_to_all: N is outermost in NHWC, so chunk j of dim 0 is a block.
    auto a2a_input = [&](int r) { return make(d, n * 24, r, 20).view({n * 2, 3, 2, 2}); };
    Tensor src = nhwc(a2a_input(me));
    Tensor dst = nhwc(Tensor::zeros({n * 2, 3, 2, 2}, TensorOptions(d)));
    pg().all_to_all(dst, src)->wait(kWait);
    for (int j = 0; j < n; ++j)
      expect_equal(dst.narrow(0, 2 * j, 2).contiguous(), a2a_input(j).narrow(0, 2 * me, 2).contiguous(),
                   "nhwc all_to_all");
  }
}

TEST(BadInput, RaisesOnEveryRank) {
  const int n = pg().size();
  Tensor t = Tensor::ones({6});
  Tensors too_many(size_t(n + 1), Tensor::zeros({6}));
  EXPECT_THROW(pg().allgather(too_many, t), ShapeError);
  Tensors mismatched(size_t(n), Tensor::zeros({6}));
  mismatched.back() = Tensor::zeros({5});
  EXPECT_THROW(pg().allgather(mismatched, t), ShapeError);
  EXPECT_THROW(pg().reduce_scatter(Tensor::zeros({6}), mismatched), ShapeError);
  Tensors wrong_dtype(size_t(n), Tensor::zeros({6}, TensorOptions(DType::f64)));
  EXPECT_THROW(pg().reduce_scatter(Tensor::zeros({6}), wrong_dtype), DTypeError);
  EXPECT_THROW(pg().broadcast({t}, n), IndexError);
  EXPECT_THROW(pg().broadcast({t}, -1), IndexError);
  EXPECT_THROW(pg().reduce({t}, n), IndexError);
  EXPECT_THROW(pg().send(t, n, 0), IndexError);
  EXPECT_THROW(pg().recv(t, -1, 0), IndexError);
  // Note [Dense tensors in collectives]: a view with gaps is refused, and
  // so are two sides of one call laid out differently.
  Tensor gaps = Tensor::ones({3, 8}).slice(1, 0, 8, 2);
  EXPECT_THROW(pg().allreduce({gaps}), ValueError);
  EXPECT_THROW(pg().broadcast({gaps}), ValueError);
  EXPECT_THROW(pg().allgather(Tensors(size_t(n), Tensor::zeros({3, 4})), gaps), ValueError);
  try {
    pg().allreduce({gaps});
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("is not dense"), std::string::npos) << e.what();
  }
  Tensor nhwc = Tensor::zeros({2, 3, 2, 2}).permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  EXPECT_THROW(pg().allgather(Tensors(size_t(n), Tensor::zeros({2, 3, 2, 2})), nhwc), ValueError);
  EXPECT_THROW(pg().reduce_scatter(nhwc, Tensors(size_t(n), Tensor::zeros({2, 3, 2, 2}))),
               ValueError);
  Tensor rows_inner = Tensor::zeros({3, n * 2}).t();  // dim 0 innermost: chunks are no blocks
  EXPECT_THROW(pg().all_to_all(rows_inner, rows_inner), ValueError);
  EXPECT_THROW(pg().allreduce({Tensor::ones({3}, TensorOptions(DType::i32))}, ReduceOp::avg),
               DTypeError);
  EXPECT_THROW(
      pg().reduce_scatter(Tensor::zeros({2}, TensorOptions(DType::i64)),
                          Tensors(size_t(n), Tensor::zeros({2}, TensorOptions(DType::i64))),
                          ReduceOp::avg),
      DTypeError);
  EXPECT_THROW(pg().all_to_all(Tensor::zeros({n * 2 + 1}), Tensor::zeros({n * 2 + 1})), ShapeError);
  EXPECT_THROW(pg().allreduce({}), ValueError);
  // The group still works.
  Tensor x = make(DType::f32, 9, pg().rank());
  pg().allreduce({x})->wait(kWait);
  expect_equal(x, expected_reduce(DType::f32, 9, ReduceOp::sum), "after bad input");
}

TEST(SendRecv, DestroyingTheGroupCancelsAPendingReceive) {
  // Gloo's receives complete when waited (process_group_gloo.h).
  if (backend() != "mpi") GTEST_SKIP() << "mpi only";
  auto pg2 = new_group();
  Tensor in = Tensor::zeros({4});
  auto w = pg2->recv(in, (pg().rank() + 1) % pg().size(), 99);  // never sent
  pg2.reset();                                                  // must not hang
  ASSERT_TRUE(w->is_completed());
  EXPECT_THROW(w->wait(kWait), Error);
}

// Checks the failure reporting itself: DDP_TEST_FAIL_RANK=r makes rank r
// (only) fail here, and the whole run must then exit non-zero.
TEST(SelfCheck, InjectedFailure) {
  const char* env = std::getenv("DDP_TEST_FAIL_RANK");
  if (env && std::atoi(env) == pg().rank()) ADD_FAILURE() << "injected failure";
}

}  // namespace

int main(int argc, char** argv) {
  // CUDA tensors are tested by their own cases.
  g_world = test::init_test_world(argc, argv);
  g_backend = g_world.group->backend_name();
  // A routed group ("cpu:gloo"): the tests ask about its CPU backend.
  if (auto* routed = dynamic_cast<RoutingProcessGroup*>(g_world.group.get()))
    g_backend = routed->backend(DeviceType::CPU)->backend_name();
  return test::run_tests_on_every_rank(g_world, "pg_collectives_main");
}
