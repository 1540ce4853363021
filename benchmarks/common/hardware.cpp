#include "hardware.h"

#include <sys/resource.h>

#include <fmt/format.h>

#include <thread>

#include "ddp/core/error.h"
#include "ddp/core/threads.h"
#include "ddp/tensor/cuda.h"

namespace bench {

ddp::Device default_device() {
  return ddp::cuda::is_available() ? ddp::Device::cuda(0) : ddp::Device::cpu();
}

std::optional<ddp::Device> parse_device(const std::string& text) {
  try {
    return ddp::Device(text);
  } catch (const ddp::ValueError&) {
    return std::nullopt;
  }
}

void check_device(const ddp::Device& device) {
  if (!device.is_cuda()) return;
  if (!ddp::cuda::is_available())
    throw ddp::DeviceError(fmt::format("--device {}: no usable GPU ({})", device.str(),
                                       ddp::cuda::unavailable_reason()));
  if (device.index >= ddp::cuda::device_count())
    throw ddp::DeviceError(fmt::format("--device {}: this machine has {} GPU(s)", device.str(),
                                       ddp::cuda::device_count()));
}

std::string device_name(const ddp::Device& device) {
  if (device.is_cuda()) return ddp::cuda::device_name(device.index);
  return fmt::format("cpu ({} cores)", std::thread::hardware_concurrency());
}

int set_cpu_threads(int threads) {
  if (threads > 0) ddp::set_num_threads(threads);  // Note [CPU threads]
  return ddp::get_num_threads();
}

namespace {

// See Note [Peak FLOPs for MFU]. The first entry whose `match` is in the
// GPU's name and whose `unless` is not wins, so specific names come first.
struct PeakEntry {
  const char* match;
  const char* unless;  // "" for none
  const char* label;
  double tensor_core;  // bf16 and f16, dense
  double f32;          // without TF32
};
constexpr PeakEntry kPeaks[] = {
    {"H200", "", "H200", 989.4, 66.9},
    {"H100 PCIe", "", "H100 PCIe", 756.5, 51.2},
    // "NVIDIA H100 80GB HBM3" is the SXM board; the NVL board differs.
    {"H100", "NVL", "H100 SXM", 989.4, 66.9},
    {"A100", "", "A100", 312.0, 19.5},
};

}  // namespace

std::optional<PeakFlops> lookup_peak_flops(const std::string& gpu_name, const std::string& amp) {
  for (const PeakEntry& e : kPeaks) {
    if (gpu_name.find(e.match) == std::string::npos) continue;
    if (*e.unless != '\0' && gpu_name.find(e.unless) != std::string::npos) continue;
    if (amp == "off")
      return PeakFlops{e.f32, fmt::format("{} f32 (no TF32), datasheet", e.label)};
    return PeakFlops{e.tensor_core, fmt::format("{} {} dense, datasheet", e.label, amp)};
  }
  return std::nullopt;
}

void reset_peak_memory(const ddp::Device& device) {
  if (device.is_cuda()) ddp::cuda::reset_peak_memory_stats(device.index);
}

PeakMemory peak_memory(const ddp::Device& device) {
  if (device.is_cuda())
    return {double(ddp::cuda::memory_stats(device.index).peak_allocated_bytes) / (1 << 20),
            "cuda_allocator"};
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return {double(usage.ru_maxrss) / 1024.0, "max_rss"};  // Linux: ru_maxrss in KiB
}

}  // namespace bench
