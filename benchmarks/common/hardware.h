#pragma once
// What the benchmarks need to know about the machine: the device to use, its
// name, CPU threads, peak memory, and the peak FLOP/s that MFU divides by.
//
// Note [Peak FLOPs for MFU]
// MFU = achieved model FLOP/s (Note [Benchmark FLOPs]) / the device's dense
// peak for the precision the matmuls run in, from NVIDIA's datasheets:
//
//   device      bf16/f16 tensor core   f32 (no TF32)
//   H100 SXM    989.4 TFLOP/s          66.9
//   H100 PCIe   756.5                  51.2
//   H200        989.4                  66.9
//   A100        312                    19.5
//
// Sparse figures (2×) are never used. With --amp bf16 or f16 the peak is the
// tensor-core one. With --amp off it is the plain f32 one: libddp's f32
// matmuls run without TF32 (CUBLAS_COMPUTE_32F; docs/nn.md). Its f32
// convolutions may use TF32 (on by default, DDP_CUDNN_ALLOW_TF32=0 turns it
// off; Note [cuDNN TF32]), so a convolutional model's --amp off MFU can
// exceed what plain f32 reaches: pass --peak-tflops for the TF32 peak.
// An unknown GPU, and the CPU, have no entry: MFU is "n/a" unless
// --peak-tflops gives the peak.

#include <optional>
#include <string>

#include "ddp/core/device.h"

namespace bench {

// cuda:0 when a usable GPU exists, else cpu.
ddp::Device default_device();
// Parses "cpu" / "cuda" / "cuda:N"; nullopt for anything else.
std::optional<ddp::Device> parse_device(const std::string& text);
// DeviceError when `device` is a GPU that this build or machine lacks.
void check_device(const ddp::Device& device);
// The GPU's name ("NVIDIA H100 80GB HBM3"), or "cpu (N cores)".
std::string device_name(const ddp::Device& device);

// Sets the CPU thread pools (OpenMP, which oneDNN uses, and OpenBLAS's) to
// `threads`; 0 leaves them as they are (OMP_NUM_THREADS or all cores).
// Returns the number of threads in effect.
int set_cpu_threads(int threads);

struct PeakFlops {
  double tflops = 0;  // dense peak in 10^12 FLOP/s
  std::string what;   // "H100 SXM bf16 dense (datasheet)", "--peak-tflops"
};
// The table of Note [Peak FLOPs for MFU]; nullopt for an unknown device.
// amp is "off", "bf16" or "f16".
std::optional<PeakFlops> lookup_peak_flops(const std::string& gpu_name, const std::string& amp);

// Peak memory since reset_peak_memory(), in MiB, and where it comes from:
// "cuda_allocator" (the caching allocator's peak of bytes handed to tensors)
// or "max_rss" (the process's peak resident set since it started, model
// construction included: libddp's CPU allocator keeps no statistics).
struct PeakMemory {
  double mib = 0;
  std::string source;
};
void reset_peak_memory(const ddp::Device& device);
PeakMemory peak_memory(const ddp::Device& device);

}  // namespace bench
