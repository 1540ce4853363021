#pragma once
// Internal: decoding a batch of JPEGs on the GPU, with the image transforms
// (Note [Decoding on the GPU] in src/data/device_decode.cpp). The one
// implementation is nvJPEG's (device_jpeg_nvjpeg.cpp, built only with
// DDP_WITH_NVJPEG and CUDA); DeviceDecodeLoader (ddp/data/device_decode.h)
// is its user.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddp/data/image_transform.h"
#include "ddp/tensor/cuda.h"

namespace ddp::data::detail {

// One image: its encoded bytes, its plan (drawn by the CPU pipeline's
// plan_crop) and the batch row it goes to.
struct DeviceJpegItem {
  std::span<const uint8_t> bytes;
  int64_t width = 0, height = 0;  // from the header
  CropPlan plan;
  int64_t row = 0;
};

class DeviceJpegDecoder {
 public:
  virtual ~DeviceJpegDecoder() = default;
  // Decodes the items at full size and writes their transformed pixels into
  // their rows of `out` (a contiguous CUDA tensor [B, ...t.output_shape()]
  // of t.dtype), queuing the work on `stream`. Returns the rows it did not
  // write (an image nvJPEG cannot decode: CMYK, an unsupported or corrupt
  // stream), which the caller fills itself.
  virtual std::vector<int64_t> decode(std::span<const DeviceJpegItem> items,
                                      const ImageTransform& t, const Tensor& out,
                                      cuda::Stream stream) = 0;
};

// Loads libnvjpeg if not yet loaded (Note [Loading nvJPEG] in
// device_jpeg_nvjpeg.cpp) and describes it: "nvJPEG 13.0.4
// (/path/libnvjpeg.so.13)". Needs no GPU. DeviceError naming what to
// install when it cannot be loaded.
std::string nvjpeg_library();

// nvJPEG's decoder on CUDA device `device`, loading libnvjpeg on first use.
// DeviceError naming what to install when it cannot be loaded.
std::unique_ptr<DeviceJpegDecoder> make_nvjpeg_decoder(int device);

}  // namespace ddp::data::detail
