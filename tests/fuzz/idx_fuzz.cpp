// libFuzzer target: ddp::data::read_idx (MNIST-style IDX files, raw or
// gzip-compressed).
#include "ddp/data/vision.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ddp::fuzz::InputFile file("idx");
  const std::string& path = file.write(data, size);
  ddp::fuzz::expect_only_ddp_errors([&] { (void)ddp::data::read_idx(path); });
  return 0;
}
