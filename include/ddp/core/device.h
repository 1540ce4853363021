#pragma once
// Where a tensor lives: the host, or CUDA device n.

#include <cstdint>
#include <functional>
#include <string>

namespace ddp {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // CUDA ordinal; always 0 for the CPU

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  // Parses "cpu", "cuda", "cuda:1"; throws ValueError otherwise.
  explicit Device(const std::string& spec);

  static constexpr Device cpu() { return Device(DeviceType::CPU, 0); }
  static constexpr Device cuda(int i = 0) { return Device(DeviceType::CUDA, i); }

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;  // "cpu" or "cuda:0"

  friend bool operator==(const Device& a, const Device& b) {
    return a.type == b.type && a.index == b.index;
  }
};

inline constexpr Device kCPU = Device::cpu();

}  // namespace ddp

template <> struct std::hash<ddp::Device> {
  size_t operator()(const ddp::Device& d) const noexcept {
    return (size_t(d.type) << 16) ^ size_t(d.index);
  }
};
