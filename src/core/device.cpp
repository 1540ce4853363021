#include "ddp/core/device.h"

#include <cstdlib>

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
  if (spec.rfind("cuda:", 0) == 0 && spec.size() > 5) {
    const std::string num = spec.substr(5);
    char* end = nullptr;
    long idx = std::strtol(num.c_str(), &end, 10);
    if (*end == '\0' && idx >= 0 && idx < 1024) {
      *this = Device::cuda(int(idx));
      return;
    }
  }
  DDP_THROW(ValueError, "invalid device '{}' (expected cpu, cuda or cuda:N)", spec);
}

std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

}  // namespace ddp
