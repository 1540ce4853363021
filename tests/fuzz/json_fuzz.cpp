// libFuzzer target: ddp::io::json::parse, the JSON reader behind
// safetensors headers and checkpoint manifests.
#include "ddp/io/json.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ddp::fuzz::expect_only_ddp_errors([&] { (void)ddp::io::json::parse(ddp::fuzz::as_text(data, size)); });
  return 0;
}
