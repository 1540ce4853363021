#include "ddp/core/env.h"

#include <cerrno>
#include <cstdlib>

#include "ddp/core/error.h"

namespace ddp {

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

std::string env_string(const char* name, const std::string& fallback) {
  auto v = env_string(name);
  return v ? *v : fallback;
}

int64_t env_int(const char* name, int64_t fallback) {
  auto v = env_string(name);
  if (!v || v->empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  DDP_CHECK(errno == 0 && *end == '\0', "environment variable {}='{}' is not an integer", name, *v);
  return x;
}

double env_double(const char* name, double fallback) {
  auto v = env_string(name);
  if (!v || v->empty()) return fallback;
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  DDP_CHECK(errno == 0 && *end == '\0', "environment variable {}='{}' is not a number", name, *v);
  return x;
}

bool env_bool(const char* name, bool fallback) {
  auto v = env_string(name);
  if (!v || v->empty()) return fallback;
  const std::string& s = *v;
  if (s == "1" || s == "true" || s == "TRUE" || s == "yes" || s == "on") return true;
  if (s == "0" || s == "false" || s == "FALSE" || s == "no" || s == "off") return false;
  DDP_THROW(ValueError, "environment variable {}='{}' is not a boolean (1/0, true/false, yes/no, on/off)",
            name, s);
}

}  // namespace ddp
