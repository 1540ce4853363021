#pragma once
// Memory formats: the channels-last test and conversion, and new tensors
// laid out like existing ones (src/tensor/memory_format.cpp).

#include <vector>

#include "ddp/tensor/tensor.h"

namespace ddp {

// The layout Module::to(MemoryFormat) gives a model's 4-D parameters and
// buffers: contiguous (NCHW, [O, I, KH, KW]) or channels_last (NHWC
// strides, like torch.channels_last). See Note [Channels-last tensors].
enum class MemoryFormat { contiguous, channels_last };

// Note [Channels-last tensors]
// Memory format is not a property of ddp::Tensor; it is read off the strides,
// as torch does: a 4-D tensor whose strides are those of a contiguous
// [N, H, W, C] tensor permuted to [N, C, H, W] is "channels last" (NHWC).
// conv2d, batch_norm and max_pool2d accept both layouts and give their output
// (and the input's gradient) the input's layout, so a model fed NHWC tensors
// stays NHWC, which is what lets cuDNN use tensor cores for f16/bf16.
// to_channels_last() converts. A tensor that is both (H = W = 1, or C = 1)
// is treated as NCHW, except a 1-channel tensor that to_channels_last()
// made (channel stride 1), so that a grayscale input keeps a channels-last
// model NHWC. (Also ddp::nn::functional's names, include/ddp/nn/functional/conv.h.)
bool is_channels_last(const Tensor& t);
// A copy with NHWC strides (differentiable); t itself when already so.
Tensor to_channels_last(const Tensor& t);
// An uninitialised [N, C, H, W] tensor, NHWC-strided when channels_last.
Tensor empty_nchw(const Shape& shape, DType dtype, Device device, bool channels_last);

// Note [Memory-format propagation]
// A new tensor made from existing ones (an elementwise result, a cast, a
// clone, a gradient) keeps the memory order of its dense input, as torch's
// preserve_format does: a channels-last [N, C, H, W] activation gives a
// channels-last result, so a channels-last model never pays a reorder
// between its convolutions. "Dense" means non-overlapping with no gaps (a
// permutation of a contiguous tensor); an expanded, sliced or strided view
// decides nothing. Among several inputs, the first one with the result's
// shape that is dense decides (a contiguous first input keeps the result
// contiguous, like torch's TensorIterator); broadcast inputs never decide.
//
// true and *strides = like's dim order applied to like's own shape when like
// is dense; false (strides untouched) otherwise.
bool dense_layout_strides(const Tensor& like, Shape* strides);
// An uninitialised tensor of `shape` laid out like the first dense tensor
// in `like` that has that shape; contiguous when none has.
Tensor empty_in_layout_of(const std::vector<Tensor>& like, const Shape& shape,
                          TensorOptions opts);

}  // namespace ddp
