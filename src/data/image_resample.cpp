// PIL-compatible antialiased bilinear resizing (image_resample.h).
//
// Note [PIL's resampling]
// torchvision's Resize and RandomResizedCrop on a PIL image call
// Image.resize(BILINEAR), which is a separable convolution, not a 2x2
// interpolation: for an output sample centred at c (input coordinates) the
// triangle filter 1 - |t| is stretched to a support of max(1, scale) samples
// each side (scale = input span / output samples), so shrinking averages
// every input pixel that falls under the output pixel. Weights are
// normalised to sum to 1, stored as integers scaled by 2^22 (rounded half
// away from zero), sums start at 2^21 (rounding) and are shifted back and
// clipped to 0..255. The horizontal pass runs first and its result is
// rounded to 8 bits before the vertical pass. Doing exactly this gives PIL's
// pixels, not merely close ones; any other order or rounding differs by one
// or two levels on many pixels.

#include "data/image_resample.h"

#include <algorithm>
#include <cmath>

namespace ddp::data::detail {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

inline double triangle(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

inline uint8_t clip8(int v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return uint8_t(v >> kPrecisionBits);
}

}  // namespace

int ResampleAxis::input_begin() const {
  int b = first.empty() ? 0 : first[0];
  for (int f : first) b = std::min(b, f);
  return b;
}

int ResampleAxis::input_end() const {
  int e = 0;
  for (size_t i = 0; i < first.size(); ++i) e = std::max(e, first[i] + count[i]);
  return e;
}

ResampleAxis bilinear_axis(int in_size, double b0, double b1, int out_size, int lo, int hi) {
  ResampleAxis a;
  const double scale = (b1 - b0) / out_size;
  const double filterscale = std::max(1.0, scale);
  const double support = 1.0 * filterscale;  // the triangle's support is 1
  a.ksize = int(std::ceil(support)) * 2 + 1;
  a.lo = lo;
  const int n = hi - lo;
  a.first.resize(size_t(n));
  a.count.resize(size_t(n));
  a.weights.assign(size_t(n) * size_t(a.ksize), 0);
  std::vector<double> k(size_t(a.ksize));
  for (int i = 0; i < n; ++i) {
    const int xx = lo + i;
    const double center = b0 + (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    // PIL truncates toward zero after adding 0.5 (a rounding for the
    // non-negative values that matter).
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      const double w = triangle((x + xmin - center + 0.5) * ss);
      k[size_t(x)] = w;
      ww += w;
    }
    int32_t* kk = a.weights.data() + size_t(i) * size_t(a.ksize);
    for (int x = 0; x < xmax; ++x) {
      const double w = ww != 0.0 ? k[size_t(x)] / ww : k[size_t(x)];
      kk[x] = w < 0 ? int32_t(-0.5 + w * (1 << kPrecisionBits))
                    : int32_t(0.5 + w * (1 << kPrecisionBits));
    }
    a.first[size_t(i)] = xmin;
    a.count[size_t(i)] = std::max(0, xmax);
  }
  return a;
}

void resample_rgb(const DecodedRegion& src, int x_origin, int y_origin, const ResampleAxis& h,
                  const ResampleAxis& v, uint8_t* out) {
  const int ow = h.size(), oh = v.size();
  const int row_begin = v.input_begin(), row_end = v.input_end();
  // Horizontal pass over only the rows the vertical pass reads.
  std::vector<uint8_t> tmp(size_t(std::max(0, row_end - row_begin)) * size_t(ow) * 3);
  for (int y = row_begin; y < row_end; ++y) {
    const uint8_t* in = src.at(x_origin, y_origin + y);
    uint8_t* t = tmp.data() + size_t(y - row_begin) * size_t(ow) * 3;
    for (int i = 0; i < ow; ++i) {
      const int32_t* k = h.weights.data() + size_t(i) * size_t(h.ksize);
      const uint8_t* p = in + size_t(h.first[size_t(i)]) * 3;
      int s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int j = 0, n = h.count[size_t(i)]; j < n; ++j, p += 3) {
        s0 += p[0] * k[j];
        s1 += p[1] * k[j];
        s2 += p[2] * k[j];
      }
      t[3 * i] = clip8(s0);
      t[3 * i + 1] = clip8(s1);
      t[3 * i + 2] = clip8(s2);
    }
  }
  // Vertical pass, a row of output at a time, accumulating whole rows so the
  // inner loop runs along memory.
  std::vector<int> acc(size_t(ow) * 3);
  for (int o = 0; o < oh; ++o) {
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    const int32_t* k = v.weights.data() + size_t(o) * size_t(v.ksize);
    for (int j = 0, n = v.count[size_t(o)]; j < n; ++j) {
      const uint8_t* t = tmp.data() + size_t(v.first[size_t(o)] + j - row_begin) * size_t(ow) * 3;
      const int w = k[j];
      for (int c = 0; c < ow * 3; ++c) acc[size_t(c)] += t[c] * w;
    }
    uint8_t* dst = out + size_t(o) * size_t(ow) * 3;
    for (int c = 0; c < ow * 3; ++c) dst[c] = clip8(acc[size_t(c)]);
  }
}

}  // namespace ddp::data::detail
