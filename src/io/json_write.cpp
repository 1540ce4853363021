// The JSON writer (json.h) and quote(): nlohmann-json's ordered_json holds
// the members and writes every scalar; str() only lays out the one-line form.
// See Note [nlohmann-json behind json.h].

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "ddp/core/error.h"
#include "ddp/io/json.h"

namespace ddp::io::json {

namespace {

using Ordered = nlohmann::ordered_json;

double rounded(double v, const WriteOptions& o) {
  if (o.significant_digits <= 0 || !std::isfinite(v)) return v;
  // Through text, so the shortest form nlohmann writes is the rounded one.
  return std::strtod(fmt::format("{:.{}g}", v, o.significant_digits).c_str(), nullptr);
}

// nlohmann writes scalars (numbers exact, strings escaped, NaN as null);
// the layout adds a space after ':' and ',' as our lines always had.
std::string one_line(const Ordered& j) {
  if (j.is_object()) {
    std::string out = "{";
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (out.size() > 1) out += ", ";
      out += Ordered(it.key()).dump() + ": " + one_line(it.value());
    }
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (const Ordered& item : j) {
      if (out.size() > 1) out += ", ";
      out += one_line(item);
    }
    return out + "]";
  }
  return j.dump();
}

// nlohmann refuses to write a string that is not valid UTF-8 (the reader
// would refuse it too): "[json.exception.type_error.316] invalid UTF-8 byte
// at index 3: 0xFF" becomes our ValueError with the offset.
[[noreturn]] void utf8_error(const std::exception& e) {
  const std::string what = e.what();
  const size_t at = what.find("index ");
  const size_t index =
      at == std::string::npos ? 0 : std::strtoull(what.c_str() + at + 6, nullptr, 10);
  const size_t colon = what.rfind(": ");
  DDP_THROW(ValueError, "json: at byte {} of a string: invalid UTF-8 ({})", index,
            colon == std::string::npos ? what : what.substr(colon + 2));
}

std::string dump(const Ordered& j, int indent) {
  try {
    return indent < 0 ? one_line(j) : j.dump(indent);
  } catch (const Ordered::type_error& e) {
    utf8_error(e);
  }
}

}  // namespace

std::string quote(std::string_view s) {
  try {
    return Ordered(std::string(s)).dump();
  } catch (const Ordered::type_error& e) {
    utf8_error(e);
  }
}

struct Object::Impl {
  WriteOptions options;
  Ordered j = Ordered::object();
};
struct Array::Impl {
  WriteOptions options;
  Ordered j = Ordered::array();
};

// ---- Object -----------------------------------------------------------------------

Object::Object(WriteOptions options) : impl_(std::make_unique<Impl>()) { impl_->options = options; }
Object::~Object() = default;
Object::Object(const Object& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Object& Object::operator=(const Object& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Object::Object(Object&&) noexcept = default;
Object& Object::operator=(Object&&) noexcept = default;

Object& Object::add(std::string_view key, double value) {
  impl_->j[std::string(key)] = rounded(value, impl_->options);
  return *this;
}
Object& Object::add_int(std::string_view key, int64_t value) {
  impl_->j[std::string(key)] = value;
  return *this;
}
Object& Object::add_uint(std::string_view key, uint64_t value) {
  impl_->j[std::string(key)] = value;
  return *this;
}
Object& Object::add(std::string_view key, bool value) {
  impl_->j[std::string(key)] = value;
  return *this;
}
Object& Object::add(std::string_view key, std::string_view value) {
  impl_->j[std::string(key)] = std::string(value);
  return *this;
}
Object& Object::add(std::string_view key, std::optional<double> value) {
  return value ? add(key, *value) : add_null(key);
}
Object& Object::add(std::string_view key, std::optional<std::string> value) {
  return value ? add(key, std::string_view(*value)) : add_null(key);
}
Object& Object::add(std::string_view key, const Object& value) {
  impl_->j[std::string(key)] = value.impl_->j;
  return *this;
}
Object& Object::add(std::string_view key, const Array& value) {
  impl_->j[std::string(key)] = value.impl_->j;
  return *this;
}
Object& Object::add_null(std::string_view key) {
  impl_->j[std::string(key)] = nullptr;
  return *this;
}
Object& Object::append(const Object& other) {
  for (auto it = other.impl_->j.begin(); it != other.impl_->j.end(); ++it)
    impl_->j[it.key()] = it.value();
  return *this;
}
std::string Object::str() const { return dump(impl_->j, -1); }
std::string Object::pretty(int indent) const { return dump(impl_->j, std::max(indent, 0)); }

// ---- Array ------------------------------------------------------------------------

Array::Array(WriteOptions options) : impl_(std::make_unique<Impl>()) { impl_->options = options; }
Array::~Array() = default;
Array::Array(const Array& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Array& Array::operator=(const Array& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
Array::Array(Array&&) noexcept = default;
Array& Array::operator=(Array&&) noexcept = default;

Array& Array::push(double value) {
  impl_->j.push_back(rounded(value, impl_->options));
  return *this;
}
Array& Array::push_int(int64_t value) {
  impl_->j.push_back(value);
  return *this;
}
Array& Array::push_uint(uint64_t value) {
  impl_->j.push_back(value);
  return *this;
}
Array& Array::push(std::string_view value) {
  impl_->j.push_back(std::string(value));
  return *this;
}
Array& Array::push(const Object& value) {
  impl_->j.push_back(value.impl_->j);
  return *this;
}
size_t Array::size() const { return impl_->j.size(); }
std::string Array::str() const { return dump(impl_->j, -1); }
std::string Array::pretty(int indent) const { return dump(impl_->j, std::max(indent, 0)); }

}  // namespace ddp::io::json
