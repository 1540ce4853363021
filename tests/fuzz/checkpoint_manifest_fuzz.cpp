// libFuzzer target: the checkpoint manifest reader (checkpoint.json: JSON
// with its own CRC-32 and every field checked).
//
// A mutated manifest almost never keeps its checksum right, which would
// stop the fuzzer at the first check; so the target recomputes the stored
// manifest_crc32 of every input (as the writer does: over the text with
// "00000000" in its place) and the field checks behind it get fuzzed too.
#include <zlib.h>

#include <cstdio>

#include "fuzz_input.h"
#include "io/checkpoint_manifest.h"

namespace {

void fix_checksum(std::string& text) {
  const std::string key = "\"manifest_crc32\": \"";
  const size_t at = text.rfind(key);
  if (at == std::string::npos || at + key.size() + 9 > text.size() || text[at + key.size() + 8] != '"')
    return;
  text.replace(at + key.size(), 8, "00000000");
  const uLong crc = ::crc32(0, reinterpret_cast<const Bytef*>(text.data()), uInt(text.size()));
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", crc & 0xffffffffUL);
  text.replace(at + key.size(), 8, hex);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ddp::fuzz::InputFile file("manifest");
  std::string text(ddp::fuzz::as_text(data, size));
  fix_checksum(text);
  const std::string& path = file.write(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  ddp::fuzz::expect_only_ddp_errors([&] { (void)ddp::io::detail::read_manifest(path); });
  return 0;
}
