// Tests of the JSON reader (ddp/io/json.h), which parses untrusted file
// headers: every kind of value, exact integers, escapes and UTF-8, and the
// malformed inputs it must refuse with a ValueError naming the byte offset.
#include "ddp/io/json.h"

#include <cmath>
#include <optional>
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
  // The reasons are nlohmann-json's words (Note [nlohmann-json behind
  // json.h]); the offsets are the hand-written parser's, kept.
  const BadJson cases[] = {
      {"", "at byte 0: syntax error while parsing value - unexpected end of input"},
      {"{", "at byte 1: syntax error while parsing object key - unexpected end of input"},
      {"{\"a\" 1}", "at byte 5: syntax error while parsing object separator - unexpected number literal; expected ':'"},
      {"{\"a\":1,}", "at byte 7: syntax error while parsing object key - unexpected '}'; expected string literal"},
      {"{a:1}", "at byte 1: syntax error while parsing object key - invalid literal"},
      {"[1 2]", "at byte 3: syntax error while parsing array - unexpected number literal; expected ']'"},
      {"[1,]", "at byte 3: syntax error while parsing value - unexpected ']'"},
      {"{\"a\":1,\"a\":2}", "at byte 7: duplicate key \"a\""},
      {"{\"b\":1,\"a\\\"\":2,\"a\\\"\":3}", "at byte 15: duplicate key \"a\"\""},
      {"01", "at byte 1: syntax error while parsing value - unexpected number literal; expected end of input"},
      {"-", "invalid number; expected digit after '-'"},
      {"1.", "invalid number; expected digit after '.'"},
      {"1e", "invalid number; expected '+', '-', or digit after exponent"},
      {"tru", "at byte 3: syntax error while parsing value - invalid literal"},
      {"nul", "invalid literal"},
      {"\"abc", "at byte 4: syntax error while parsing value - invalid string: missing closing quote"},
      {"\"a\nb\"", "at byte 2: syntax error while parsing value - invalid string: control character U+000A (LF) must be escaped"},
      {"\"\\x\"", "invalid string: forbidden character after backslash"},
      {"\"\\u12g4\"", "invalid string: '\\u' must be followed by 4 hex digits"},
      {"\"\\u12", "invalid string: '\\u' must be followed by 4 hex digits"},
      {"\"\\udc00\"", "surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"},
      {"\"\\ud800x\"", "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
      {"\"\\ud800\\u0041\"", "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
      {"\"\xff\"", "at byte 1: syntax error while parsing value - invalid string: ill-formed UTF-8 byte; last read: '\"\\xff'"},
      {"\"\xc3\"", "invalid string: ill-formed UTF-8 byte"},
      {"\"\xc0\xaf\"", "invalid string: ill-formed UTF-8 byte"},      // overlong '/'
      {"\"\xed\xa0\x80\"", "invalid string: ill-formed UTF-8 byte"},  // an encoded surrogate
      {"{} x", "at byte 3: syntax error while parsing value - invalid literal; last read: '{} x'; expected end of input"},
      {"{}\x01", "expected end of input"},
  };

  for (const BadJson& c : cases) {
    SCOPED_TRACE(c.text);
    EXPECT_DDP_ERROR(json::parse(c.text), ValueError, c.message);
  }
}

TEST(Json, RefusesNulBytesThatNlohmannTakesForTheEnd) {
  EXPECT_DDP_ERROR(json::parse(std::string("{}\0\0", 4)), ValueError,
                   "at byte 2: unexpected '\\x00' after the value");
  EXPECT_DDP_ERROR(json::parse(std::string("[1,\0 2]", 7)), ValueError, "at byte 3");
  EXPECT_DDP_ERROR(json::parse(std::string("\"a\0\"", 4)), ValueError, "control character U+0000");
}

TEST(Json, QuoteRefusesInvalidUtf8WithItsOffset) {
  EXPECT_DDP_ERROR(json::quote("ok\xff"), ValueError, "json: at byte 2 of a string: invalid UTF-8");
}

TEST(Json, BoundsNestingDepth) {
  std::string deep(100000, '[');  // would overflow the stack of a naive parser
  EXPECT_DDP_ERROR(json::parse(deep), ValueError, "nesting deeper than 64 levels");
  std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(json::parse(ok));
  std::string too_deep = std::string(65, '[') + std::string(65, ']');
  EXPECT_DDP_ERROR(json::parse(too_deep), ValueError, "at byte 64: nesting deeper than 64 levels");
  EXPECT_NO_THROW(json::parse(too_deep, {.max_depth = 100}));
}

}  // namespace
}  // namespace ddp::test

namespace ddp::test {
namespace {

namespace json = ddp::io::json;

TEST(JsonWriter, OneLineObjectsInInsertionOrder) {
  json::Array a;
  a.push(1).push(2.5).push("x").push(json::Object().add("k", false));
  json::Object o;
  o.add("step", int64_t(10))
      .add("loss", 2.5)
      .add("name", "a\"b\n")
      .add("ok", true)
      .add("none", std::optional<double>())
      .add("nan", std::nan(""))
      .add("list", a)
      .add("big", uint64_t(18446744073709551615ull))
      .add("neg", int64_t(-9007199254740993));
  EXPECT_EQ(o.str(),
            R"({"step": 10, "loss": 2.5, "name": "a\"b\n", "ok": true, "none": null, "nan": null, )"
            R"("list": [1, 2.5, "x", {"k": false}], "big": 18446744073709551615, )"
            R"("neg": -9007199254740993})");
  // What it writes, the reader reads back exactly.
  json::Value v = json::parse(o.str());
  EXPECT_EQ(v.find("big")->as_uint64(), UINT64_MAX);
  EXPECT_EQ(v.find("neg")->number_literal(), "-9007199254740993");
  EXPECT_EQ(v.find("name")->as_string(), "a\"b\n");
  EXPECT_EQ(json::parse(o.pretty(2)).keys(), v.keys());
}

TEST(JsonWriter, SignificantDigitsAppendAndReplace) {
  json::Object o({.significant_digits = 6});
  o.add("loss", 2.345678912).add("lr", 1e-4 / 3);
  EXPECT_EQ(o.str(), R"({"loss": 2.34568, "lr": 3.33333e-05})");
  json::Object exact;
  exact.add("x", 0.1).add("y", 1.0 / 3);
  EXPECT_EQ(exact.str(), R"({"x": 0.1, "y": 0.3333333333333333})");
  exact.append(json::Object().add("x", 7).add("z", "t"));
  EXPECT_EQ(exact.str(), R"({"x": 7, "y": 0.3333333333333333, "z": "t"})");
}

TEST(JsonWriter, RefusesStringsThatAreNotUtf8) {
  json::Object o;
  o.add("bad\xff", 1);
  EXPECT_DDP_ERROR(o.str(), ValueError, "json: at byte 3 of a string: invalid UTF-8");
  json::Array a;
  a.push("\xc3");
  EXPECT_DDP_ERROR(a.str(), ValueError, "invalid UTF-8");
}

}  // namespace
}  // namespace ddp::test
