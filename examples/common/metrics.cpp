#include "common/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "ddp/tensor/cuda.h"

namespace examples {

MetricsFile::MetricsFile(const std::string& path, int rank, bool append) {
  if (path.empty() || rank != 0) return;
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr)
    throw std::runtime_error("cannot open metrics file '" + path + "': " + std::strerror(errno));
}

MetricsFile::~MetricsFile() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsFile::write(const ddp::io::json::Object& line) {
  if (file_ == nullptr) return;
  std::fprintf(file_, "%s\n", line.str().c_str());
  std::fflush(file_);
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = int64_t(std::llround(seconds));
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llds", (long long)s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%lldm%02llds", (long long)(s / 60), (long long)(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", (long long)(s / 3600), (long long)(s / 60 % 60));
  return buf;
}

double peak_memory_mib(const ddp::Device& device) {
  if (device.is_cuda())
    return double(ddp::cuda::memory_stats(device.index).peak_allocated_bytes) / (1 << 20);
  // Linux: "VmHWM:    123456 kB" in /proc/self/status.
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;
  return 0;
}

void print_progress(const Progress& p) {
  std::printf("epoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f %s  ETA %s",
              (long long)p.epoch, (long long)p.epochs, (long long)p.step,
              (long long)p.total_steps, p.loss, p.lr, p.rate, p.rate_unit,
              format_duration(p.eta_s).c_str());
  if (p.data_stall_s >= 0)
    std::printf("  data stall %.3fs/step  loader %.0f %s", p.data_stall_s, p.loader_rate,
                p.rate_unit);
  std::printf("\n");
  std::fflush(stdout);
}

}  // namespace examples
