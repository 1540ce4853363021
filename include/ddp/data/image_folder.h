#pragma once
// Photographs as training data: ImageFolderDataset reads an ImageNet-style
// folder (torchvision's ImageFolder), PackedImageDataset (packed_images.h)
// the same images packed into memory-mapped shards. Both decode and transform
// each example in the loader's worker (image_transform.h), so an example is
// a normalised [3, 224, 224] crop and its class index.
//
// Usage:
//   auto train = std::make_shared<data::ImageFolderDataset>(
//       "/data/imagenet/train", data::ImageTransform::imagenet_train());
//   data::DataLoader loader(train, {.batch_size = 256, .num_workers = 8,
//                                   .seed = 1, .device = dev});
//   loader.set_epoch(epoch);  // new crops and flips every epoch
//
// Note [ImageFolder semantics]
// As torchvision's ImageFolder: the classes are the sub-folders of the root,
// sorted by name (byte order), class i being the i-th; the samples of a class
// are the files anywhere below its folder (symbolic links followed), in
// sorted walk order, whose lower-cased name ends with one of the extensions
// (.jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp by default). A root
// without sub-folders, or a class without a single such file, is an IoError
// with torchvision's wording ("Couldn't find any class folder in ...",
// "Found no valid file for the classes ... Supported extensions are: ...").
// Only JPEG and PNG content is decoded (by content, whatever the extension);
// any other file is reported as a bad image when read.

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "ddp/data/dataset.h"
#include "ddp/data/image_transform.h"

namespace ddp::data {

// What reading an undecodable image (corrupt, truncated, not JPEG/PNG) does.
enum class BadImagePolicy {
  raise,  // IoError naming the file (and record)
  skip,   // counted, logged once per image, and the next example is read instead
};

// Datasets of encoded images with the transforms: what ImageFolderDataset and
// PackedImageDataset share.
class EncodedImageDataset : public Dataset {
 public:
  const ImageTransform& transform() const { return transform_; }
  const std::vector<std::string>& classes() const { return classes_; }
  int64_t num_classes() const { return int64_t(classes_.size()); }
  virtual int64_t label(int64_t index) const = 0;
  // The bad images met so far (BadImagePolicy::skip): how many, and their
  // error messages (which name them).
  int64_t bad_count() const;
  std::vector<std::string> bad_images() const;
  // The encoded bytes and the name of an example, for a decoder elsewhere
  // (DeviceDecodeLoader, ddp/data/device_decode.h).
  std::span<const uint8_t> encoded_bytes(int64_t index, std::vector<uint8_t>& buffer) const {
    return encoded(index, buffer);
  }
  std::string name_of(int64_t index) const { return example_name(index); }

 protected:
  EncodedImageDataset(ImageTransform transform, BadImagePolicy policy,
                      std::vector<std::string> classes);
  // The encoded bytes of example `index`: a view into the dataset's own
  // memory, or into `buffer` which it filled. IoError when unreadable.
  virtual std::span<const uint8_t> encoded(int64_t index, std::vector<uint8_t>& buffer) const = 0;
  // The example for messages: its path, or file and record.
  virtual std::string example_name(int64_t index) const = 0;

 private:
  void do_read(int64_t index, void* input, void* target) const override;
  void do_read_random(int64_t index, void* input, void* target, SampleRng& rng) const override;
  void note_bad(const std::string& what) const;

  ImageTransform transform_;
  BadImagePolicy policy_;
  std::vector<std::string> classes_;
  mutable std::mutex bad_mu_;
  mutable std::vector<std::string> bad_;
};

struct ImageFolderOptions {
  // Lower-case name endings that make a file a sample (torchvision's IMG_EXTENSIONS).
  std::vector<std::string> extensions = {".jpg", ".jpeg", ".png", ".ppm", ".bmp",
                                         ".pgm", ".tif",  ".tiff", ".webp"};
  BadImagePolicy bad_images = BadImagePolicy::raise;
  // A held-out part of a flat class folder (no train/val split): with
  // holdout_every = k > 0, the samples whose position within their class is
  // k - 1 modulo k form the held-out part. Which part the dataset holds:
  enum class Part { all, rest, held_out } part = Part::all;
  int64_t holdout_every = 0;
};

class ImageFolderDataset final : public EncodedImageDataset {
 public:
  // Lists the classes and samples (Note [ImageFolder semantics]); no image
  // is opened yet. IoError for a missing root, no class folder, or a class
  // without images; ValueError for bad transform options.
  explicit ImageFolderDataset(const std::string& root,
                              ImageTransform transform = ImageTransform::imagenet_train(),
                              ImageFolderOptions options = {});

  struct Sample {
    std::string path;
    int64_t label;
  };
  int64_t size() const override { return int64_t(samples_.size()); }
  std::string describe() const override;
  int64_t label(int64_t index) const override { return samples_.at(size_t(index)).label; }
  const std::vector<Sample>& samples() const { return samples_; }
  const std::string& root() const { return root_; }

 private:
  std::span<const uint8_t> encoded(int64_t index, std::vector<uint8_t>& buffer) const override;
  std::string example_name(int64_t index) const override { return samples_[size_t(index)].path; }
  std::string root_;
  std::vector<Sample> samples_;
};

// torchvision's class listing alone: the sorted sub-folders of `root`.
std::vector<std::string> find_image_classes(const std::string& root);

}  // namespace ddp::data
