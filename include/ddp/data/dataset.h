#pragma once
// data::Dataset: a random-access collection of examples (torch.utils.data's
// map-style Dataset). Each example is an input tensor and a target (a class
// index as a 0-dim i64, or a tensor such as the next-token window), and every
// example of a dataset has the same shapes and dtypes: its ExampleSpec.
//
// Note [Reading into the batch]
// A DataLoader batch is one [B, ...] buffer, and a dataset writes example i
// straight into its row through read(i, input, target): no tensor, vector or
// heap block per example, which is what makes a 2-core loader cheap. get(i)
// is the convenience form that allocates one example's tensors. read() is
// const and called from several worker threads at once, so datasets hold
// their data immutably (loaded in the constructor, memory-mapped, or computed
// from the index).
//
// Usage:
//   auto train = std::make_shared<data::MnistDataset>("/usr/share/datasets/fashion-mnist",
//                                                     data::Split::train);
//   data::Example e = train->get(0);   // e.input f32 [1, 28, 28], e.target i64 []

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "ddp/tensor/tensor.h"

namespace ddp::data {

class SampleRng;  // transforms.h

enum class Split { train, test };

// Shapes and dtypes of one example; a batch prepends the batch dimension.
struct ExampleSpec {
  Shape input_shape;
  DType input_dtype = DType::f32;
  bool has_target = true;  // false: examples are inputs only (target undefined)
  Shape target_shape;      // {} for a class index
  DType target_dtype = DType::i64;

  size_t input_bytes() const {
    return size_t(shape_numel(input_shape)) * element_size(input_dtype);
  }
  size_t target_bytes() const {
    return has_target ? size_t(shape_numel(target_shape)) * element_size(target_dtype) : 0;
  }
  std::string describe() const;  // "input f32[1, 28, 28], target i64[]"
};

struct Example {
  Tensor input;
  Tensor target;  // undefined when the dataset has no targets
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  // Number of examples (len(dataset)).
  virtual int64_t size() const = 0;
  const ExampleSpec& spec() const { return spec_; }
  // What the dataset reads, for messages: "MnistDataset(/data/train-images-idx3-ubyte.gz)".
  virtual std::string describe() const = 0;

  // Writes example `index` into `input` (spec().input_bytes() bytes) and
  // `target` (spec().target_bytes() bytes; ignored without targets), in the
  // spec's dtypes, contiguous. IndexError for an index outside [0, size()).
  // Thread-safe. See Note [Reading into the batch].
  void read(int64_t index, void* input, void* target) const;
  // The same for a loader: datasets whose examples are random (the image
  // datasets crop while decoding) draw from `rng`, the example's stream
  // (Note [Per-example random streams]); the others ignore it.
  void read(int64_t index, void* input, void* target, SampleRng& rng) const;
  // One example as freshly allocated CPU tensors.
  Example get(int64_t index) const;

 protected:
  explicit Dataset(ExampleSpec spec) : spec_(std::move(spec)) {}
  // For datasets that learn their shapes while loading, in their constructor.
  void set_spec(ExampleSpec spec) { spec_ = std::move(spec); }
  // read() has checked the index.
  virtual void do_read(int64_t index, void* input, void* target) const = 0;
  // Random datasets override this; do_read() then uses a fixed stream.
  virtual void do_read_random(int64_t index, void* input, void* target, SampleRng& rng) const {
    do_read(index, input, target);
  }

 private:
  void check_index(int64_t index) const;
  ExampleSpec spec_;
};

using DatasetPtr = std::shared_ptr<const Dataset>;

// The examples at `indices`, stacked into input [B, ...] and target [B, ...]
// CPU tensors (default_collate). A dataset without targets gives an
// undefined target.
Example collate(const Dataset& dataset, std::span<const int64_t> indices);

}  // namespace ddp::data
