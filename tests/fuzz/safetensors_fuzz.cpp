// libFuzzer target: ddp::io::load_safetensors (models, checkpoint sections).
#include "ddp/io/safetensors.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ddp::fuzz::InputFile file("safetensors");
  const std::string& path = file.write(data, size);
  ddp::fuzz::expect_only_ddp_errors([&] {
    ddp::io::Metadata metadata;
    (void)ddp::io::load_safetensors(path, &metadata);
  });
  return 0;
}
