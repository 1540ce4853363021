#pragma once
// Internal: the device half of decoding JPEGs on the GPU
// (src/data/device_jpeg_nvjpeg.cpp, Note [Decoding on the GPU]): the crop,
// PIL's antialiased bilinear resize, the flip and ToTensor + Normalize of a
// batch of decoded RGB images, written into the rows of one batch. The
// resampling tables are computed on the host by the CPU pipeline's own
// function (bilinear_axis, src/data/image_resample.h) and the kernels repeat
// its fixed-point arithmetic (Note [PIL's resampling]), so for the same
// decoded pixels the output equals the CPU pipeline's bit for bit.

#include <cstdint>

#include "ddp/tensor/cuda.h"

namespace ddp::cuda_kernels {

// One image of the batch. Offsets index ImageCropBatch::table (int32).
struct ImageCropJob {
  const uint8_t* src = nullptr;  // interleaved RGB at full size; null: the row is skipped
  int64_t pitch = 0;             // bytes per row of src
  int x0 = 0, y0 = 0;            // image pixel of the axes' input sample 0
  int row_begin = 0, rows = 0;   // input rows the vertical pass reads, from y0 + row_begin
  int hk = 0, vk = 0;            // kernel sizes of the two axes
  int64_t h_first = 0, h_count = 0, h_weights = 0;  // size entries, size * hk weights
  int64_t v_first = 0, v_count = 0, v_weights = 0;
  int64_t tmp = 0;  // byte offset of the image's horizontal-pass rows (rows x size x 3)
  int flip = 0;
  int row = 0;  // the batch row written
};

enum class ImageCropOut { u8, f32, bf16 };

struct ImageCropBatch {
  int images = 0;
  int size = 0;                        // the output is size x size
  int max_rows = 0;                    // the largest ImageCropJob::rows
  const ImageCropJob* jobs = nullptr;  // device memory, `images` entries
  const int32_t* table = nullptr;      // device memory
  const float* lut = nullptr;          // device memory, [3][256]: (v / 255 - mean) / std
  uint8_t* tmp = nullptr;              // device scratch
  void* out = nullptr;                 // [B, 3, size, size] or [B, size, size, 3]
  ImageCropOut dtype = ImageCropOut::f32;
  bool chw = true;
};

// Queues the two resampling passes and the output writes on `stream`.
void image_crop_resize(const ImageCropBatch& batch, cuda::Stream stream);

}  // namespace ddp::cuda_kernels
