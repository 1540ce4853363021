// Tests of the error hierarchy and the check macros (ddp/core/error.h).
// See Note [Error messages].
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <regex>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "ddp/core/error.h"

namespace ddp {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;

// Misuse errors are ValueErrors; failures of the libraries underneath are not.
static_assert(std::is_base_of_v<std::runtime_error, Error>);
static_assert(std::is_base_of_v<Error, ValueError>);
static_assert(std::is_base_of_v<ValueError, ShapeError>);
static_assert(std::is_base_of_v<ValueError, DTypeError>);
static_assert(std::is_base_of_v<ValueError, DeviceError>);
static_assert(std::is_base_of_v<ValueError, IndexError>);
static_assert(std::is_base_of_v<Error, NotImplementedError>);
static_assert(!std::is_base_of_v<ValueError, NotImplementedError>);
static_assert(std::is_base_of_v<Error, CudaError>);
static_assert(std::is_base_of_v<CudaError, OutOfMemoryError>);
static_assert(!std::is_base_of_v<ValueError, CudaError>);
static_assert(std::is_base_of_v<Error, CublasError>);
static_assert(std::is_base_of_v<Error, CudnnError>);
static_assert(std::is_base_of_v<Error, NcclError>);
static_assert(std::is_base_of_v<Error, MpiError>);
static_assert(std::is_base_of_v<Error, GlooError>);
static_assert(std::is_base_of_v<Error, DistNetworkError>);
static_assert(std::is_base_of_v<Error, IoError>);
static_assert(std::is_base_of_v<Error, TimeoutError>);

// Throws E through DDP_THROW and checks it is caught as ddp::Error with the
// message and the location.
template <class E> void expect_caught_as_error(const char* what) {
  int line = 0;
  try {
    line = __LINE__ + 1;
    ::ddp::detail::throw_error<E>(__FILE__, line, what);
  } catch (const Error& e) {
    EXPECT_NE(dynamic_cast<const E*>(&e), nullptr) << what;
    EXPECT_EQ(std::string(e.what()), fmt::format("{} (error_test.cpp:{})", what, line));
    return;
  } catch (...) {
  }
  ADD_FAILURE() << what << " was not caught as ddp::Error";
}

TEST(Error, EverySubclassIsADdpError) {
  expect_caught_as_error<ValueError>("value");
  expect_caught_as_error<ShapeError>("shape");
  expect_caught_as_error<DTypeError>("dtype");
  expect_caught_as_error<DeviceError>("device");
  expect_caught_as_error<IndexError>("index");
  expect_caught_as_error<NotImplementedError>("not implemented");
  expect_caught_as_error<CudaError>("cuda");
  expect_caught_as_error<OutOfMemoryError>("oom");
  expect_caught_as_error<CublasError>("cublas");
  expect_caught_as_error<CudnnError>("cudnn");
  expect_caught_as_error<NcclError>("nccl");
  expect_caught_as_error<MpiError>("mpi");
  expect_caught_as_error<GlooError>("gloo");
  expect_caught_as_error<DistNetworkError>("lost rank 1");
  expect_caught_as_error<IoError>("io");
  expect_caught_as_error<TimeoutError>("timeout");
}

TEST(Error, ThrowFormatsAndAppendsFileAndLine) {
  int line = 0;
  try {
    line = __LINE__ + 1;
    DDP_THROW(ShapeError, "matmul: {} vs {} ({})", std::vector<int>{2, 3}, std::vector<int>{4, 5}, "f32");
  } catch (const ShapeError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg, fmt::format("matmul: [2, 3] vs [4, 5] (f32) (error_test.cpp:{})", line));
    // Only the base name of the file, never the directory.
    EXPECT_EQ(msg.find('/'), std::string::npos);
    EXPECT_TRUE(std::regex_search(msg, std::regex(R"(\(error_test\.cpp:[0-9]+\)$)"))) << msg;
    return;
  }
  ADD_FAILURE() << "DDP_THROW did not throw ShapeError";
}

TEST(Error, CheckPassesAndRaisesValueError) {
  EXPECT_NO_THROW(DDP_CHECK(1 + 1 == 2, "never {}", "raised"));
  int line = 0;
  try {
    int n = 3;
    line = __LINE__ + 1;
    DDP_CHECK(n < 2, "my_op: n must be < 2, got {}", n);
    ADD_FAILURE() << "DDP_CHECK did not throw";
  } catch (const ValueError& e) {
    EXPECT_EQ(typeid(e), typeid(ValueError));  // exactly ValueError, not a subclass
    EXPECT_EQ(std::string(e.what()), fmt::format("my_op: n must be < 2, got 3 (error_test.cpp:{})", line));
  }
}

TEST(Error, CheckEvaluatesTheConditionOnce) {
  int calls = 0;
  auto cond = [&] { ++calls; return true; };
  DDP_CHECK(cond(), "x");
  EXPECT_EQ(calls, 1);
}

TEST(Error, CheckTRaisesTheGivenType) {
  EXPECT_NO_THROW(DDP_CHECK_T(IndexError, true, "x"));
  EXPECT_THROW(DDP_CHECK_T(IndexError, false, "select: index {} out of range", 5), IndexError);
  EXPECT_THROW(DDP_CHECK_T(DeviceError, false, "x"), DeviceError);
  try {
    DDP_CHECK_T(DTypeError, false, "add: {} vs {}", "f32", "i64");
  } catch (const DTypeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("add: f32 vs i64"));
    EXPECT_THAT(e.what(), EndsWith(")"));
  }
}

TEST(Error, MacrosWorkAsSingleStatements) {
  // The do/while(0) form must be usable in an unbraced if/else.
  bool ok = true;
  if (ok)
    DDP_CHECK(ok, "x");
  else
    DDP_CHECK_T(ShapeError, ok, "y");
  SUCCEED();
}

TEST(Error, BaseNameStripsDirectories) {
  static_assert(std::string_view(detail::base_name("a/b/c.cpp")) == "c.cpp");
  static_assert(std::string_view(detail::base_name("c.cpp")) == "c.cpp");
  static_assert(std::string_view(detail::base_name("C:\\x\\y.cu")) == "y.cu");
  SUCCEED();
}

}  // namespace
}  // namespace ddp
