// The metrics server's request parser (src/metrics/http_request.h): what it
// serves, what it refuses with which status, and that it refuses early.

#include "metrics/http_request.h"

#include <gtest/gtest.h>

#include <string>

namespace ddp::metrics::http {
namespace {

ParsedRequest parse(const std::string& bytes) { return parse_request(bytes, RequestLimits{}); }

TEST(HttpRequest, ServesGetAndHeadOfMetrics) {
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: node01:9100\r\nAccept: */*\r\n\r\n";
  ParsedRequest r = parse(get);
  EXPECT_EQ(r.status, 200);
  EXPECT_FALSE(r.head);
  EXPECT_TRUE(r.keep_alive);  // HTTP/1.1's default
  EXPECT_EQ(r.head_bytes, get.size());
  r = parse("HEAD /metrics?name[]=x HTTP/1.0\n\n");  // bare LF, a query
  EXPECT_EQ(r.status, 200);
  EXPECT_TRUE(r.head);
  EXPECT_FALSE(r.keep_alive);  // HTTP/1.0's default
  EXPECT_FALSE(parse("GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
  EXPECT_TRUE(parse("GET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").status, 200);
}

TEST(HttpRequest, IncompleteUntilTheBlankLine) {
  const std::string full = "GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n";
  for (size_t n = 0; n < full.size(); ++n)
    EXPECT_EQ(parse(full.substr(0, n)).status, 0) << "first " << n << " bytes";
  EXPECT_EQ(parse(full).status, 200);
  // Bytes after the head (a pipelined request) are not part of it.
  EXPECT_EQ(parse(full + "GET /x").head_bytes, full.size());
}

TEST(HttpRequest, OtherPathsAre404AndOtherMethods405) {
  EXPECT_EQ(parse("GET / HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(parse("GET /metrics/../etc/passwd HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(parse("GET http://h/metrics HTTP/1.1\r\n\r\n").status, 404);
  EXPECT_EQ(parse("POST /metrics HTTP/1.1\r\n\r\n").status, 405);
  EXPECT_EQ(parse("DELETE /metrics HTTP/1.1\r\n\r\n").status, 405);
  EXPECT_EQ(parse("get /metrics HTTP/1.1\r\n\r\n").status, 405);  // methods are case-sensitive
  EXPECT_FALSE(parse("GET /x HTTP/1.1\r\n\r\n").keep_alive);      // errors close
}

TEST(HttpRequest, GarbageRequestLinesAre400AtOnce) {
  // Refused from the first bad byte, before any newline arrives.
  EXPECT_EQ(parse("\x16\x03\x01\x02\x00").status, 400);  // a TLS ClientHello
  EXPECT_EQ(parse(std::string("GET\0/metrics", 12)).status, 400);
  EXPECT_EQ(parse("GET  /metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse(" GET /metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /metrics\r\n\r\n").status, 400);   // HTTP/0.9
  EXPECT_EQ(parse("GET /metrics XTTP/1.1").status, 400);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1 extra\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /met\x01rics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GETGETGETGETGETGETGET /metrics HTTP/1.1\r\n\r\n").status, 400);
  EXPECT_EQ(parse("\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /metrics HTTP/2.0\r\n\r\n").status, 505);
  EXPECT_EQ(parse("GET /metrics HTTP/1.x\r\n\r\n").status, 400);
}

TEST(HttpRequest, BadHeadersAre400) {
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nno colon\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\n: empty name\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nA: b\r\n folded\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nA: b\x7f\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n").status, 400);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nContent-Length: 1e3\r\n\r\n").status, 400);
}

TEST(HttpRequest, AnyBodyIs413BeforeTheHeadEnds) {
  // The head has not ended: the verdict needs no more bytes.
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n").status, 413);
  EXPECT_EQ(parse("POST /metrics HTTP/1.1\r\ncontent-length: 5\r\n").status, 413);
  EXPECT_EQ(parse("GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n").status, 413);
}

TEST(HttpRequest, LongTargetsAre414BeforeTheLineEnds) {
  const RequestLimits limits;
  const std::string at_limit = "/metrics?" + std::string(limits.max_target_bytes - 9, 'a');
  EXPECT_EQ(parse("GET " + at_limit + " HTTP/1.1\r\n\r\n").status, 200);
  EXPECT_EQ(parse("GET " + at_limit + "a").status, 414);  // no space, no newline yet
}

TEST(HttpRequest, LargeHeadsAre431) {
  const RequestLimits limits;
  const std::string line = "GET /metrics HTTP/1.1\r\n";
  // One header line that never ends ...
  EXPECT_EQ(parse(line + "X: " + std::string(limits.max_head_bytes, 'a')).status, 431);
  // ... a complete head just over the limit ...
  std::string head = line + "X: " + std::string(limits.max_head_bytes - line.size() - 5, 'a') + "\r\n\r\n";
  EXPECT_EQ(head.size(), limits.max_head_bytes + 2);
  EXPECT_EQ(parse(head).status, 431);
  head.erase(head.size() - 6, 2);
  EXPECT_EQ(parse(head).status, 200);
  // ... and too many short ones.
  std::string many = line;
  for (size_t i = 0; i <= limits.max_header_count; ++i) many += "A: b\r\n";
  EXPECT_EQ(parse(many).status, 431);
  // A request line that never ends.
  EXPECT_EQ(parse(std::string(limits.max_head_bytes + 1, 'G')).status, 400);
}

TEST(HttpRequest, EveryErrorHasAReasonAndAStatusText) {
  for (const char* bad : {"\x01", "GET / HTTP/1.1\r\n\r\n", "PUT /metrics HTTP/1.1\r\n\r\n",
                          "GET /metrics HTTP/3.0\r\n\r\n"}) {
    const ParsedRequest r = parse(bad);
    EXPECT_FALSE(r.why.empty()) << bad;
    EXPECT_NE(status_text(r.status), "Error") << r.status;
  }
}

}  // namespace
}  // namespace ddp::metrics::http
