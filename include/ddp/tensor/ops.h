#pragma once
// Tensor ops. Each checks its arguments (raising ShapeError, DTypeError,
// DeviceError or IndexError that name the op, shapes, dtypes and devices),
// runs the device's kernel and, when grad mode is on and an input requires a
// gradient, records its backward, which is defined beside it in src/ops/.

#include <cstdint>
#include <optional>
#include <vector>

#include "ddp/tensor/generator.h"
#include "ddp/tensor/op_list.h"
#include "ddp/tensor/tensor.h"

namespace ddp {

// ---- elementwise (op_list.h) -------------------------------------------
// Unary: relu, gelu (tanh form), gelu_erf (exact form), silu, exp, log, tanh, sigmoid, sqrt, rsqrt, neg, abs.
#define DDP_DECLARE_UNARY(name, ...) Tensor name(const Tensor& x);
DDP_FOR_EACH_UNARY_OP(DDP_DECLARE_UNARY)
#undef DDP_DECLARE_UNARY
Tensor unary(UnaryOp op, const Tensor& x);

// Binary with broadcasting and type promotion: add, sub, mul, div, maximum, minimum.
#define DDP_DECLARE_BINARY(name, ...)                  \
  Tensor name(const Tensor& a, const Tensor& b);       \
  Tensor name(const Tensor& a, double b);
DDP_FOR_EACH_BINARY_OP(DDP_DECLARE_BINARY)
#undef DDP_DECLARE_BINARY
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& x, double exponent);  // composite; integer and real exponents

// Comparisons with broadcasting, result bool: eq, ne, lt, le, gt, ge.
#define DDP_DECLARE_COMPARE(name, ...)                 \
  Tensor name(const Tensor& a, const Tensor& b);       \
  Tensor name(const Tensor& a, double b);
DDP_FOR_EACH_COMPARE_OP(DDP_DECLARE_COMPARE)
#undef DDP_DECLARE_COMPARE

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- reductions --------------------------------------------------------
// dims empty = all dims. Negative dims count from the end.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Unbiased by default (correction = 1) like torch.var.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
Tensor max(const Tensor& x);  // all elements
Tensor min(const Tensor& x);
struct ValuesIndices { Tensor values, indices; };
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums x down to shape (the reverse of broadcasting); used by backward formulas.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra ----------------------------------------------------
// matmul: 1-D/2-D/batched with broadcasting of batch dims like torch.matmul.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);  // [B,M,K] x [B,K,N]

// ---- softmax -----------------------------------------------------------
Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

// ---- creation ----------------------------------------------------------
Tensor zeros_like(const Tensor& x);
Tensor ones_like(const Tensor& x);
Tensor full_like(const Tensor& x, double value);
Tensor empty_like(const Tensor& x);
Tensor arange(double start, double end, double step = 1.0, TensorOptions opts = DType::i64);
Tensor arange(int64_t end, TensorOptions opts = DType::i64);
// Seeded random numbers; see Note [Counter-based RNG].
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts = {},
               Generator* gen = nullptr);
Tensor normal(const Shape& shape, double mean, double stddev, TensorOptions opts = {},
              Generator* gen = nullptr);
void uniform_(Tensor& t, double low, double high, Generator* gen = nullptr);
void normal_(Tensor& t, double mean, double stddev, Generator* gen = nullptr);

// ---- joining and indexing ----------------------------------------------
Tensor cat(const Tensors& xs, int64_t dim = 0);
Tensor stack(const Tensors& xs, int64_t dim = 0);
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Returns a copy of x with src added at index along dim (out-of-place).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// i64 one-hot along a new last dim; num_classes = -1 infers max + 1.
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);

// ---- operators ---------------------------------------------------------
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }

// True when shapes, dtypes match and all |a-b| <= atol + rtol*|b| (on the host).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// Largest |a - b| / max(|b|, tiny) over elements, computed in f64 on the host.
double max_rel_error(const Tensor& a, const Tensor& b);
double max_abs_error(const Tensor& a, const Tensor& b);

}  // namespace ddp
