// ddp_info: prints what this libddp runs on (ddp::runtime_versions()): the
// CUDA runtime and driver, cuBLAS, cuDNN and NCCL versions actually loaded,
// the files they came from, and the GPUs. Like `python -m torch.utils.collect_env`
// for the GPU part.
//
//   ddp_info              # key: value lines
//   ddp_info --markdown   # a Markdown table (tools/gpu_check.sh puts it in its report)
//
// Exit status 0 even without a GPU (that is a fact to report, not an error),
// 2 for a bad option.

#include <cstdio>
#include <cstring>

#include "ddp/runtime_versions.h"

int main(int argc, char** argv) {
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--markdown") == 0) {
      markdown = true;
    } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: ddp_info [--markdown]\n");
      return 0;
    } else {
      std::fprintf(stderr, "ddp_info: unknown option '%s'\nusage: ddp_info [--markdown]\n", argv[i]);
      return 2;
    }
  }
  const ddp::RuntimeVersions v = ddp::runtime_versions();
  std::fputs((markdown ? v.markdown() : v.str()).c_str(), stdout);
  return 0;
}
