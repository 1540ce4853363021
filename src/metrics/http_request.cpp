#include "http_request.h"

#include <cctype>
#include <optional>

namespace ddp::metrics::http {
namespace {

constexpr std::string_view kPath = "/metrics";
// The longest method token worth reading (no registered method is longer).
constexpr size_t kMaxMethodBytes = 16;

bool is_tchar(unsigned char c) {
  if (std::isalnum(c)) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (!is_tchar(c)) return false;
  return true;
}

// Targets and field values: visible characters (and, in values, blanks);
// control characters (NUL, a lone CR) never reach the server's logic.
bool is_visible(std::string_view s, bool blanks_allowed) {
  for (unsigned char c : s) {
    if (c == ' ' || c == '\t') {
      if (!blanks_allowed) return false;
    } else if (c < 0x21 || c == 0x7f) {
      return false;
    }
  }
  return true;
}

bool equals_lower(std::string_view s, std::string_view lower) {
  if (s.size() != lower.size()) return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != lower[i]) return false;
  return true;
}

bool contains_lower(std::string_view s, std::string_view lower) {
  for (size_t i = 0; i + lower.size() <= s.size(); ++i)
    if (equals_lower(s.substr(i, lower.size()), lower)) return true;
  return false;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

ParsedRequest refuse(int status, std::string_view why) {
  ParsedRequest r;
  r.status = status;
  r.why = why;
  return r;
}

// The request line so far (`complete`: its newline has arrived, and it is
// passed without it). Returns an error, or nothing when it is fine so far.
std::optional<ParsedRequest> check_request_line(std::string_view line, bool complete,
                                                const RequestLimits& limits) {
  const size_t sp1 = line.find(' ');
  const std::string_view method = line.substr(0, sp1);
  if (method.size() > kMaxMethodBytes || (!method.empty() && !is_token(method)) ||
      (sp1 != std::string_view::npos && method.empty()))
    return refuse(400, "malformed request line");
  if (sp1 == std::string_view::npos) {
    if (complete) return refuse(400, "malformed request line");
    return std::nullopt;
  }
  const std::string_view rest = line.substr(sp1 + 1);
  const size_t sp2 = rest.find(' ');
  const std::string_view target = rest.substr(0, sp2);
  if (target.size() > limits.max_target_bytes) return refuse(414, "request target too long");
  if (!is_visible(target, false)) return refuse(400, "malformed request target");
  if (sp2 == std::string_view::npos) {
    if (complete) return refuse(400, "malformed request line");
    return std::nullopt;
  }
  if (target.empty()) return refuse(400, "malformed request target");
  const std::string_view version = rest.substr(sp2 + 1);
  constexpr std::string_view kHttp = "HTTP/";
  if (version.size() > 8 || version.substr(0, kHttp.size()) != kHttp.substr(0, version.size()))
    return refuse(400, "malformed HTTP version");
  if (!complete) return std::nullopt;
  if (version.size() != 8 || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[7])))
    return refuse(400, "malformed HTTP version");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return refuse(505, "only HTTP/1.0 and HTTP/1.1");
  return std::nullopt;
}

// One complete header line. Returns an error, or nothing; notes the
// Connection header in *keep_alive.
std::optional<ParsedRequest> check_header(std::string_view line, bool* keep_alive) {
  if (line.front() == ' ' || line.front() == '\t') return refuse(400, "folded header line");
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos || !is_token(line.substr(0, colon)))
    return refuse(400, "malformed header line");
  const std::string_view name = line.substr(0, colon);
  const std::string_view value = trim(line.substr(colon + 1));
  if (!is_visible(value, true)) return refuse(400, "malformed header value");
  if (equals_lower(name, "content-length")) {
    if (value.empty()) return refuse(400, "malformed Content-Length");
    for (char c : value)
      if (c < '0' || c > '9') return refuse(400, "malformed Content-Length");
    if (value.find_first_not_of('0') != std::string_view::npos)
      return refuse(413, "a request body is not accepted");
  } else if (equals_lower(name, "transfer-encoding")) {
    return refuse(413, "a request body is not accepted");
  } else if (equals_lower(name, "connection")) {
    if (contains_lower(value, "close")) *keep_alive = false;
    else if (contains_lower(value, "keep-alive")) *keep_alive = true;
  }
  return std::nullopt;
}

// The next line of `bytes` from `pos`: without its "\n" (and "\r"), or
// nothing if its newline has not arrived. *next: where the line after starts.
std::optional<std::string_view> next_line(std::string_view bytes, size_t pos, size_t* next) {
  const size_t nl = bytes.find('\n', pos);
  if (nl == std::string_view::npos) return std::nullopt;
  *next = nl + 1;
  std::string_view line = bytes.substr(pos, nl - pos);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

}  // namespace

ParsedRequest parse_request(std::string_view bytes, const RequestLimits& limits) {
  size_t pos = 0;
  const auto request_line = next_line(bytes, 0, &pos);
  if (!request_line) {
    std::string_view partial = bytes;
    if (!partial.empty() && partial.back() == '\r') partial.remove_suffix(1);
    if (auto error = check_request_line(partial, false, limits)) return *error;
    if (bytes.size() > limits.max_head_bytes) return refuse(431, "request head too large");
    return {};
  }
  if (auto error = check_request_line(*request_line, true, limits)) return *error;
  const std::string_view method = request_line->substr(0, request_line->find(' '));
  const size_t target_start = method.size() + 1;
  const std::string_view target =
      request_line->substr(target_start, request_line->find(' ', target_start) - target_start);
  bool keep_alive = request_line->substr(request_line->size() - 8) == "HTTP/1.1";

  size_t header_count = 0;
  for (;;) {
    if (pos > limits.max_head_bytes) return refuse(431, "request head too large");
    size_t next = 0;
    const auto line = next_line(bytes, pos, &next);
    if (!line) {
      if (bytes.size() > limits.max_head_bytes) return refuse(431, "request head too large");
      return {};
    }
    pos = next;
    if (line->empty()) break;
    if (++header_count > limits.max_header_count) return refuse(431, "too many header lines");
    if (auto error = check_header(*line, &keep_alive)) return *error;
  }
  if (pos > limits.max_head_bytes) return refuse(431, "request head too large");

  ParsedRequest r;
  r.head_bytes = pos;
  const std::string_view path = target.substr(0, target.find('?'));
  if (path != kPath) {
    r.status = 404;
    r.why = "only /metrics is served";
  } else if (method != "GET" && method != "HEAD") {
    r.status = 405;
    r.why = "only GET and HEAD are served";
  } else {
    r.status = 200;
    r.head = method == "HEAD";
    r.keep_alive = keep_alive;
  }
  return r;
}

std::string_view status_text(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

}  // namespace ddp::metrics::http
