// Image transforms (transforms.h). See Note [Per-example random streams].

#include "ddp/data/transforms.h"

#include <algorithm>
#include <cstring>

#include "data/data_util.h"

namespace ddp::data {

// ---- SampleRng ------------------------------------------------------------------

SampleRng::SampleRng(uint64_t seed, int64_t epoch, int64_t index)
    : key_(detail::mix_key(detail::mix_key(seed ^ 0x7A45F0ull, uint64_t(epoch)), uint64_t(index))),
      counter_(0) {}

uint32_t SampleRng::next_u32() {
  if (used_ == 4) {
    Philox4x32::draw(key_, counter_++, words_);
    used_ = 0;
  }
  return words_[used_++];
}

double SampleRng::uniform() {
  const uint32_t hi = next_u32(), lo = next_u32();
  return Philox4x32::to_unit_double(hi, lo);
}

int64_t SampleRng::integer(int64_t lo, int64_t hi) {
  DDP_CHECK(lo <= hi, "SampleRng::integer: empty range [{}, {}]", lo, hi);
  const uint64_t bits = (uint64_t(next_u32()) << 32) | next_u32();
  return lo + int64_t(detail::below(bits, uint64_t(hi - lo) + 1));
}

// ---- shape checks --------------------------------------------------------------

static void check_chw(const std::string& who, const Shape& shape) {
  if (shape.size() != 3 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1)
    DDP_THROW(ShapeError, "{}: expects an image [C, H, W], got input shape {}", who,
              shape_str(shape));
}

// ---- Normalize -------------------------------------------------------------------

Normalize::Normalize(std::vector<float> mean, std::vector<float> std)
    : mean_(std::move(mean)), std_(std::move(std)) {
  DDP_CHECK(!mean_.empty() && mean_.size() == std_.size(),
            "Normalize: mean has {} values and std {}; they must match and not be empty",
            mean_.size(), std_.size());
  for (float s : std_) DDP_CHECK(s != 0.0f, "Normalize: std {} contains a zero", std_);
}

std::string Normalize::describe() const {
  return fmt::format("Normalize(mean={}, std={})", mean_, std_);
}

Shape Normalize::output_shape(const Shape& shape) const {
  if (shape.empty() || shape[0] < 1)
    DDP_THROW(ShapeError, "{}: expects channels first, got input shape {}", describe(),
              shape_str(shape));
  if (mean_.size() != 1 && int64_t(mean_.size()) != shape[0])
    DDP_THROW(ShapeError, "{}: {} channel values for an input of shape {} ({} channels)",
              describe(), mean_.size(), shape_str(shape), shape[0]);
  return shape;
}

void Normalize::apply(const float* in, const Shape& in_shape, float* out, SampleRng&) const {
  const int64_t c = in_shape[0], plane = shape_numel(in_shape) / c;
  for (int64_t ch = 0; ch < c; ++ch) {
    const size_t k = mean_.size() == 1 ? 0 : size_t(ch);
    // (x - mean) / std as torchvision computes it; a multiply by 1/std would
    // differ in the last bit.
    const float m = mean_[k], s = std_[k];
    const float* src = in + ch * plane;
    float* dst = out + ch * plane;
    for (int64_t i = 0; i < plane; ++i) dst[i] = (src[i] - m) / s;
  }
}

// ---- RandomCrop ------------------------------------------------------------------

RandomCrop::RandomCrop(int64_t size, int64_t padding, float fill)
    : RandomCrop(size, size, padding, fill) {}

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding, float fill)
    : h_(height), w_(width), pad_(padding), fill_(fill) {
  DDP_CHECK(height >= 1 && width >= 1, "RandomCrop: size {}x{} must be positive", height, width);
  DDP_CHECK(padding >= 0, "RandomCrop: padding {} < 0", padding);
}

std::string RandomCrop::describe() const {
  return fmt::format("RandomCrop(size=[{}, {}], padding={})", h_, w_, pad_);
}

Shape RandomCrop::output_shape(const Shape& shape) const {
  check_chw(describe(), shape);
  if (shape[1] + 2 * pad_ < h_ || shape[2] + 2 * pad_ < w_)
    DDP_THROW(ShapeError, "{}: the padded input {}x{} is smaller than the crop", describe(),
              shape[1] + 2 * pad_, shape[2] + 2 * pad_);
  return {shape[0], h_, w_};
}

void RandomCrop::apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const {
  const int64_t c = in_shape[0], h = in_shape[1], w = in_shape[2];
  // The window's top-left corner in padded coordinates, then in the input's.
  const int64_t top = rng.integer(0, h + 2 * pad_ - h_) - pad_;
  const int64_t left = rng.integer(0, w + 2 * pad_ - w_) - pad_;
  // Columns [x0, x1) of each output row come from the input; the rest is fill.
  const int64_t x0 = std::clamp<int64_t>(-left, 0, w_), x1 = std::clamp<int64_t>(w - left, x0, w_);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t y = 0; y < h_; ++y) {
      float* dst = out + (ch * h_ + y) * w_;
      const int64_t sy = top + y;
      if (sy < 0 || sy >= h) {
        std::fill(dst, dst + w_, fill_);
        continue;
      }
      std::fill(dst, dst + x0, fill_);
      if (x1 > x0)
        std::memcpy(dst + x0, in + (ch * h + sy) * w + left + x0, size_t(x1 - x0) * sizeof(float));
      std::fill(dst + x1, dst + w_, fill_);
    }
  }
}

// ---- RandomHorizontalFlip ----------------------------------------------------------

RandomHorizontalFlip::RandomHorizontalFlip(double p) : p_(p) {
  DDP_CHECK(p >= 0.0 && p <= 1.0, "RandomHorizontalFlip: p {} is not in [0, 1]", p);
}

std::string RandomHorizontalFlip::describe() const {
  return fmt::format("RandomHorizontalFlip(p={})", p_);
}

Shape RandomHorizontalFlip::output_shape(const Shape& shape) const {
  check_chw(describe(), shape);
  return shape;
}

void RandomHorizontalFlip::apply(const float* in, const Shape& in_shape, float* out,
                                 SampleRng& rng) const {
  const int64_t n = shape_numel(in_shape), w = in_shape[2];
  // Always draw, so the streams of later transforms do not depend on p.
  if (!(rng.uniform() < p_)) {
    std::memcpy(out, in, size_t(n) * sizeof(float));
    return;
  }
  for (int64_t row = 0; row < n; row += w) std::reverse_copy(in + row, in + row + w, out + row);
}

}  // namespace ddp::data
