#pragma once
// Internal: resizing 8-bit RGB with a triangle (bilinear) filter widened by
// the shrink factor, in the fixed-point arithmetic of PIL's Image.resize
// (BILINEAR, antialiased), so that a crop resized here equals torchvision's
// resized crop of a PIL image (Note [PIL's resampling]).

#include <cstdint>
#include <vector>

#include "data/image_codec.h"

namespace ddp::data::detail {

// One axis: output samples [lo, hi) of an axis resized to `out_size` samples
// from the box [b0, b1) of an input axis whose samples [0, in_size) may be
// read. Sample i reads count[i] inputs from first[i] with weights
// weights[i * ksize + j], 22-bit fixed point.
struct ResampleAxis {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
  int lo = 0;
  int size() const { return int(first.size()); }
  int input_begin() const;  // the first input sample any output reads
  int input_end() const;    // one past the last
};
ResampleAxis bilinear_axis(int in_size, double b0, double b1, int out_size, int lo, int hi);

// Resizes the part of `src` at [x_origin, ...) x [y_origin, ...) (scaled-
// image coordinates; the axes' input sample 0) into out (h.size() columns x
// v.size() rows, RGB): the horizontal pass first, rounded to 8 bits, then the
// vertical one, as PIL does.
void resample_rgb(const DecodedRegion& src, int x_origin, int y_origin, const ResampleAxis& h,
                  const ResampleAxis& v, uint8_t* out);

}  // namespace ddp::data::detail
