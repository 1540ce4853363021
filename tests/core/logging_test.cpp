// Tests of logging (ddp/core/logging.h). The level is read from DDP_LOG_LEVEL
// once per process, so each case runs in a fresh process: gtest's
// "threadsafe" death-test style re-executes this binary for the statement.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ddp/core/logging.h"

namespace ddp {
namespace {

class Logging : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

int level_with(const char* value) {
  if (value) setenv("DDP_LOG_LEVEL", value, 1);
  else unsetenv("DDP_LOG_LEVEL");
  return int(log_level());
}

TEST_F(Logging, LevelComesFromTheEnvironment) {
  EXPECT_EXIT(std::exit(level_with(nullptr)), ::testing::ExitedWithCode(int(LogLevel::warning)), "");
  EXPECT_EXIT(std::exit(level_with("debug")), ::testing::ExitedWithCode(int(LogLevel::debug)), "");
  EXPECT_EXIT(std::exit(level_with("info")), ::testing::ExitedWithCode(int(LogLevel::info)), "");
  EXPECT_EXIT(std::exit(level_with("warning")), ::testing::ExitedWithCode(int(LogLevel::warning)), "");
  EXPECT_EXIT(std::exit(level_with("error")), ::testing::ExitedWithCode(int(LogLevel::error)), "");
}

TEST_F(Logging, LevelIsReadOncePerProcess) {
  EXPECT_EXIT(
      {
        int first = level_with("error");
        int second = level_with("debug");  // too late: the first read stands
        std::exit(first == second ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(Logging, MessagesAtOrAboveTheLevelGoToStderr) {
  EXPECT_EXIT(
      {
        unsetenv("DDP_LOG_LEVEL");
        DDP_LOG_INFO("hidden info {}", 1);
        DDP_LOG_WARNING("shown warning {}", 2);
        DDP_LOG_ERROR("shown error {}", 3);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0),
      R"(\[ddp WARNING logging_test\.cpp:[0-9]+\] shown warning 2.*\[ddp ERROR logging_test\.cpp:[0-9]+\] shown error 3)");
  EXPECT_EXIT(
      {
        unsetenv("DDP_LOG_LEVEL");
        DDP_LOG_INFO("hidden info {}", 1);
        std::fprintf(stderr, "end");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "^end$");
  EXPECT_EXIT(
      {
        setenv("DDP_LOG_LEVEL", "debug", 1);
        DDP_LOG_DEBUG("visible debug {}", 4);
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), R"(\[ddp DEBUG logging_test\.cpp:[0-9]+\] visible debug 4)");
}

TEST_F(Logging, DisabledLevelsDoNotEvaluateArguments) {
  EXPECT_EXIT(
      {
        setenv("DDP_LOG_LEVEL", "error", 1);
        int evaluated = 0;
        DDP_LOG_WARNING("{}", ++evaluated);
        std::exit(evaluated);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace ddp
