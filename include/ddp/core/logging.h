#pragma once
// Logging through fmt to stderr. The level comes from DDP_LOG_LEVEL
// (debug, info, warning, error; default warning), read once per process.

#include "ddp/core/error.h"  // includes fmt the nvcc-safe way

#include <string>

namespace ddp {

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3 };

LogLevel log_level();
void log_message(LogLevel level, const char* file, int line, const std::string& msg);

}  // namespace ddp

#define DDP_LOG(level, ...)                                                                 \
  do {                                                                                      \
    if (::ddp::LogLevel::level >= ::ddp::log_level())                                       \
      ::ddp::log_message(::ddp::LogLevel::level, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define DDP_LOG_DEBUG(...) DDP_LOG(debug, __VA_ARGS__)
#define DDP_LOG_INFO(...) DDP_LOG(info, __VA_ARGS__)
#define DDP_LOG_WARNING(...) DDP_LOG(warning, __VA_ARGS__)
#define DDP_LOG_ERROR(...) DDP_LOG(error, __VA_ARGS__)
