#pragma once
// The request parser of the metrics server: reads the bytes a client sent
// (untrusted, possibly partial) and says whether they hold a complete
// request, need more bytes, or must be refused with a 4xx/5xx status.
// Internal: not installed. Fuzzed by tests/fuzz/http_request_fuzz.cpp.
//
// Note [Metrics request limits]
// The endpoint serves one page, so it needs almost nothing of HTTP: a
// request line, a few headers and never a body. Everything beyond that is
// refused as soon as the bytes show it, without waiting for the rest:
//   - a request line that is not `TOKEN SP target SP HTTP/1.x`: 400;
//   - a target longer than max_target_bytes: 414 (decided while the line is
//     still arriving, so a 1 MiB URL costs max_target_bytes of buffer);
//   - a head (request line + headers) longer than max_head_bytes, or more
//     than max_header_count headers: 431;
//   - any body (Content-Length above 0, or Transfer-Encoding): 413; the
//     body is never read;
//   - a version other than HTTP/1.0 and 1.1: 505;
//   - a path other than /metrics: 404; a method other than GET and HEAD on
//     /metrics: 405.
// The caller therefore never buffers more than max_head_bytes of a request.

#include <cstddef>
#include <string_view>

namespace ddp::metrics::http {

struct RequestLimits {
  size_t max_target_bytes = 1024;
  size_t max_head_bytes = 8192;
  size_t max_header_count = 64;
};

struct ParsedRequest {
  // 0: incomplete (read more); 200: serve /metrics; otherwise the error
  // status to answer with before closing the connection.
  int status = 0;
  bool head = false;        // HEAD: headers only
  bool keep_alive = false;  // the client allows another request on this connection
  size_t head_bytes = 0;    // bytes of the request (valid when status != 0 and the head ended)
  std::string_view why;     // for an error status: a short reason, sent as the body
};

// Parses the start of `bytes` (everything received so far on a connection).
ParsedRequest parse_request(std::string_view bytes, const RequestLimits& limits);

// "Bad Request" for 400 and so on; "Error" for a status it does not know.
std::string_view status_text(int status);

}  // namespace ddp::metrics::http
