#pragma once
// Decoding the image datasets' JPEGs on the GPU with nvJPEG: a loader that
// delivers the same batches as a DataLoader over an ImageFolderDataset or a
// PackedImageDataset with a CUDA device (the same crops and flips, drawn from
// the same per-example streams), but decodes, crops, resizes and normalises
// on the GPU. The CPU pipeline stays the default; this is the opt-in
// (parse_decode_device reads a program's --decode-device cpu|cuda). Needs
// libddp built with nvJPEG (DDP_WITH_NVJPEG, docs/data.md), libnvjpeg at run
// time and a GPU.
//
// Usage:
//   auto train = std::make_shared<data::ImageFolderDataset>(root,
//                                                           data::ImageTransform::imagenet_train());
//   data::DeviceDecodeLoader loader(train, {.batch_size = 256, .num_workers = 4, .seed = 1,
//                                           .device = Device::cuda(rank)}, sampler);
//   loader.set_epoch(epoch);
//   for (const data::Batch& b : loader) step(b.input, b.target);  // on the GPU
//
// What differs from the CPU pipeline (Note [Decoding on the GPU] in
// src/data/device_decode.cpp): JPEGs are decoded at full size (the
// transform's dct_scaling is not used) by nvJPEG, whose IDCT and chroma
// upsampling differ slightly from libjpeg's, so pixels are close to the CPU
// pipeline's (docs/data.md gives the bound), not equal; PNG, greyscale and
// CMYK JPEGs and anything nvJPEG refuses are decoded on the CPU as before.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ddp/data/data_loader.h"
#include "ddp/data/image_folder.h"

namespace ddp::data {

// Where the image datasets' examples are decoded: "cpu" (the default) or
// "cuda". ValueError for anything else.
enum class DecodeDevice { cpu, cuda };
DecodeDevice parse_decode_device(const std::string& name);

// Whether this libddp was built with nvJPEG (DDP_WITH_NVJPEG).
bool device_decode_built();
// Why device decoding cannot run on cuda:`device` here, or "" when it can:
// libddp built without nvJPEG, libnvjpeg not found (the message names what
// to install), or no usable GPU. Loads libnvjpeg when built with it.
std::string device_decode_unavailable_reason(int device = 0);

class DeviceDecodeLoader {
 public:
  // opts as for DataLoader; opts.device must be a CUDA device and
  // opts.pin_memory is not used. ValueError for a null dataset or a CPU
  // device (and DataLoader's option checks); DeviceError, saying what is
  // missing, when device decoding is unavailable
  // (device_decode_unavailable_reason).
  DeviceDecodeLoader(std::shared_ptr<const EncodedImageDataset> dataset, LoaderOptions opts,
                     std::shared_ptr<Sampler> sampler = nullptr);
  ~DeviceDecodeLoader();  // never throws
  DeviceDecodeLoader(const DeviceDecodeLoader&) = delete;
  DeviceDecodeLoader& operator=(const DeviceDecodeLoader&) = delete;

  // As DataLoader's.
  void set_epoch(int64_t epoch);
  int64_t epoch() const;
  int64_t size() const;
  const Shape& input_shape() const;  // of a batch row: the transform's output shape
  const EncodedImageDataset& dataset() const { return *dataset_; }
  const LoaderOptions& options() const { return opts_; }
  // The workers' reading and crop drawing (not the GPU's decoding).
  LoaderStats stats() const;
  // Images decoded on the CPU so far (PNG, greyscale, CMYK, refused by nvJPEG).
  int64_t cpu_decoded() const { return cpu_decoded_; }
  std::string describe() const;  // the decoder and library in use

  void start();
  // The next batch, on opts.device (input of the transform's dtype and
  // layout, target i64), ready for the caller's current stream.
  std::optional<Batch> next();

  using Iterator = BatchIterator<DeviceDecodeLoader>;  // range-for; begin() calls start()
  Iterator begin();
  Iterator end() { return Iterator(); }

 private:
  struct State;
  std::shared_ptr<const EncodedImageDataset> dataset_;
  LoaderOptions opts_;
  std::unique_ptr<State> state_;
  int64_t pass_epoch_ = 0;
  int64_t cpu_decoded_ = 0;
};

}  // namespace ddp::data
