#pragma once
// JSON for libddp and its programs: a reader for untrusted file headers
// (safetensors, checkpoint manifests) and the one writer of every JSON
// object and line we emit (metrics lines, benchmark reports). Parsed values
// are immutable, objects keep their members in file order, and numbers
// keep their literal text so that integers up to 2^64 - 1 are read exactly
// (a double would round offsets above 2^53).
//
// Note [nlohmann-json behind json.h]
// nlohmann-json (Debian's nlohmann-json3-dev) lexes, validates and writes;
// it stays out of this header, so users of libddp do not need it. It checks
// UTF-8, escapes, control characters, number syntax and trailing input, and
// reports the offset. It accepts two things we must not, so the reader
// drives its SAX interface and builds our Value itself: duplicate keys
// (nlohmann keeps the last) are refused in the key event, and nesting is
// bounded in the start events (nlohmann's parser does not recurse, but a
// bounded tree keeps every consumer safe). A counting input iterator tells
// those two checks the byte offset.
//
// Note [Parsing untrusted JSON]
// Headers come from files, and files can be truncated, corrupt or hostile.
// The parser never reads past its input, bounds nesting depth (deep
// "[[[[..." would otherwise overflow the stack), rejects duplicate keys
// (two meanings for one tensor name), invalid UTF-8 and control characters
// in strings, and raises ValueError with the byte offset of the problem.

#include <cstdint>
#include <memory>
#include <optional>
#include <type_traits>
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

// ---- writing --------------------------------------------------------------

class Array;

struct WriteOptions {
  // When > 0, doubles are rounded to this many significant digits (the
  // trainers' metrics lines use 6); 0 writes the shortest exact form.
  int significant_digits = 0;
};

// A JSON object built member by member, in insertion order. Non-finite
// doubles and empty optionals are written as null (JSON has no NaN).
//
//   json::Object().add("step", 10).add("loss", 2.5).str()   // {"step": 10, "loss": 2.5}
class Object {
 public:
  explicit Object(WriteOptions options = {});
  ~Object();
  Object(const Object& other);
  Object& operator=(const Object& other);
  Object(Object&&) noexcept;
  Object& operator=(Object&&) noexcept;

  Object& add(std::string_view key, double value);
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Object& add(std::string_view key, T value) {
    if constexpr (std::is_signed_v<T>)
      return add_int(key, int64_t(value));
    else
      return add_uint(key, uint64_t(value));
  }
  Object& add(std::string_view key, bool value);
  Object& add(std::string_view key, std::string_view value);
  Object& add(std::string_view key, const std::string& value) { return add(key, std::string_view(value)); }
  Object& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  Object& add(std::string_view key, std::optional<double> value);
  Object& add(std::string_view key, std::optional<std::string> value);
  Object& add(std::string_view key, const Object& value);
  Object& add(std::string_view key, const Array& value);
  Object& add_null(std::string_view key);
  // other's members after ours (a key already present is replaced in place).
  Object& append(const Object& other);

  // One line with a space after ':' and ',': {"a": 1, "b": [1, 2]}.
  std::string str() const;
  // Indented by `indent` spaces per level, one member per line.
  std::string pretty(int indent = 2) const;

 private:
  friend class Array;
  Object& add_int(std::string_view key, int64_t value);
  Object& add_uint(std::string_view key, uint64_t value);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A JSON array built item by item.
class Array {
 public:
  explicit Array(WriteOptions options = {});
  ~Array();
  Array(const Array& other);
  Array& operator=(const Array& other);
  Array(Array&&) noexcept;
  Array& operator=(Array&&) noexcept;

  Array& push(double value);
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Array& push(T value) {
    if constexpr (std::is_signed_v<T>)
      return push_int(int64_t(value));
    else
      return push_uint(uint64_t(value));
  }
  Array& push(std::string_view value);
  Array& push(const Object& value);
  size_t size() const;

  std::string str() const;
  std::string pretty(int indent = 2) const;

 private:
  friend class Object;
  Array& push_int(int64_t value);
  Array& push_uint(uint64_t value);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp::io::json
