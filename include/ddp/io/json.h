#pragma once
// A small JSON reader and string quoting, for file headers (safetensors) and
// checkpoint metadata. Not a general-purpose JSON library: values are
// immutable once parsed, objects keep their members in file order, and
// numbers keep their literal text so that integers up to 2^64 - 1 are read
// exactly (a double would round offsets above 2^53).
//
// Note [Parsing untrusted JSON]
// Headers come from files, and files can be truncated, corrupt or hostile.
// The parser never reads past its input, bounds nesting depth (deep
// "[[[[..." would otherwise overflow the stack), rejects duplicate keys
// (two meanings for one tensor name), invalid UTF-8 and control characters
// in strings, and raises ValueError with the byte offset of the problem.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ddp::io::json {

class Value {
 public:
  enum class Kind { null, boolean, number, string, array, object };

  Value() = default;  // null
  static Value boolean(bool b);
  static Value number(std::string literal);  // an already validated literal
  static Value string(std::string s);
  static Value array(std::vector<Value> items);
  static Value object(std::vector<std::string> keys, std::vector<Value> values);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::null; }
  bool is_bool() const { return kind_ == Kind::boolean; }
  bool is_number() const { return kind_ == Kind::number; }
  bool is_string() const { return kind_ == Kind::string; }
  bool is_array() const { return kind_ == Kind::array; }
  bool is_object() const { return kind_ == Kind::object; }

  // Accessors raise ValueError when the kind differs.
  bool as_bool() const;
  const std::string& as_string() const;
  const std::string& number_literal() const;
  double as_double() const;
  // The number as an exact unsigned integer: a literal of digits only
  // (no sign, fraction or exponent) that fits in 64 bits; nullopt otherwise.
  std::optional<uint64_t> as_uint64() const;
  const std::vector<Value>& as_array() const;
  // Object members in file order.
  const std::vector<std::string>& keys() const;
  const std::vector<Value>& values() const;
  // The member named key, or null when absent (or not an object).
  const Value* find(std::string_view key) const;

 private:
  void check_kind(Kind k, const char* what) const;

  Kind kind_ = Kind::null;
  bool bool_ = false;
  std::string text_;               // string value or number literal
  std::vector<Value> items_;       // array items or object values
  std::vector<std::string> keys_;  // object keys, parallel to items_
};

struct ParseOptions {
  int max_depth = 64;  // arrays and objects nested deeper are an error
};

// Parses one JSON value; only whitespace may follow it. Raises ValueError
// ("json: at byte 17: expected ':' after an object key") on any problem.
Value parse(std::string_view text, const ParseOptions& opts = {});

// A JSON string literal for s, with quotes: escapes '"', '\\' and control
// characters; other bytes (UTF-8) are copied.
std::string quote(std::string_view s);

const char* kind_name(Value::Kind kind);

}  // namespace ddp::io::json
