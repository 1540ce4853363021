// The crop, resize, flip and normalisation of GPU-decoded images
// (image_crop.h): the CPU pipeline's resample_rgb (src/data/image_resample.cpp)
// and write_output (src/data/image_transform.cpp) as two kernels.
//   horizontal pass: one thread per (image, input row, output column), the
//     three channels summed in 22-bit fixed point and rounded to 8 bits into
//     the scratch, as PIL does;
//   vertical pass: one thread per (image, output pixel): the column sum,
//     rounded, mirrored when the image is flipped, then u8 as is or through
//     the [3][256] normalisation table (the CPU pipeline's own values) to
//     f32 or bf16 (round to nearest even, as BFloat16(float) does).

#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda_check.h"
#include "cuda/common.cuh"
#include "cuda/image_crop.h"

namespace ddp::cuda_kernels {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // as image_resample.cpp

__device__ __forceinline__ uint8_t clip8(int v) {
  if (v >= (1 << kPrecisionBits << 8)) return 255;
  if (v <= 0) return 0;
  return uint8_t(v >> kPrecisionBits);
}

__global__ void crop_horizontal_kernel(ImageCropBatch b) {
  const ImageCropJob& job = b.jobs[blockIdx.y];
  if (!job.src) return;
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= int64_t(job.rows) * b.size) return;
  const int r = int(t / b.size), i = int(t % b.size);
  const uint8_t* in = job.src + int64_t(job.y0 + job.row_begin + r) * job.pitch +
                      int64_t(job.x0 + b.table[job.h_first + i]) * 3;
  const int32_t* k = b.table + job.h_weights + int64_t(i) * job.hk;
  const int n = b.table[job.h_count + i];
  int s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  for (int j = 0; j < n; ++j, in += 3) {
    s0 += in[0] * k[j];
    s1 += in[1] * k[j];
    s2 += in[2] * k[j];
  }
  uint8_t* o = b.tmp + job.tmp + t * 3;
  o[0] = clip8(s0);
  o[1] = clip8(s1);
  o[2] = clip8(s2);
}

__global__ void crop_vertical_kernel(ImageCropBatch b) {
  const ImageCropJob& job = b.jobs[blockIdx.y];
  if (!job.src) return;
  const int n = b.size;
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= int64_t(n) * n) return;
  const int y = int(t / n), x = int(t % n);
  const int sx = job.flip ? n - 1 - x : x;
  const int32_t* k = b.table + job.v_weights + int64_t(y) * job.vk;
  const int first = b.table[job.v_first + y] - job.row_begin;
  const int count = b.table[job.v_count + y];
  int acc[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
  const uint8_t* col = b.tmp + job.tmp + int64_t(sx) * 3;
  for (int j = 0; j < count; ++j) {
    const uint8_t* p = col + int64_t(first + j) * n * 3;
    acc[0] += p[0] * k[j];
    acc[1] += p[1] * k[j];
    acc[2] += p[2] * k[j];
  }
  const int64_t plane = int64_t(n) * n;
  for (int c = 0; c < 3; ++c) {
    const uint8_t v = clip8(acc[c]);
    const int64_t at = b.chw ? (int64_t(job.row) * 3 + c) * plane + int64_t(y) * n + x
                             : ((int64_t(job.row) * n + y) * n + x) * 3 + c;
    switch (b.dtype) {
      case ImageCropOut::u8:
        static_cast<uint8_t*>(b.out)[at] = v;
        break;
      case ImageCropOut::f32:
        static_cast<float*>(b.out)[at] = b.lut[c * 256 + v];
        break;
      case ImageCropOut::bf16:
        static_cast<__nv_bfloat16*>(b.out)[at] = __float2bfloat16_rn(b.lut[c * 256 + v]);
        break;
    }
  }
}

}  // namespace

void image_crop_resize(const ImageCropBatch& batch, cuda::Stream stream) {
  if (batch.images == 0 || batch.size == 0) return;
  const int64_t hwork = int64_t(batch.max_rows) * batch.size;
  const int64_t vwork = int64_t(batch.size) * batch.size;
  if (hwork > 0) {
    const dim3 grid(unsigned((hwork + kThreads - 1) / kThreads), unsigned(batch.images));
    crop_horizontal_kernel<<<grid, kThreads, 0, native(stream)>>>(batch);
    DDP_CUDA_CHECK_LAUNCH("crop_horizontal_kernel");
  }
  const dim3 grid(unsigned((vwork + kThreads - 1) / kThreads), unsigned(batch.images));
  crop_vertical_kernel<<<grid, kThreads, 0, native(stream)>>>(batch);
  DDP_CUDA_CHECK_LAUNCH("crop_vertical_kernel");
}

}  // namespace ddp::cuda_kernels
