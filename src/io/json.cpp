// The JSON reader (json.h) on nlohmann-json's SAX interface.
// See Note [Parsing untrusted JSON] and Note [nlohmann-json behind json.h].

#include "ddp/io/json.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <iterator>
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

// Bytes outside printable ASCII as \xNN, so a message never carries the
// invalid UTF-8 or control characters it complains about.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x20 && u < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", u);
  }
  return out;
}

// A char iterator that tells how far nlohmann's lexer has read, so that the
// checks it cannot make (depth, duplicate keys) report byte offsets too.
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* p, const char* base, size_t* consumed)
      : p_(p), base_(base), consumed_(consumed) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    ++p_;
    *consumed_ = size_t(p_ - base_);
    return *this;
  }
  CountingIterator operator++(int) {
    CountingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const CountingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const CountingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  const char* base_;
  size_t* consumed_;
};

using Json = nlohmann::json;

// Builds a Value tree from SAX events, keeping object members in file order
// and refusing what nlohmann accepts but we must not: duplicate keys and
// nesting deeper than max_depth.
class TreeBuilder : public nlohmann::json_sax<Json> {
 public:
  TreeBuilder(std::string_view text, const size_t* consumed, int max_depth)
      : text_(text), consumed_(consumed), max_depth_(max_depth) {}

  Value take() { return std::move(root_); }

  bool null() override { return put(Value()); }
  bool boolean(bool b) override { return put(Value::boolean(b)); }
  bool number_integer(number_integer_t v) override { return put(Value::number(std::to_string(v))); }
  bool number_unsigned(number_unsigned_t v) override {
    return put(Value::number(std::to_string(v)));
  }
  // Floats, and integers beyond 64 bits, keep their literal (exactness).
  bool number_float(number_float_t, const string_t& literal) override {
    return put(Value::number(literal));
  }
  bool string(string_t& s) override { return put(Value::string(std::move(s))); }
  bool binary(binary_t&) override { return false; }  // not produced by the text format

  bool start_object(std::size_t) override { return open(true); }
  bool start_array(std::size_t) override { return open(false); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    Frame& f = stack_.back();
    if (!f.seen.insert(k).second) fail(key_start(), fmt::format("duplicate key \"{}\"", printable(k)));
    f.keys.push_back(std::move(k));
    return true;
  }

  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& e) override {
    // "[json.exception.parse_error.101] parse error at line 1, column 6: <reason>"
    std::string reason = e.what();
    if (auto at = reason.find(": "); at != std::string::npos) reason = reason.substr(at + 2);
    // position counts the characters read, the offending one included.
    fail(position > 0 ? position - 1 : 0, printable(reason));
  }

 private:
  struct Frame {
    bool is_object = false;
    std::vector<std::string> keys;
    std::vector<Value> items;
    std::unordered_set<std::string> seen;
  };

  [[noreturn]] static void fail(size_t byte, const std::string& why) {
    DDP_THROW(ValueError, "json: at byte {}: {}", byte, why);
  }

  bool put(Value v) {
    if (stack_.empty())
      root_ = std::move(v);
    else
      stack_.back().items.push_back(std::move(v));
    return true;
  }
  bool open(bool is_object) {
    // The lexer has just read the '{' or '['.
    if (int(stack_.size()) >= max_depth_)
      fail(*consumed_ - 1, fmt::format("nesting deeper than {} levels", max_depth_));
    Frame frame;
    frame.is_object = is_object;
    stack_.push_back(std::move(frame));
    return true;
  }
  bool close() {
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    return put(f.is_object ? Value::object(std::move(f.keys), std::move(f.items))
                           : Value::array(std::move(f.items)));
  }
  // The lexer has just read a key's closing quote: its opening quote is the
  // nearest earlier '"' that no backslash escapes.
  size_t key_start() const {
    size_t i = *consumed_ - 1;
    while (i > 0) {
      --i;
      if (text_[i] != '"') continue;
      size_t slashes = 0;
      while (i > slashes && text_[i - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) return i;
    }
    return 0;
  }

  std::string_view text_;
  const size_t* consumed_;
  int max_depth_;
  std::vector<Frame> stack_;
  Value root_;
};

}  // namespace

Value parse(std::string_view text, const ParseOptions& opts) {
  size_t consumed = 0;
  TreeBuilder builder(text, &consumed, opts.max_depth);
  const char* begin = text.data();
  Json::sax_parse(CountingIterator(begin, begin, &consumed),
                  CountingIterator(begin + text.size(), begin, &consumed), &builder,
                  nlohmann::detail::input_format_t::json, /*strict=*/true,
                  /*ignore_comments=*/false);
  // nlohmann's lexer takes a NUL byte outside a string for the end of the
  // input; JSON has no such thing, so whatever it stopped at is an error.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos)
    DDP_THROW(ValueError, "json: at byte {}: unexpected '\\x00' after the value", nul);
  return builder.take();
}

}  // namespace ddp::io::json
