#pragma once
// Helpers shared by the ops tests (ops_test.cpp, ops_linalg_index_test.cpp).

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ddp/ddp.h"

namespace ddp::test_ops {

// Tensors from host values (from_vector converts to the options' dtype,
// which is f32 unless told otherwise).
inline Tensor f32(const std::vector<float>& v, const Shape& shape) {
  return Tensor::from_vector<float>(v, shape);
}
inline Tensor f64(const std::vector<double>& v, const Shape& shape, bool requires_grad = false) {
  return Tensor::from_vector<double>(v, shape, TensorOptions(kFloat64).requires_grad(requires_grad));
}
inline Tensor i64(const std::vector<int64_t>& v, const Shape& shape) {
  return Tensor::from_vector<int64_t>(v, shape, kInt64);
}
inline Tensor i32(const std::vector<int32_t>& v, const Shape& shape) {
  return Tensor::from_vector<int32_t>(v, shape, kInt32);
}
inline Tensor mask(const std::vector<bool>& v, const Shape& shape) {
  return Tensor::from_vector<bool>(v, shape, kBool);
}
inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  ASSERT_TRUE(t.defined());
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), expected.size()) << t.describe();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], tol) << "element " << i;
}

// Runs f, which must throw E whose message contains `needle` (the op name).
template <class E, class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one naming '" << needle << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message does not name '" << needle << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// EXPECT_THROW, plus: the message names `needle` (the op, or a tensor).
#define EXPECT_OP_ERROR(stmt, ErrorType, needle)                         \
  do {                                                                   \
    EXPECT_THROW(stmt, ErrorType);                                       \
    ::ddp::test_ops::expect_error<ErrorType>([&] { stmt; }, needle);     \
  } while (0)

// A tensor whose storage claims to be on cuda:0 (a host buffer that is never
// touched), so device checks can be tested without a GPU: frontends check
// devices before they run any kernel.
inline Tensor fake_cuda(const Shape& shape, DType dt = kFloat32) {
  auto* buf = new std::vector<char>(size_t(shape_numel(shape)) * element_size(dt) + 1);
  Storage st(buf->data(), buf->size(), Device::cuda(0), [buf](void*) { delete buf; });
  return Tensor::from_storage(st, shape, contiguous_strides(shape), 0, dt);
}

}  // namespace ddp::test_ops
