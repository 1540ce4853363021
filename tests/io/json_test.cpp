// Tests of the JSON reader (ddp/io/json.h), which parses untrusted file
// headers: every kind of value, exact integers, escapes and UTF-8, and the
// malformed inputs it must refuse with a ValueError naming the byte offset.
#include "ddp/io/json.h"

#include <string>

#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::ElementsAre;
namespace json = ddp::io::json;

TEST(Json, ParsesEveryKindAndKeepsMemberOrder) {
  json::Value v =
      json::parse(R"( {"z": [1, -2.5e3, true, false, null], "a": {"s": "x"}, "m": {}} )");
  ASSERT_TRUE(v.is_object());
  EXPECT_THAT(v.keys(), ElementsAre("z", "a", "m"));
  const auto& arr = v.find("z")->as_array();
  ASSERT_EQ(arr.size(), 5u);
  EXPECT_EQ(arr[0].as_uint64(), 1u);
  EXPECT_DOUBLE_EQ(arr[1].as_double(), -2500.0);
  EXPECT_EQ(arr[1].number_literal(), "-2.5e3");
  EXPECT_FALSE(arr[1].as_uint64().has_value());
  EXPECT_TRUE(arr[2].as_bool());
  EXPECT_FALSE(arr[3].as_bool());
  EXPECT_TRUE(arr[4].is_null());
  EXPECT_EQ(v.find("a")->find("s")->as_string(), "x");
  EXPECT_TRUE(v.find("m")->keys().empty());
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_TRUE(json::parse("[]").as_array().empty());
  EXPECT_EQ(json::parse("\"\"").as_string(), "");
}

TEST(Json, IntegersAreExactUpTo64Bits) {
  EXPECT_EQ(json::parse("18446744073709551615").as_uint64(), UINT64_MAX);
  EXPECT_EQ(json::parse("9007199254740993").as_uint64(), 9007199254740993ull);  // 2^53 + 1
  EXPECT_FALSE(json::parse("18446744073709551616").as_uint64().has_value());    // 2^64
  EXPECT_FALSE(json::parse("-1").as_uint64().has_value());
  EXPECT_FALSE(json::parse("1.0").as_uint64().has_value());
  EXPECT_FALSE(json::parse("1e3").as_uint64().has_value());
  EXPECT_FALSE(json::parse("\"1\"").as_uint64().has_value());
  EXPECT_EQ(json::parse("0").as_uint64(), 0u);
}

TEST(Json, StringEscapesAndUtf8) {
  EXPECT_EQ(json::parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(json::parse(R"("\u00e9\u4e2d\ud83d\ude00")").as_string(),
            "\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80");
  EXPECT_EQ(json::parse("\"caf\xc3\xa9\"").as_string(), "caf\xc3\xa9");
  // quote() output parses back to the same string, control characters included.
  std::string tricky = std::string("q\"b\\s\x01\x1f\n") + "\xe2\x82\xac";
  EXPECT_EQ(json::parse(json::quote(tricky)).as_string(), tricky);
  EXPECT_EQ(json::quote("a\x01"), "\"a\\u0001\"");
}

TEST(Json, AccessorsCheckTheKind) {
  json::Value v = json::parse("[1]");
  EXPECT_DDP_ERROR(v.as_string(), ValueError, "as_string expects a string, the value is an array");
  EXPECT_DDP_ERROR(v.keys(), ValueError, "keys expects an object");
}

struct BadJson {
  const char* text;
  const char* message;
};

TEST(Json, RefusesMalformedInput) {
  const BadJson cases[] = {
      {"", "at byte 0: unexpected end of input, expected a value"},
      {"{", "at byte 1: unexpected end of input in an object"},
      {"{\"a\" 1}", "at byte 5: expected ':' after an object key, found '1'"},
      {"{\"a\":1,}", "at byte 7: expected a string key, found '}'"},
      {"{a:1}", "expected a string key, found 'a'"},
      {"[1 2]", "at byte 3: expected ',' or ']' in an array, found '2'"},
      {"[1,]", "unexpected ']', expected a value"},
      {"{\"a\":1,\"a\":2}", "at byte 7: duplicate key \"a\""},
      {"01", "leading zero"},
      {"-", "a number needs digits"},
      {"1.", "digits after '.'"},
      {"1e", "digits in its exponent"},
      {"tru", "unexpected 't', expected a value"},
      {"nul", "unexpected 'n'"},
      {"\"abc", "unexpected end of input in a string"},
      {"\"a\nb\"", "control character \\x0a in a string"},
      {"\"\\x\"", "invalid escape '\\x'"},
      {"\"\\u12g4\"", "invalid hex digit 'g'"},
      {"\"\\u12", "unexpected end of input in a \\u escape"},
      {"\"\\udc00\"", "lone low surrogate"},
      {"\"\\ud800x\"", "high surrogate without a low surrogate"},
      {"\"\\ud800\\u0041\"", "high surrogate without a low surrogate"},
      {"\"\xff\"", "invalid UTF-8"},
      {"\"\xc3\"", "invalid UTF-8"},
      {"\"\xc0\xaf\"", "invalid UTF-8"},      // overlong '/'
      {"\"\xed\xa0\x80\"", "invalid UTF-8"},  // an encoded surrogate
      {"{} x", "at byte 3: unexpected 'x' after the value"},
      {"{}\x01", "unexpected '\\x01' after the value"},
  };
  for (const BadJson& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_DDP_ERROR(json::parse(c.text), ValueError, c.message);
  }
}

TEST(Json, BoundsNestingDepth) {
  std::string deep(100000, '[');  // would overflow the stack of a naive parser
  EXPECT_DDP_ERROR(json::parse(deep), ValueError, "nesting deeper than 64 levels");
  std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(json::parse(ok));
  std::string too_deep = std::string(65, '[') + std::string(65, ']');
  EXPECT_DDP_ERROR(json::parse(too_deep), ValueError, "nesting deeper than 64 levels");
  EXPECT_NO_THROW(json::parse(too_deep, {.max_depth = 100}));
}

}  // namespace
}  // namespace ddp::test
