#pragma once
// Internal helpers shared by the ops frontend (src/ops/*.cpp): argument
// checks that raise the right ddp::Error subclass, broadcasting, dtype
// promotion for scalar operands, and unchecked kernels that backward formulas
// reuse. Not installed; nothing outside src/ops includes it.
//
// Note [Kernels run on detached inputs]
// A primitive op calls its Backend kernel on detach()ed (or freshly cast,
// expanded, made-contiguous) copies of its inputs and records its backward
// once, against the caller's original tensors. So whatever the view and cast
// helpers of Tensor do about autograd, a primitive op records exactly one
// node, and the gradients it returns have each input's own shape and dtype.

#include <cstdint>
#include <vector>

#include "ddp/autograd/node.h"
#include "ddp/tensor/backend.h"
#include "ddp/tensor/memory_format.h"
#include "ddp/tensor/ops.h"

namespace ddp::ops_detail {

// ValueError naming the op and argument when t is undefined.
void check_defined(const char* op, const Tensor& t, const char* arg);
// DeviceError naming both tensors when they live on different devices.
void check_same_device(const char* op, const Tensor& a, const Tensor& b);
void check_same_device(const char* op, const Tensors& xs);
// ShapeError when an op's output would exceed the backends' kMaxDims.
void check_max_dims(const char* op, const Shape& shape);

// The broadcast of two shapes; ok = false when they do not broadcast.
Shape broadcast_shape(const Shape& a, const Shape& b, bool* ok);
// The broadcast of a's and b's shapes, or ShapeError naming both tensors.
Shape broadcast_shapes(const char* op, const Tensor& a, const Tensor& b);
// t itself when it already has the shape, else a stride-0 expand() view.
Tensor expand_to(const Tensor& t, const Shape& shape);
// t itself when it already has the dtype, else a converted copy (detached).
Tensor cast_to(const Tensor& t, DType dtype);

// Note [Scalar operands]
// A double operand of a binary op behaves like torch's Python scalars: it
// takes the tensor's dtype when that is floating, or when it is integral and
// the value is a whole number (bool tensors then become i64); a fractional
// value with an integral tensor gives f32.
DType scalar_operand_dtype(DType tensor_dtype, double value);
// A 0-dim tensor holding value, ready to be broadcast with expand_to().
Tensor scalar_tensor(double value, DType dtype, Device device);

TensorOptions options(DType dtype, Device device);
// A contiguous output for op (checks kMaxDims); never requires grad.
Tensor empty_out(const char* op, const Shape& shape, DType dtype, Device device);
// The same, laid out like its inputs: see Note [Memory-format propagation]
// in memory_format.h (the first dense input with the output's shape decides).
Tensor empty_out(const char* op, const Shape& shape, DType dtype, Device device,
                 const Tensors& inputs);

// Wraps and sorts dims, rejecting duplicates (ValueError) and out-of-range
// dims (IndexError). Empty = every dim. A 0-dim x accepts dim 0 / -1 and
// reduces nothing.
std::vector<int64_t> normalize_dims(const char* op, const Tensor& x,
                                    const std::vector<int64_t>& dims);

// Reads a one-element tensor on the host as int64.
int64_t host_int(const Tensor& t);
// The smallest and largest value of an integer tensor (numel > 0), read on
// the host; on CUDA each is a device reduction plus a small copy.
void host_min_max(const Tensor& t, int64_t* lo, int64_t* hi);
// Host copy of a tensor as doubles, row-major.
std::vector<double> host_doubles(const Tensor& t);

// Gradient of an input that was promoted to a wider dtype: cast back.
inline Tensor grad_as(const Tensor& g, DType input_dtype) {
  return g.defined() ? cast_to(g, input_dtype) : g;
}

// x with the sorted `dims` moved last, made contiguous and viewed as
// [rows, cols] for Backend::reduce_rows. keep_shape is x's shape with the
// reduced dims set to 1, drop_shape without them. When x already lies with
// the reduced dims outermost (a bias gradient's sum over the batch, an NHWC
// tensor's sum over N, H, W), rows2d is left undefined and cols2d is the
// copy-free [cols, rows] view for Backend::reduce_cols instead.
struct RowsView {
  Tensor rows2d;
  Tensor cols2d;
  int64_t rows = 1, cols = 1;
  Shape keep_shape, drop_shape;
};
RowsView as_rows(const Tensor& x, const std::vector<int64_t>& dims);
// Runs the reduction of rv into out1d ([rows]): reduce_rows or reduce_cols.
void reduce_view(Backend& be, ReductionOp op, const RowsView& rv, const Tensor& out1d);

// Sum of x over sorted dims, shaped as out_shape (keep_shape or drop_shape
// of as_rows, or any shape with that numel); integers and bool sum to i64.
// Records its own backward. Shared by sum() and sum_to().
Tensor sum_into(const char* op, const Tensor& x, const std::vector<int64_t>& dims,
                const Shape& out_shape);

// gather / scatter_add without argument checks (the caller guarantees the
// backend's contract); they record autograd like the public ops, so backward
// formulas can use them without a host sync for index range checks.
Tensor gather_unchecked(const Tensor& x, int64_t dim, const Tensor& index);
Tensor scatter_add_unchecked(const Tensor& x, int64_t dim, const Tensor& index,
                             const Tensor& src);

}  // namespace ddp::ops_detail
