#pragma once
// Image transforms that a DataLoader runs in its workers on each example's
// input, in order, after the dataset has read it: Normalize, RandomCrop (with
// zero padding) and RandomHorizontalFlip, the CIFAR/Fashion-MNIST training
// recipe. Inputs are f32 [C, H, W] (what the image datasets produce).
//
// Note [Per-example random streams]
// A random transform draws from a SampleRng keyed by (loader seed, epoch,
// dataset index), never from a shared generator: the crop and flip of an
// example do not depend on which worker thread handled it or when, so a run
// gives the same batches with 0, 1 or 8 workers, and each epoch draws anew.
// Transforms of one example draw from one stream in order.
//
// Usage:
//   std::vector<data::TransformPtr> aug = {
//       std::make_shared<data::RandomCrop>(28, 4),
//       std::make_shared<data::RandomHorizontalFlip>(0.5),
//       std::make_shared<data::Normalize>(std::vector<float>{0.2860f},
//       std::vector<float>{0.3530f})};

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ddp/tensor/generator.h"
#include "ddp/tensor/tensor.h"

namespace ddp::data {

// Random numbers for one example. See Note [Per-example random streams].
class SampleRng {
 public:
  SampleRng(uint64_t seed, int64_t epoch, int64_t index);
  uint32_t next_u32();
  double uniform();                         // [0, 1), 53 bits
  int64_t integer(int64_t lo, int64_t hi);  // uniform in [lo, hi]

 private:
  uint64_t key_, counter_;
  uint32_t words_[4] = {};
  int used_ = 4;
};

class Transform {
 public:
  virtual ~Transform() = default;
  virtual std::string describe() const = 0;
  // The shape of an output for an input of `shape`; ShapeError (naming the
  // transform and the shape) when the transform cannot take it. The loader
  // calls it once, when it is built.
  virtual Shape output_shape(const Shape& shape) const = 0;
  // Writes the transformed `in` (f32, contiguous, of in_shape) to `out`
  // (f32, contiguous, of output_shape(in_shape)); in and out never overlap.
  virtual void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const = 0;
};
using TransformPtr = std::shared_ptr<const Transform>;

// out[c] = (in[c] - mean[c]) / std[c] per channel (dim 0). One value applies
// to every channel. ValueError for empty, mismatched or zero std.
class Normalize final : public Transform {
 public:
  Normalize(std::vector<float> mean, std::vector<float> std);
  std::string describe() const override;
  Shape output_shape(const Shape& shape) const override;
  void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const override;

 private:
  std::vector<float> mean_, std_;
};

// Pads H and W by `padding` on each side with `fill`, then cuts a random
// height x width window (torchvision's RandomCrop(size, padding)). The
// offsets are uniform over every window that fits.
class RandomCrop final : public Transform {
 public:
  RandomCrop(int64_t size, int64_t padding = 0, float fill = 0.0f);
  RandomCrop(int64_t height, int64_t width, int64_t padding, float fill = 0.0f);
  std::string describe() const override;
  Shape output_shape(const Shape& shape) const override;
  void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const override;

 private:
  int64_t h_, w_, pad_;
  float fill_;
};

// Mirrors W with probability p.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  std::string describe() const override;
  Shape output_shape(const Shape& shape) const override;
  void apply(const float* in, const Shape& in_shape, float* out, SampleRng& rng) const override;

 private:
  double p_;
};

}  // namespace ddp::data
