// bench_kernels: achieved memory bandwidth of the CUDA hand kernels, like
// nccl-tests prints bus bandwidth. For each size it times --iters runs of one
// op with CUDA events and prints the time per run, the bytes the op must
// move (every input read once, every output written once) divided by that
// time, and that as a fraction of the device's peak DRAM bandwidth (from the
// memory clock and bus width the driver reports, or --peak-gbs).
//
//   bench_kernels --op add --dtype f16 --layout unaligned
//   bench_kernels --op sum_cols --min-bytes 1M --max-bytes 1G
//
// Ops: add (out = a + b), relu, cast (to --to, default f16 / f32), copy (a
// transposing copy: [n/1024, 1024] -> its transpose made contiguous), sum (all
// elements), sum_rows (sum over the last dim of [n/1024, 1024]), sum_cols
// (over the first dim of [n/256, 256], a bias gradient). Layouts of the
// elementwise inputs: contiguous, unaligned (a view one element into its
// storage), channels_last ([n/(64*32*32), 64, 32, 32] stored NHWC),
// transposed (a [m, 1024] transposed view: the strided path).

#include <cuda_runtime.h>

#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"
#include "ddp/tensor/tensor.h"

namespace {

using namespace ddp;

struct Options {
  std::string op = "add";
  DType dtype = DType::f32;
  DType to = DType::f16;
  bool to_set = false;
  std::string layout = "contiguous";
  int64_t min_bytes = int64_t(1) << 20;
  int64_t max_bytes = int64_t(1) << 30;
  int iters = 50;
  int warmup = 5;
  double peak_gbs = 0;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bench_kernels: %s\n"
               "usage: bench_kernels [--op add|relu|cast|copy|sum|sum_rows|sum_cols]\n"
               "  [--dtype f32|f16|bf16|f64|i32|i64|u8] [--to DTYPE] \n"
               "  [--layout contiguous|unaligned|channels_last|transposed]\n"
               "  [--min-bytes N[K|M|G]] [--max-bytes N[K|M|G]] [--iters N] [--warmup N]\n"
               "  [--peak-gbs GB/s]\n",
               why);
  std::exit(2);
}

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  if (unit == "K") v *= 1024;
  else if (unit == "M") v *= 1024.0 * 1024;
  else if (unit == "G") v *= 1024.0 * 1024 * 1024;
  else if (!unit.empty()) usage(("bad size: " + s).c_str());
  if (v < 1) usage(("bad size: " + s).c_str());
  return int64_t(v);
}

DType parse_dtype(const std::string& s) {
  for (DType dt : kAllDTypes)
    if (s == dtype_name(dt)) return dt;
  usage(("unknown dtype: " + s).c_str());
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--op") o.op = next();
    else if (a == "--dtype") o.dtype = parse_dtype(next());
    else if (a == "--to") { o.to = parse_dtype(next()); o.to_set = true; }
    else if (a == "--layout") o.layout = next();
    else if (a == "--min-bytes") o.min_bytes = parse_bytes(next());
    else if (a == "--max-bytes") o.max_bytes = parse_bytes(next());
    else if (a == "--iters") o.iters = std::atoi(next().c_str());
    else if (a == "--warmup") o.warmup = std::atoi(next().c_str());
    else if (a == "--peak-gbs") o.peak_gbs = std::atof(next().c_str());
    else usage(("unknown argument: " + a).c_str());
  }
  const std::vector<std::string> ops = {"add", "relu", "cast", "copy", "sum", "sum_rows", "sum_cols"};
  bool known = false;
  for (const auto& op : ops) known = known || op == o.op;
  if (!known) usage(("unknown op: " + o.op).c_str());
  if (o.layout != "contiguous" && o.layout != "unaligned" && o.layout != "channels_last" &&
      o.layout != "transposed")
    usage(("unknown layout: " + o.layout).c_str());
  if (o.iters < 1 || o.min_bytes > o.max_bytes) usage("need --iters >= 1 and min <= max bytes");
  if (!o.to_set && o.dtype == DType::f16) o.to = DType::f32;
  return o;
}

// Peak DRAM bandwidth in GB/s: two transfers per memory clock (DDR) over the bus.
double device_peak_gbs() {
  int dev = 0, khz = 0, bits = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) != cudaSuccess) return 0;
  return 2.0 * double(khz) * 1e3 * (bits / 8.0) / 1e9;
}

// An input of about n elements in the chosen layout (numel exactly n except
// for channels_last and transposed, which round n down to their shapes).
Tensor make_input(const Options& o, int64_t n, double fill) {
  const TensorOptions opts = TensorOptions().dtype(o.dtype).device(Device::cuda(0));
  if (o.layout == "unaligned")
    return Tensor::full({n + 1}, fill, opts).narrow(0, 1, n);
  if (o.layout == "channels_last") {
    const int64_t batch = std::max<int64_t>(1, n / (64 * 32 * 32));
    return Tensor::full({batch, 32, 32, 64}, fill, opts).permute({0, 3, 1, 2});
  }
  if (o.layout == "transposed") {
    const int64_t rows = std::max<int64_t>(1, n / 1024);
    return Tensor::full({rows, 1024}, fill, opts).transpose(0, 1);
  }
  return Tensor::full({n}, fill, opts);
}

struct Case {
  std::function<Tensor()> run;
  int64_t bytes_moved;
};

Case make_case(const Options& o, int64_t n) {
  const int64_t es = int64_t(element_size(o.dtype));
  if (o.op == "add") {
    Tensor a = make_input(o, n, 1.0), b = make_input(o, n, 2.0);
    return {[a, b] { return add(a, b); }, 3 * a.numel() * es};
  }
  if (o.op == "relu") {
    Tensor a = make_input(o, n, -1.0);
    return {[a] { return relu(a); }, 2 * a.numel() * es};
  }
  if (o.op == "cast") {
    Tensor a = make_input(o, n, 1.5);
    const DType to = o.to;
    return {[a, to] { return a.to(to); }, a.numel() * (es + int64_t(element_size(to)))};
  }
  const TensorOptions opts = TensorOptions().dtype(o.dtype).device(Device::cuda(0));
  if (o.op == "copy") {
    Tensor a = Tensor::full({std::max<int64_t>(1, n / 1024), 1024}, 1.0, opts);
    return {[a] { return a.transpose(0, 1).contiguous(); }, 2 * a.numel() * es};
  }
  if (o.op == "sum") {
    Tensor a = make_input(o, n, 1.0);
    return {[a] { return sum(a); }, a.numel() * es};
  }
  if (o.op == "sum_rows") {
    Tensor a = Tensor::full({std::max<int64_t>(1, n / 1024), 1024}, 1.0, opts);
    return {[a] { return sum(a, {1}); }, a.numel() * es};
  }
  Tensor a = Tensor::full({std::max<int64_t>(1, n / 256), 256}, 1.0, opts);  // sum_cols
  return {[a] { return sum(a, {0}); }, a.numel() * es};
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (!cuda::is_available()) {
    std::fprintf(stderr, "bench_kernels: no GPU: %s\n", cuda::unavailable_reason().c_str());
    return 1;
  }
  const double peak = o.peak_gbs > 0 ? o.peak_gbs : device_peak_gbs();
  std::printf("# bench_kernels: op %s, dtype %s%s, layout %s, %d iters (%d warmup)\n",
              o.op.c_str(), dtype_name(o.dtype),
              o.op == "cast" ? (std::string(" -> ") + dtype_name(o.to)).c_str() : "",
              o.layout.c_str(), o.iters, o.warmup);
  std::printf("# device %s, peak %.0f GB/s%s\n", cuda::device_name(0).c_str(), peak,
              o.peak_gbs > 0 ? " (--peak-gbs)" : " (memory clock x bus width)");
  std::printf("# %14s %14s %12s %10s %8s\n", "bytes moved", "elements", "time (us)", "GB/s",
              "% peak");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const cudaStream_t stream = static_cast<cudaStream_t>(cuda::current_stream(0).handle());
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 2) {
    const int64_t n = std::max<int64_t>(1, bytes / int64_t(element_size(o.dtype)));
    Case c = make_case(o, n);
    for (int i = 0; i < o.warmup; ++i) c.run();
    cudaEventRecord(start, stream);
    for (int i = 0; i < o.iters; ++i) c.run();
    cudaEventRecord(stop, stream);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    const double us = 1e3 * double(ms) / o.iters;
    const double gbs = double(c.bytes_moved) / (us * 1e-6) / 1e9;
    std::printf("  %14lld %14lld %12.2f %10.1f %8.1f\n", (long long)c.bytes_moved, (long long)n, us,
                gbs, peak > 0 ? 100.0 * gbs / peak : 0.0);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 0;
}
