// libFuzzer target: the metrics server's request parser (Note [Metrics
// request limits]). Beyond not crashing, its answers must be consistent:
// a known status, a head inside the bytes and the limits, and the same
// verdict for any prefix that already held the whole head.
#include "fuzz_input.h"
#include "metrics/http_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddp::metrics::http;
  const RequestLimits limits{64, 512, 8};  // small, so the fuzzer reaches them
  const std::string_view bytes = ddp::fuzz::as_text(data, size);
  const ParsedRequest r = parse_request(bytes, limits);
  if (r.status != 0 && status_text(r.status) == "Error") __builtin_trap();
  if (r.status != 0 && r.status != 200 && r.why.empty()) __builtin_trap();
  if (r.head_bytes > size || r.head_bytes > limits.max_head_bytes) __builtin_trap();
  if (r.status == 200) {
    const ParsedRequest again = parse_request(bytes.substr(0, r.head_bytes), limits);
    if (again.status != 200 || again.head_bytes != r.head_bytes || again.head != r.head ||
        again.keep_alive != r.keep_alive)
      __builtin_trap();
  }
  return 0;
}
