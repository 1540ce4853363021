// Tests of the typed environment-variable helpers (ddp/core/env.h): a set
// variable that does not parse raises ValueError naming the variable.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <cstdlib>
#include <string>

#include "ddp/core/env.h"
#include "ddp/core/error.h"

namespace ddp {
namespace {

using ::testing::HasSubstr;

// Sets a variable for one test and restores the environment afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

constexpr const char* kVar = "DDP_TEST_ENV_VARIABLE";

TEST(Env, StringUnsetAndSet) {
  {
    ScopedEnv e(kVar, nullptr);
    EXPECT_FALSE(env_string(kVar).has_value());
    EXPECT_EQ(env_string(kVar, "fallback"), "fallback");
  }
  {
    ScopedEnv e(kVar, "hello world");
    ASSERT_TRUE(env_string(kVar).has_value());
    EXPECT_EQ(*env_string(kVar), "hello world");
    EXPECT_EQ(env_string(kVar, "fallback"), "hello world");
  }
  {
    ScopedEnv e(kVar, "");  // set but empty is still set for env_string
    ASSERT_TRUE(env_string(kVar).has_value());
    EXPECT_EQ(*env_string(kVar), "");
  }
}

TEST(Env, IntParsesAndFallsBack) {
  {
    ScopedEnv e(kVar, nullptr);
    EXPECT_EQ(env_int(kVar, 42), 42);
  }
  {
    ScopedEnv e(kVar, "");
    EXPECT_EQ(env_int(kVar, 42), 42);
  }
  {
    ScopedEnv e(kVar, "17");
    EXPECT_EQ(env_int(kVar, 42), 17);
  }
  {
    ScopedEnv e(kVar, "-5");
    EXPECT_EQ(env_int(kVar, 42), -5);
  }
  {
    ScopedEnv e(kVar, "9000000000");  // beyond 32 bits
    EXPECT_EQ(env_int(kVar, 0), int64_t(9000000000));
  }
}

TEST(Env, MalformedIntRaisesValueErrorNamingTheVariable) {
  for (const char* bad : {"12x", "abc", "1.5", "0x", "99999999999999999999999"}) {
    ScopedEnv e(kVar, bad);
    try {
      env_int(kVar, 0);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const ValueError& err) {
      EXPECT_THAT(err.what(), HasSubstr(kVar));
      EXPECT_THAT(err.what(), HasSubstr(bad));
      EXPECT_THAT(err.what(), HasSubstr("env.cpp:"));
    }
  }
}

TEST(Env, DoubleParsesAndRejects) {
  {
    ScopedEnv e(kVar, nullptr);
    EXPECT_EQ(env_double(kVar, 2.5), 2.5);
  }
  {
    ScopedEnv e(kVar, "1.25e-3");
    EXPECT_DOUBLE_EQ(env_double(kVar, 0), 1.25e-3);
  }
  {
    ScopedEnv e(kVar, "-7");
    EXPECT_EQ(env_double(kVar, 0), -7.0);
  }
  for (const char* bad : {"fast", "1.5.2", "3e", "1e999"}) {
    ScopedEnv e(kVar, bad);
    try {
      env_double(kVar, 0);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const ValueError& err) {
      EXPECT_THAT(err.what(), HasSubstr(kVar));
      EXPECT_THAT(err.what(), HasSubstr(bad));
    }
  }
}

TEST(Env, BoolAcceptsTheDocumentedSpellings) {
  for (const char* yes : {"1", "true", "TRUE", "yes", "on"}) {
    ScopedEnv e(kVar, yes);
    EXPECT_TRUE(env_bool(kVar, false)) << yes;
  }
  for (const char* no : {"0", "false", "FALSE", "no", "off"}) {
    ScopedEnv e(kVar, no);
    EXPECT_FALSE(env_bool(kVar, true)) << no;
  }
  {
    ScopedEnv e(kVar, nullptr);
    EXPECT_TRUE(env_bool(kVar, true));
    EXPECT_FALSE(env_bool(kVar, false));
  }
  {
    ScopedEnv e(kVar, "");
    EXPECT_TRUE(env_bool(kVar, true));
  }
}

TEST(Env, MalformedBoolRaisesValueErrorNamingTheVariable) {
  for (const char* bad : {"maybe", "2", "y", "enabled"}) {
    ScopedEnv e(kVar, bad);
    try {
      env_bool(kVar, false);
      ADD_FAILURE() << "no error for '" << bad << "'";
    } catch (const ValueError& err) {
      EXPECT_THAT(err.what(), HasSubstr(kVar));
      EXPECT_THAT(err.what(), HasSubstr(std::string("'") + bad + "'"));
      EXPECT_THAT(err.what(), HasSubstr("boolean"));
    }
  }
}

}  // namespace
}  // namespace ddp
