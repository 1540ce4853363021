// The JSON reader (json.h). See Note [Parsing untrusted JSON].

#include "ddp/io/json.h"

#include <charconv>
#include <cmath>
#include <unordered_set>

#include "ddp/core/error.h"

namespace ddp::io::json {

// ---- Value ----------------------------------------------------------------------

const char* kind_name(Value::Kind kind) {
  switch (kind) {
    case Value::Kind::null:
      return "null";
    case Value::Kind::boolean:
      return "a boolean";
    case Value::Kind::number:
      return "a number";
    case Value::Kind::string:
      return "a string";
    case Value::Kind::array:
      return "an array";
    case Value::Kind::object:
      return "an object";
  }
  return "?";
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::boolean;
  v.bool_ = b;
  return v;
}
Value Value::number(std::string literal) {
  Value v;
  v.kind_ = Kind::number;
  v.text_ = std::move(literal);
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::string;
  v.text_ = std::move(s);
  return v;
}
Value Value::array(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::array;
  v.items_ = std::move(items);
  return v;
}
Value Value::object(std::vector<std::string> keys, std::vector<Value> values) {
  DDP_CHECK(keys.size() == values.size(), "json::Value::object: {} keys but {} values", keys.size(),
            values.size());
  Value v;
  v.kind_ = Kind::object;
  v.keys_ = std::move(keys);
  v.items_ = std::move(values);
  return v;
}

void Value::check_kind(Kind k, const char* what) const {
  DDP_CHECK(kind_ == k, "json: {} expects {}, the value is {}", what, kind_name(k),
            kind_name(kind_));
}

bool Value::as_bool() const {
  check_kind(Kind::boolean, "as_bool");
  return bool_;
}
const std::string& Value::as_string() const {
  check_kind(Kind::string, "as_string");
  return text_;
}
const std::string& Value::number_literal() const {
  check_kind(Kind::number, "number_literal");
  return text_;
}
double Value::as_double() const {
  check_kind(Kind::number, "as_double");
  double d = 0;
  // from_chars is locale-independent, unlike strtod. Out-of-range
  // literals ("1e999") read as infinity like in most JSON readers.
  auto [p, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), d);
  if (ec == std::errc::result_out_of_range) return text_[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  return d;
}
std::optional<uint64_t> Value::as_uint64() const {
  if (kind_ != Kind::number) return std::nullopt;
  for (char c : text_)
    if (c < '0' || c > '9') return std::nullopt;
  uint64_t u = 0;
  auto [p, ec] = std::from_chars(text_.data(), text_.data() + text_.size(), u);
  if (ec != std::errc() || p != text_.data() + text_.size()) return std::nullopt;
  return u;
}
const std::vector<Value>& Value::as_array() const {
  check_kind(Kind::array, "as_array");
  return items_;
}
const std::vector<std::string>& Value::keys() const {
  check_kind(Kind::object, "keys");
  return keys_;
}
const std::vector<Value>& Value::values() const {
  check_kind(Kind::object, "values");
  return items_;
}
const Value* Value::find(std::string_view key) const {
  if (kind_ != Kind::object) return nullptr;
  for (size_t i = 0; i < keys_.size(); ++i)
    if (keys_[i] == key) return &items_[i];
  return nullptr;
}

// ---- parser ---------------------------------------------------------------------

namespace {

class Parser {
 public:
  Parser(std::string_view text, const ParseOptions& opts) : s_(text), opts_(opts) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) fail("unexpected '{}' after the value", printable(s_[pos_]));
    return v;
  }

 private:
  template <class... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) const {
    DDP_THROW(ValueError, "json: at byte {}: {}", pos_,
              fmt::format(f, std::forward<Args>(args)...));
  }
  static std::string printable(char c) {
    auto u = static_cast<unsigned char>(c);
    return u >= 0x20 && u < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }

  void skip_ws() {
    while (pos_ < s_.size() &&
           (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
      ++pos_;
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return s_[pos_]; }
  void expect(char c, const char* context) {
    skip_ws();
    if (at_end()) fail("unexpected end of input, expected '{}' {}", c, context);
    if (peek() != c) fail("expected '{}' {}, found '{}'", c, context, printable(peek()));
    ++pos_;
  }

  Value parse_value(int depth) {
    skip_ws();
    if (at_end()) fail("unexpected end of input, expected a value");
    char c = peek();
    if (c == '{' || c == '[') {
      if (depth >= opts_.max_depth) fail("nesting deeper than {} levels", opts_.max_depth);
      return c == '{' ? parse_object(depth + 1) : parse_array(depth + 1);
    }
    if (c == '"') return Value::string(parse_string());
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number();
    if (match("true")) return Value::boolean(true);
    if (match("false")) return Value::boolean(false);
    if (match("null")) return Value();
    fail("unexpected '{}', expected a value", printable(c));
  }

  bool match(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Value parse_object(int depth) {
    ++pos_;  // '{'
    std::vector<std::string> keys;
    std::vector<Value> values;
    std::unordered_set<std::string> seen;
    skip_ws();
    if (!at_end() && peek() == '}') {
      ++pos_;
      return Value::object({}, {});
    }
    while (true) {
      skip_ws();
      if (at_end()) fail("unexpected end of input in an object");
      if (peek() != '"') fail("expected a string key, found '{}'", printable(peek()));
      size_t key_pos = pos_;
      std::string key = parse_string();
      if (!seen.insert(key).second) {
        pos_ = key_pos;
        fail("duplicate key \"{}\"", key);
      }
      expect(':', "after an object key");
      values.push_back(parse_value(depth));
      keys.push_back(std::move(key));
      skip_ws();
      if (at_end()) fail("unexpected end of input in an object");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        break;
      }
      fail("expected ',' or '}}' in an object, found '{}'", printable(peek()));
    }
    return Value::object(std::move(keys), std::move(values));
  }

  Value parse_array(int depth) {
    ++pos_;  // '['
    std::vector<Value> items;
    skip_ws();
    if (!at_end() && peek() == ']') {
      ++pos_;
      return Value::array({});
    }
    while (true) {
      items.push_back(parse_value(depth));
      skip_ws();
      if (at_end()) fail("unexpected end of input in an array");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        break;
      }
      fail("expected ',' or ']' in an array, found '{}'", printable(peek()));
    }
    return Value::array(std::move(items));
  }

  Value parse_number() {
    size_t start = pos_;
    auto digits = [&] {
      size_t n = 0;
      while (!at_end() && peek() >= '0' && peek() <= '9') ++pos_, ++n;
      return n;
    };
    if (peek() == '-') ++pos_;
    if (at_end()) fail("a number needs digits");
    if (peek() == '0') {
      ++pos_;
      if (!at_end() && peek() >= '0' && peek() <= '9') fail("a number cannot have a leading zero");
    } else if (digits() == 0) {
      fail("a number needs digits");
    }
    if (!at_end() && peek() == '.') {
      ++pos_;
      if (digits() == 0) fail("a number needs digits after '.'");
    }
    if (!at_end() && (peek() == 'e' || peek() == 'E')) {
      ++pos_;
      if (!at_end() && (peek() == '+' || peek() == '-')) ++pos_;
      if (digits() == 0) fail("a number needs digits in its exponent");
    }
    return Value::number(std::string(s_.substr(start, pos_ - start)));
  }

  unsigned hex4() {
    if (s_.size() - pos_ < 4) fail("unexpected end of input in a \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= unsigned(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= unsigned(c - 'A' + 10);
      else
        fail("invalid hex digit '{}' in a \\u escape", printable(c));
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // Length of the well-formed UTF-8 sequence starting at pos_ (lead byte
  // >= 0x80), or 0. Overlong forms and surrogates are rejected.
  size_t utf8_length() const {
    auto b = [&](size_t i) { return static_cast<unsigned char>(s_[pos_ + i]); };
    unsigned char c = b(0);
    size_t n = c >= 0xC2 && c <= 0xDF   ? 2
               : c >= 0xE0 && c <= 0xEF ? 3
               : c >= 0xF0 && c <= 0xF4 ? 4
                                        : 0;
    if (n == 0 || s_.size() - pos_ < n) return 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    if (b(1) < lo || b(1) > hi) return 0;
    for (size_t i = 2; i < n; ++i)
      if (b(i) < 0x80 || b(i) > 0xBF) return 0;
    return n;
  }

  std::string parse_string() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (at_end()) fail("unexpected end of input in a string");
      auto c = static_cast<unsigned char>(peek());
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("control character \\x{:02x} in a string (escape it)", c);
      if (c >= 0x80) {
        size_t n = utf8_length();
        if (n == 0) fail("invalid UTF-8 in a string");
        out.append(s_.substr(pos_, n));
        pos_ += n;
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out += char(c);
        continue;
      }
      if (at_end()) fail("unexpected end of input in a string escape");
      char e = s_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) fail("lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!match("\\u")) fail("high surrogate without a low surrogate");
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) fail("high surrogate without a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail("invalid escape '\\{}' in a string", printable(e));
      }
    }
  }

  std::string_view s_;
  ParseOptions opts_;
  size_t pos_ = 0;
};

}  // namespace

Value parse(std::string_view text, const ParseOptions& opts) {
  return Parser(text, opts).parse_document();
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

}  // namespace ddp::io::json
