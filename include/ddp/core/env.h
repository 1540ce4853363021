#pragma once
// Typed access to environment variables. A variable that is set but does not
// parse raises ValueError naming the variable, never a silent default.

#include <cstdint>
#include <optional>
#include <string>

namespace ddp {

std::optional<std::string> env_string(const char* name);
std::string env_string(const char* name, const std::string& fallback);
int64_t env_int(const char* name, int64_t fallback);
double env_double(const char* name, double fallback);
bool env_bool(const char* name, bool fallback);  // 1/0, true/false, yes/no, on/off

}  // namespace ddp
