#pragma once
// The counter behind ddp::nn::functional::layout_conversion_count() (Note
// [Layout conversion count] in include/ddp/nn/functional/layout_conversions.h),
// kept in the tensor layer so that the kernels that convert a layout (the
// cuDNN convolution's weight copies) count themselves without including
// the nn layer.

#include <cstdint>

namespace ddp::layout_stats {

void count_conversion();
int64_t conversions();

}  // namespace ddp::layout_stats
