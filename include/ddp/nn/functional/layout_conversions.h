#pragma once
// A process-wide count of layout conversions in conv2d, batch_norm and max_pool2d.

#include <cstdint>

namespace ddp::nn::functional {

// Note [Layout conversion count]
// How many activations and gradients conv2d, batch_norm and max_pool2d
// (forward and backward) have copied from one layout to another (NCHW <->
// NHWC, or a strided view to a dense one) since the process started: a
// channels-last model whose ops all keep the layout makes none after its
// input, while an NCHW f32 model on the CPU makes four per convolution (Note
// [NCHW convolutions on the CPU]). conv2d counts its weight copies too: a
// weight that is neither contiguous nor channels-last, and a weight layout
// no cuDNN engine takes (Note [cuDNN convolution]). max_pool2d converts an NHWC input only on
// CUDA (four copies per call, forward and backward). Process-wide, for tests
// and profiling.
int64_t layout_conversion_count();
namespace detail {
void count_layout_conversion();
}

}  // namespace ddp::nn::functional
