// nvJPEG's batch decoder with the image transforms on the GPU (device_jpeg.h).
// Built only with CUDA and nvJPEG's header (DDP_WITH_NVJPEG, cmake/DdpNvjpeg.cmake);
// the library itself is opened at first use (Note [Loading nvJPEG]).

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <glob.h>
#include <nvjpeg.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "core/cuda_check.h"
#include "cuda/image_crop.h"
#include "cuda/on_device.h"
#include "data/device_jpeg.h"
#include "data/image_resample.h"
#include "ddp/core/env.h"
#include "ddp/core/logging.h"
#include "tensor/device_guard.h"

namespace ddp::data::detail {

namespace {

namespace fs = std::filesystem;

// Note [Loading nvJPEG]
// libddp does not link libnvjpeg: nvjpeg.h gives the types and prototypes,
// and the functions are looked up with dlsym when a DeviceDecodeLoader is
// first made, so a program that never decodes on the GPU neither needs nor
// loads the library (GPU libraries are loaded when first used), and a
// machine without it fails with a message saying what to install rather than
// at start-up. libnvjpeg.so.<major of the header> is looked for, in order:
// DDP_NVJPEG_LIBRARY (a path; then nowhere else), the dynamic linker's path
// (LD_LIBRARY_PATH, libddp's RUNPATH, ldconfig), the folder of the CUDA
// runtime libddp loaded and its wheel siblings (PyTorch's pip wheels:
// site-packages/nvidia/cu13/lib, or nvidia/nvjpeg/lib for CUDA 12's), the
// wheel the build found the header in, the usual site-packages of pip
// (system, VIRTUAL_ENV, CONDA_PREFIX) and the CUDA toolkit. The first that
// opens and has every function wins.
struct NvjpegApi {
  std::string path;
  int major = 0, minor = 0, patch = 0;
  decltype(&nvjpegGetProperty) get_property = nullptr;
  decltype(&nvjpegCreateEx) create_ex = nullptr;
  decltype(&nvjpegDestroy) destroy = nullptr;
  decltype(&nvjpegJpegStateCreate) state_create = nullptr;
  decltype(&nvjpegJpegStateDestroy) state_destroy = nullptr;
  decltype(&nvjpegGetImageInfo) get_image_info = nullptr;
  decltype(&nvjpegDecode) decode = nullptr;
  decltype(&nvjpegDecodeBatchedInitialize) batched_init = nullptr;
  decltype(&nvjpegDecodeBatched) batched = nullptr;
};

const std::string kSoname = "libnvjpeg.so." + std::to_string(NVJPEG_VER_MAJOR);
const std::string kInstall = fmt::format(
    "install nvJPEG {0} (pip install 'nvidia-nvjpeg=={0}.*', the wheel beside "
    "PyTorch's nvidia-* wheels, or the CUDA toolkit's libnvjpeg), or set "
    "DDP_NVJPEG_LIBRARY to the path of {1}",
    NVJPEG_VER_MAJOR, kSoname);

const char* status_name(nvjpegStatus_t s) {
  switch (s) {
    case NVJPEG_STATUS_SUCCESS:
      return "NVJPEG_STATUS_SUCCESS";
    case NVJPEG_STATUS_NOT_INITIALIZED:
      return "NVJPEG_STATUS_NOT_INITIALIZED";
    case NVJPEG_STATUS_INVALID_PARAMETER:
      return "NVJPEG_STATUS_INVALID_PARAMETER";
    case NVJPEG_STATUS_BAD_JPEG:
      return "NVJPEG_STATUS_BAD_JPEG";
    case NVJPEG_STATUS_JPEG_NOT_SUPPORTED:
      return "NVJPEG_STATUS_JPEG_NOT_SUPPORTED";
    case NVJPEG_STATUS_ALLOCATOR_FAILURE:
      return "NVJPEG_STATUS_ALLOCATOR_FAILURE";
    case NVJPEG_STATUS_EXECUTION_FAILED:
      return "NVJPEG_STATUS_EXECUTION_FAILED";
    case NVJPEG_STATUS_ARCH_MISMATCH:
      return "NVJPEG_STATUS_ARCH_MISMATCH";
    case NVJPEG_STATUS_INTERNAL_ERROR:
      return "NVJPEG_STATUS_INTERNAL_ERROR";
    case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED:
      return "NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED";
    case NVJPEG_STATUS_INCOMPLETE_BITSTREAM:
      return "NVJPEG_STATUS_INCOMPLETE_BITSTREAM";
    default:
      return "unknown nvjpegStatus_t";
  }
}

void check(nvjpegStatus_t s, const char* what) {
  if (s != NVJPEG_STATUS_SUCCESS)
    DDP_THROW(DeviceError, "nvJPEG: {} failed: {} ({})", what, status_name(s), int(s));
}

std::vector<std::string> candidates() {
  std::vector<std::string> c{kSoname};
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cudaRuntimeGetVersion), &info) && info.dli_fname) {
    const fs::path dir = fs::path(info.dli_fname).parent_path();
    for (const fs::path& d :
         {dir, dir / "../../nvjpeg/lib", dir / fmt::format("../../cu{}/lib", NVJPEG_VER_MAJOR)})
      c.push_back((d / kSoname).lexically_normal().string());
  }
#ifdef DDP_NVJPEG_BUILD_LIBRARY_DIR
  c.push_back(std::string(DDP_NVJPEG_BUILD_LIBRARY_DIR) + "/" + kSoname);
#endif
  std::vector<std::string> sites = {"/usr/local/lib/python3*/dist-packages",
                                    "/usr/lib/python3/dist-packages",
                                    "/usr/local/lib/python3*/site-packages"};
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* v = std::getenv(env))
      sites.push_back(std::string(v) + "/lib/python3*/site-packages");
  for (const std::string& site : sites)
    for (const std::string& sub :
         {fmt::format("nvidia/cu{}/lib", NVJPEG_VER_MAJOR), std::string("nvidia/nvjpeg/lib")}) {
      glob_t g{};
      if (glob((site + "/" + sub + "/" + kSoname).c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) c.emplace_back(g.gl_pathv[i]);
      globfree(&g);
    }
  if (const char* home = std::getenv("CUDA_HOME"))
    c.push_back(std::string(home) + "/lib64/" + kSoname);
  c.push_back("/usr/local/cuda/lib64/" + kSoname);
  return c;
}

// Opens the library at `path` into `api`; false with `why` set when it cannot.
bool open_api(const std::string& path, NvjpegApi& api, std::string& why) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    why = e ? e : "dlopen failed";
    return false;
  }
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn && ok) {
      ok = false;
      why = fmt::format("{} lacks {}", path, name);
    }
  };
  sym(api.get_property, "nvjpegGetProperty");
  sym(api.create_ex, "nvjpegCreateEx");
  sym(api.destroy, "nvjpegDestroy");
  sym(api.state_create, "nvjpegJpegStateCreate");
  sym(api.state_destroy, "nvjpegJpegStateDestroy");
  sym(api.get_image_info, "nvjpegGetImageInfo");
  sym(api.decode, "nvjpegDecode");
  sym(api.batched_init, "nvjpegDecodeBatchedInitialize");
  sym(api.batched, "nvjpegDecodeBatched");
  if (!ok) {
    dlclose(lib);
    return false;
  }
  char found[4096] = {};
  api.path = dlinfo(lib, RTLD_DI_ORIGIN, found) == 0 ? fs::path(found) / kSoname : fs::path(path);
  api.get_property(MAJOR_VERSION, &api.major);
  api.get_property(MINOR_VERSION, &api.minor);
  api.get_property(PATCH_LEVEL, &api.patch);
  return true;  // kept open for the life of the process
}

NvjpegApi load_api() {
  NvjpegApi api;
  std::string why;
  if (auto forced = env_string("DDP_NVJPEG_LIBRARY")) {
    if (!open_api(*forced, api, why))
      DDP_THROW(DeviceError, "nvJPEG: DDP_NVJPEG_LIBRARY={} cannot be loaded ({}); {}", *forced,
                why, kInstall);
    return api;
  }
  std::vector<std::string> tried;
  for (const std::string& path : candidates()) {
    if (std::find(tried.begin(), tried.end(), path) != tried.end()) continue;
    if (open_api(path, api, why)) return api;
    tried.push_back(path);
  }
  DDP_THROW(DeviceError, "nvJPEG: {} not found (tried {}; the last error: {}); {}", kSoname,
            fmt::join(tried, ", "), why, kInstall);
}

// Loaded once per process and never changed after (a failed load is retried
// by the next call, so installing the library fixes a long-running program).
// Never freed, like the library: a decoder destroyed during static
// destruction still finds its functions.
const NvjpegApi& api() {
  static std::mutex mu;
  static const NvjpegApi* loaded = nullptr;
  std::lock_guard<std::mutex> g(mu);
  if (!loaded) loaded = new NvjpegApi(load_api());
  return *loaded;
}

// The box [begin, begin + extent) of an axis resized to out_size, of which
// the window [window, window + size) is kept, at full size: image_transform.cpp's
// plan_axis at DCT scale 1, whose clamp origin is the box's start.
ResampleAxis full_size_axis(int64_t extent, int64_t out_size, int64_t window, int64_t size) {
  return bilinear_axis(int(extent), 0.0, double(extent), int(out_size), int(window),
                       int(window + size));
}

int64_t append(std::vector<int32_t>& table, const std::vector<int>& v) {
  const auto at = int64_t(table.size());
  table.insert(table.end(), v.begin(), v.end());
  return at;
}

class NvjpegDecoder final : public DeviceJpegDecoder {
 public:
  explicit NvjpegDecoder(int device) : api_(api()), device_(device) {
    CudaDeviceGuard guard(device_);
    check(api_.create_ex(NVJPEG_BACKEND_DEFAULT, nullptr, nullptr, 0, &handle_), "nvjpegCreateEx");
    check(api_.state_create(handle_, &batched_state_), "nvjpegJpegStateCreate");
  }
  ~NvjpegDecoder() override {
    CudaDeviceGuard guard(device_);
    for (nvjpegJpegState_t s : {batched_state_, single_state_})
      if (s && api_.state_destroy(s) != NVJPEG_STATUS_SUCCESS)
        DDP_LOG_WARNING("nvJPEG: nvjpegJpegStateDestroy failed");
    if (handle_ && api_.destroy(handle_) != NVJPEG_STATUS_SUCCESS)
      DDP_LOG_WARNING("nvJPEG: nvjpegDestroy failed");
  }

  std::vector<int64_t> decode(std::span<const DeviceJpegItem> items, const ImageTransform& t,
                              const Tensor& out, cuda::Stream stream) override;

 private:
  const NvjpegApi& api_;
  int device_;
  nvjpegHandle_t handle_ = nullptr;
  nvjpegJpegState_t batched_state_ = nullptr, single_state_ = nullptr;
  int batch_size_ = 0;  // the batched state's, 0 when it needs initialising
};

// Note [Decoding on the GPU] (src/data/device_decode.cpp) for what runs where.
std::vector<int64_t> NvjpegDecoder::decode(std::span<const DeviceJpegItem> items,
                                           const ImageTransform& t, const Tensor& out,
                                           cuda::Stream stream) {
  CudaDeviceGuard guard(device_);
  cuda::StreamGuard on_stream(stream);
  const int size = int(t.size);
  std::vector<int64_t> refused;
  // 1. Headers: nvJPEG takes 3-component (YCbCr) streams; greyscale and CMYK
  //    go to the CPU, as does a header nvJPEG reads differently.
  std::vector<const DeviceJpegItem*> todo;
  std::vector<size_t> offset;
  size_t total = 0;
  for (const DeviceJpegItem& it : items) {
    int comps = 0, w[NVJPEG_MAX_COMPONENT] = {}, h[NVJPEG_MAX_COMPONENT] = {};
    nvjpegChromaSubsampling_t css{};
    const nvjpegStatus_t s =
        api_.get_image_info(handle_, it.bytes.data(), it.bytes.size(), &comps, &css, w, h);
    if (s != NVJPEG_STATUS_SUCCESS || comps != 3 || css == NVJPEG_CSS_UNKNOWN || w[0] != it.width ||
        h[0] != it.height) {
      refused.push_back(it.row);
      continue;
    }
    todo.push_back(&it);
    offset.push_back(total);
    total += (size_t(w[0]) * size_t(h[0]) * 3 + 255) / 256 * 256;
  }
  if (todo.empty()) return refused;
  const auto n = int(todo.size());
  const Device dev = Device::cuda(device_);
  Tensor pixels = Tensor::empty({int64_t(total)}, TensorOptions(DType::u8).device(dev));
  auto* base = static_cast<uint8_t*>(pixels.data_ptr());
  const size_t count = todo.size();
  std::vector<const unsigned char*> data(count);
  std::vector<size_t> lengths(count);
  std::vector<nvjpegImage_t> dst(count);
  for (int i = 0; i < n; ++i) {
    data[size_t(i)] = todo[size_t(i)]->bytes.data();
    lengths[size_t(i)] = todo[size_t(i)]->bytes.size();
    dst[size_t(i)] = nvjpegImage_t{};
    dst[size_t(i)].channel[0] = base + offset[size_t(i)];
    dst[size_t(i)].pitch[0] = size_t(todo[size_t(i)]->width) * 3;
  }
  // 2. The batch in one call; when it fails, one image at a time, so that
  //    only the images nvJPEG refuses go to the CPU.
  std::vector<bool> decoded(count, true);
  if (batch_size_ != n) {
    check(api_.batched_init(handle_, batched_state_, n, 1, NVJPEG_OUTPUT_RGBI),
          "nvjpegDecodeBatchedInitialize");
    batch_size_ = n;
  }
  const nvjpegStatus_t s = api_.batched(handle_, batched_state_, data.data(), lengths.data(),
                                        dst.data(), cuda_kernels::native(stream));
  if (s != NVJPEG_STATUS_SUCCESS) {
    batch_size_ = 0;
    if (!single_state_) check(api_.state_create(handle_, &single_state_), "nvjpegJpegStateCreate");
    for (int i = 0; i < n; ++i)
      if (api_.decode(handle_, single_state_, data[size_t(i)], lengths[size_t(i)],
                      NVJPEG_OUTPUT_RGBI, &dst[size_t(i)],
                      cuda_kernels::native(stream)) != NVJPEG_STATUS_SUCCESS) {
        decoded[size_t(i)] = false;
        refused.push_back(todo[size_t(i)]->row);
      }
  }
  // 3. The resampling tables (the CPU pipeline's), the normalisation table and
  //    the jobs, uploaded in one copy.
  std::vector<cuda_kernels::ImageCropJob> jobs;
  std::vector<int32_t> table;
  int64_t tmp_total = 0;
  int max_rows = 0;
  for (int i = 0; i < n; ++i) {
    if (!decoded[size_t(i)]) continue;
    const DeviceJpegItem& it = *todo[size_t(i)];
    const CropPlan& p = it.plan;
    DDP_CHECK(p.w >= 1 && p.h >= 1 && p.x >= 0 && p.y >= 0 && p.x + p.w <= it.width &&
                  p.y + p.h <= it.height && p.window_x >= 0 && p.window_y >= 0 &&
                  p.window_x + size <= p.resized_w && p.window_y + size <= p.resized_h,
              "nvJPEG decode: plan {}x{} at ({}, {}) -> {}x{} window ({}, {}) does not fit a "
              "{}x{} image",
              p.w, p.h, p.x, p.y, p.resized_w, p.resized_h, p.window_x, p.window_y, it.width,
              it.height);
    const ResampleAxis ax = full_size_axis(p.w, p.resized_w, p.window_x, size);
    const ResampleAxis ay = full_size_axis(p.h, p.resized_h, p.window_y, size);
    cuda_kernels::ImageCropJob j;
    j.src = dst[size_t(i)].channel[0];
    j.pitch = int64_t(dst[size_t(i)].pitch[0]);
    j.x0 = int(p.x);
    j.y0 = int(p.y);
    j.row_begin = ay.input_begin();
    j.rows = ay.input_end() - ay.input_begin();
    j.hk = ax.ksize;
    j.vk = ay.ksize;
    j.h_first = append(table, ax.first);
    j.h_count = append(table, ax.count);
    j.h_weights = int64_t(table.size());
    table.insert(table.end(), ax.weights.begin(), ax.weights.end());
    j.v_first = append(table, ay.first);
    j.v_count = append(table, ay.count);
    j.v_weights = int64_t(table.size());
    table.insert(table.end(), ay.weights.begin(), ay.weights.end());
    j.tmp = tmp_total;
    tmp_total += int64_t(j.rows) * size * 3;
    j.flip = p.flip ? 1 : 0;
    j.row = int(it.row);
    max_rows = std::max(max_rows, j.rows);
    jobs.push_back(j);
  }
  if (jobs.empty()) return refused;
  float lut[3][256];  // as write_output (image_transform.cpp) computes it
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) lut[c][v] = (float(v) / 255.0f - t.mean[c]) / t.std[c];
  const size_t jobs_bytes = (jobs.size() * sizeof(jobs[0]) + 255) / 256 * 256;
  const size_t table_bytes = (table.size() * sizeof(int32_t) + 255) / 256 * 256;
  Tensor blob_host = Tensor::empty({int64_t(jobs_bytes + table_bytes + sizeof(lut))}, DType::u8);
  auto* h = static_cast<uint8_t*>(blob_host.data_ptr());
  std::memcpy(h, jobs.data(), jobs.size() * sizeof(jobs[0]));
  std::memcpy(h + jobs_bytes, table.data(), table.size() * sizeof(int32_t));
  std::memcpy(h + jobs_bytes + table_bytes, lut, sizeof(lut));
  const Tensor blob = blob_host.to(dev, /*non_blocking=*/true);  // staged through pinned memory
  const Tensor tmp =
      Tensor::empty({std::max<int64_t>(tmp_total, 1)}, TensorOptions(DType::u8).device(dev));
  auto* d = static_cast<uint8_t*>(blob.data_ptr());
  cuda_kernels::ImageCropBatch b;
  b.images = int(jobs.size());
  b.size = size;
  b.max_rows = max_rows;
  b.jobs = reinterpret_cast<const cuda_kernels::ImageCropJob*>(d);
  b.table = reinterpret_cast<const int32_t*>(d + jobs_bytes);
  b.lut = reinterpret_cast<const float*>(d + jobs_bytes + table_bytes);
  b.tmp = static_cast<uint8_t*>(tmp.data_ptr());
  b.out = out.data_ptr();
  b.dtype = t.dtype == DType::u8    ? cuda_kernels::ImageCropOut::u8
            : t.dtype == DType::f32 ? cuda_kernels::ImageCropOut::f32
                                    : cuda_kernels::ImageCropOut::bf16;
  b.chw = t.layout == ImageLayout::chw;
  cuda_kernels::image_crop_resize(b, stream);
  // pixels, blob and tmp go back to the caching allocator on `stream`, which
  // hands them out again only to work queued after these kernels.
  return refused;
}

}  // namespace

std::string nvjpeg_library() {
  const NvjpegApi& a = api();
  return fmt::format("nvJPEG {}.{}.{} ({})", a.major, a.minor, a.patch, a.path);
}

std::unique_ptr<DeviceJpegDecoder> make_nvjpeg_decoder(int device) {
  return std::make_unique<NvjpegDecoder>(device);
}

}  // namespace ddp::data::detail

// Looked up by name from libddp.so, whose DeviceDecodeLoader uses them (Note
// [Loading CUDA when first used] in src/tensor/cuda_runtime.h).
extern "C" ddp::data::detail::DeviceJpegDecoder* ddp_make_nvjpeg_decoder(int device) {
  return ddp::data::detail::make_nvjpeg_decoder(device).release();
}
extern "C" void ddp_nvjpeg_library(std::string* out) { *out = ddp::data::detail::nvjpeg_library(); }
