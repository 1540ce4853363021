#include "ddp/core/device.h"

#include <algorithm>
#include <string>

#include "ddp/core/error.h"

namespace ddp {

Device::Device(const std::string& spec) {
  if (spec == "cpu") {
    *this = Device::cpu();
    return;
  }
  if (spec == "cuda") {
    *this = Device::cuda(0);
    return;
  }
  // "cuda:" then 1-4 decimal digits below 1024: no sign, no spaces (strtol would take both).
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5 && spec.size() <= 9) {
    const std::string num = spec.substr(5);
    if (std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        std::stoi(num) < 1024) {
      *this = Device::cuda(std::stoi(num));
      return;
    }
  }
  DDP_THROW(ValueError, "invalid device '{}' (expected cpu, cuda or cuda:N)", spec);
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

}  // namespace ddp
