// A CPU run of libddp maps no CUDA library (Note [Loading CUDA when first
// used] in src/tensor/cuda_runtime.h): this program trains a small model on
// the CPU for a few steps, asks whether CUDA is available as every trainer
// does, then reads /proc/self/maps. It prints its resident memory and exits
// 1 naming any CUDA library it finds mapped, so the test fails in a CUDA
// build that loads them at start. Linked to libddp only, as a user's
// program is. ctest: tensor.cpu_run_maps_no_cuda_library; docs/benchmarks.md
// records its memory line.

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "ddp/nn/functional/loss.h"
#include "ddp/nn/models/resnet.h"
#include "ddp/optim/sgd.h"
#include "ddp/tensor/cuda.h"
#include "ddp/tensor/ops.h"

using namespace ddp;

namespace {

// The kB value of a "Name:   123 kB" line of /proc/self/status.
long status_kb(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(name + ":", 0) == 0) return std::stol(line.substr(name.size() + 1));
  return -1;
}

}  // namespace

int main() {
  const bool gpu = cuda::is_available();  // what a trainer asks first
  manual_seed(0);
  auto model = nn::models::resnet20({.in_channels = 1, .num_classes = 10});
  optim::SGD opt(model->parameters(), 0.1, {.momentum = 0.9});
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({8, 1, 28, 28});
    Tensor y = arange(int64_t{8});  // classes 0..7
    nn::functional::cross_entropy((*model)(x), y).backward();
    opt.step();
    opt.zero_grad();
  }
  const std::vector<std::string> cuda_libraries = {"libcudart", "libcublas", "libcublasLt",
                                                   "libcudnn",  "libnvrtc",  "libnccl",
                                                   "libnvjpeg", "libddp_cuda"};
  std::vector<std::string> mapped;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    for (const std::string& lib : cuda_libraries)
      if (line.find("/" + lib) != std::string::npos) {
        const std::string path = line.substr(line.find('/'));
        bool seen = false;
        for (const std::string& m : mapped) seen = seen || m == path;
        if (!seen) mapped.push_back(path);
      }
  std::printf("cuda compiled %d, available %d; resident %ld kB, peak %ld kB\n",
              int(cuda::is_compiled()), int(gpu), status_kb("VmRSS"), status_kb("VmHWM"));
  if (gpu) {
    std::printf("a GPU is present: the CUDA libraries are meant to be mapped; nothing checked\n");
    return 0;
  }
  for (const std::string& m : mapped) std::printf("mapped without a GPU: %s\n", m.c_str());
  return mapped.empty() ? 0 : 1;
}
