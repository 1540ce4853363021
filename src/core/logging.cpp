#include "ddp/core/logging.h"

#include <cstdio>
#include <mutex>
#include <string>

#include "ddp/core/env.h"
#include "ddp/core/error.h"

namespace ddp {

static LogLevel parse_level() {
  std::string v = env_string("DDP_LOG_LEVEL", "warning");
  if (v == "debug") return LogLevel::debug;
  if (v == "info") return LogLevel::info;
  if (v == "error") return LogLevel::error;
  return LogLevel::warning;
}

LogLevel log_level() {
  static const LogLevel level = parse_level();  // read-only after first use
  return level;
}

void log_message(LogLevel level, const char* file, int line, const std::string& msg) {
  static constexpr const char* kNames[] = {"DEBUG", "INFO", "WARNING", "ERROR"};
  static std::mutex mu;  // keeps lines from interleaving between threads
  std::lock_guard<std::mutex> g(mu);
  std::fprintf(stderr, "[ddp %s %s:%d] %s\n", kNames[int(level)], detail::base_name(file), line,
               msg.c_str());
}

}  // namespace ddp
