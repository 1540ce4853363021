// DeviceDecodeLoader (ddp/data/device_decode.h): the image datasets' JPEGs
// decoded on the GPU.
//
// Note [Decoding on the GPU]
// The CPU pipeline decodes and transforms each example in a loader worker
// (Note [Reading into the batch]). Here the work is split where the GPU can
// take it:
// - the workers of an inner DataLoader (same sampler, seed and per-example
//   streams, Note [Per-example random streams]) read each example's bytes
//   and draw its crop with the CPU pipeline's plan_crop, from the header's
//   size: the crops and flips are those the CPU pipeline would draw. A batch
//   row of that loader is the plan and a ticket for the bytes, parked in a
//   stash until the consumer takes them;
// - next() hands the batch's JPEGs to nvJPEG (nvjpegDecodeBatched, full
//   size, interleaved RGB, on the loader's own stream), then two kernels
//   (kernels/cuda/image_crop.cu) crop, resize with the CPU pipeline's own
//   resampling tables and fixed-point arithmetic (Note [PIL's resampling]),
//   flip and normalise into the batch, NCHW or channels-last, u8, f32 or
//   bf16. An event makes the caller's current stream wait, as the
//   DataLoader's copies do (Note [Loader device copies]);
// - what nvJPEG is not given or refuses (PNG, greyscale and CMYK JPEGs,
//   unreadable or corrupt files) is decoded by the CPU pipeline itself,
//   from the example's fresh stream, so it equals the CPU loader's row, bad
//   image policy included, and is copied into its row.
// The pixels therefore differ from the CPU pipeline's only through the
// decoder: nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's (islow
// IDCT, fancy upsampling), and DCT-scaled decoding (Note [DCT-scaled
// decoding]) is not used. docs/data.md gives the tolerance the GPU test
// asserts. The bytes of a batch are kept until the next batch, after the
// event of the batch that read them has completed, in case nvJPEG reads them
// asynchronously.

#include "ddp/data/device_decode.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "data/device_jpeg.h"
#include "core/cuda_library.h"
#include "data/image_codec.h"
#include "ddp/core/logging.h"
#include "ddp/tensor/cuda.h"

namespace ddp::data {

namespace {

// A plan row: ticket (-1: the CPU decodes it), width, height, then the CropPlan.
constexpr int64_t kPlanFields = 12;

const char* const kNotBuilt =
    "libddp was built without nvJPEG: install it (pip install 'nvidia-nvjpeg==13.*'; "
    "tools/install_deps.sh does) and reconfigure a CUDA build with -DDDP_WITH_NVJPEG=ON "
    "(docs/data.md)";

#ifdef DDP_HAVE_NVJPEG
// The nvJPEG decoder lives in libddp_cuda.so (Note [Loading CUDA when first
// used] in src/tensor/cuda_runtime.h).
void* nvjpeg_entry(const char* name) {
  std::string why;
  void* fn = ddp::detail::cuda_library_symbol(name, &why);
  if (!fn) DDP_THROW(DeviceError, "the nvJPEG decoder is in libddp_cuda.so: {}", why);
  return fn;
}

std::string nvjpeg_library() {
  std::string out;
  reinterpret_cast<void (*)(std::string*)>(nvjpeg_entry("ddp_nvjpeg_library"))(&out);
  return out;
}

std::unique_ptr<detail::DeviceJpegDecoder> make_nvjpeg_decoder(int device) {
  using Make = detail::DeviceJpegDecoder* (*)(int);
  return std::unique_ptr<detail::DeviceJpegDecoder>(
      reinterpret_cast<Make>(nvjpeg_entry("ddp_make_nvjpeg_decoder"))(device));
}
#endif

Shape with_batch(int64_t b, const Shape& s) {
  Shape out{b};
  out.insert(out.end(), s.begin(), s.end());
  return out;
}

// The examples' plans and bytes: see Note [Decoding on the GPU].
class PlanDataset final : public Dataset {
 public:
  explicit PlanDataset(std::shared_ptr<const EncodedImageDataset> images)
      : Dataset(spec()), images_(std::move(images)) {}
  int64_t size() const override { return images_->size(); }
  std::string describe() const override { return "crop plans of " + images_->describe(); }

  static ExampleSpec spec() {
    ExampleSpec s;
    s.input_shape = {kPlanFields};
    s.input_dtype = DType::i64;
    return s;  // target: the label, i64 []
  }

  std::vector<uint8_t> take(int64_t ticket) const {
    std::lock_guard<std::mutex> g(mu_);
    auto it = stash_.find(ticket);
    DDP_CHECK(it != stash_.end(), "DeviceDecodeLoader: no bytes for ticket {}", ticket);
    std::vector<uint8_t> bytes = std::move(it->second);
    stash_.erase(it);
    return bytes;
  }
  void clear() const {
    std::lock_guard<std::mutex> g(mu_);
    stash_.clear();
  }

 private:
  void do_read(int64_t index, void* input, void* target) const override {
    SampleRng rng(0, 0, index);
    do_read_random(index, input, target, rng);
  }
  void do_read_random(int64_t index, void* input, void* target, SampleRng& rng) const override {
    auto* row = static_cast<int64_t*>(input);
    std::fill(row, row + kPlanFields, 0);
    row[0] = -1;
    if (target) *static_cast<int64_t*>(target) = images_->label(index);
    thread_local std::vector<uint8_t> buffer;
    try {
      const std::span<const uint8_t> bytes = images_->encoded_bytes(index, buffer);
      if (detail::sniff_image(bytes) != detail::ImageFormat::jpeg) return;
      const ImageDims d = image_dims(bytes, images_->name_of(index));
      const CropPlan p = plan_crop(images_->transform(), d.width, d.height, rng);
      const int64_t ticket = next_ticket_.fetch_add(1);
      {
        std::lock_guard<std::mutex> g(mu_);
        stash_[ticket].assign(bytes.begin(), bytes.end());
      }
      const int64_t fields[kPlanFields] = {ticket,      d.width,    d.height,   p.x,
                                           p.y,         p.w,        p.h,        p.resized_w,
                                           p.resized_h, p.window_x, p.window_y, p.flip ? 1 : 0};
      std::copy(fields, fields + kPlanFields, row);
    } catch (const IoError&) {
      // The CPU pipeline reads it again, and raises or skips as its policy says.
    }
  }

  std::shared_ptr<const EncodedImageDataset> images_;
  mutable std::atomic<int64_t> next_ticket_{0};
  mutable std::mutex mu_;
  mutable std::unordered_map<int64_t, std::vector<uint8_t>> stash_;
};

}  // namespace

struct DeviceDecodeLoader::State {
  std::shared_ptr<const PlanDataset> plans;
  std::unique_ptr<DataLoader> inner;
  std::unique_ptr<detail::DeviceJpegDecoder> decoder;
  std::string library;
  Shape input_shape;
  cuda::Stream stream;
  cuda::Event ready;                            // recorded on `stream` after each batch
  std::vector<std::vector<uint8_t>> in_flight;  // the last batch's bytes
  ~State() {
    inner.reset();  // joins the workers
    try {
      if (!in_flight.empty()) ready.synchronize();
      decoder.reset();
      if (stream.handle()) stream.destroy();
    } catch (const std::exception& e) {
      DDP_LOG_WARNING("DeviceDecodeLoader: releasing the decode stream failed: {}", e.what());
    }
  }
};

DecodeDevice parse_decode_device(const std::string& name) {
  if (name == "cpu") return DecodeDevice::cpu;
  if (name == "cuda") return DecodeDevice::cuda;
  DDP_THROW(ValueError, "decode device '{}' is not cpu or cuda", name);
}

bool device_decode_built() {
#ifdef DDP_HAVE_NVJPEG
  return true;
#else
  return false;
#endif
}

std::string device_decode_unavailable_reason(int device) {
#ifdef DDP_HAVE_NVJPEG
  try {
    (void)nvjpeg_library();
  } catch (const Error& e) {
    return e.what();
  }
#else
  return kNotBuilt;
#endif
  if (!cuda::is_available()) return "no usable GPU: " + cuda::unavailable_reason();
  if (device < 0 || device >= cuda::device_count())
    return fmt::format("cuda:{} does not exist ({} GPUs)", device, cuda::device_count());
  return "";
}

DeviceDecodeLoader::DeviceDecodeLoader(std::shared_ptr<const EncodedImageDataset> dataset,
                                       LoaderOptions opts, std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), opts_(opts), state_(std::make_unique<State>()) {
  DDP_CHECK(dataset_ != nullptr, "DeviceDecodeLoader: the dataset is null");
  DDP_CHECK(opts_.device.is_cuda(),
            "DeviceDecodeLoader: decodes on a GPU, so the device must be cuda:N, not {}",
            opts_.device.str());
  LoaderOptions inner = opts_;
  inner.device = Device::cpu();
  inner.pin_memory = false;
  auto plans = std::make_shared<const PlanDataset>(dataset_);
  state_->plans = plans;
  state_->input_shape = dataset_->transform().output_shape();
  state_->inner = std::make_unique<DataLoader>(plans, inner, std::move(sampler));
  const std::string why = device_decode_unavailable_reason(opts_.device.index);
  if (!why.empty())
    DDP_THROW(DeviceError, "DeviceDecodeLoader: cannot decode on {}: {}", opts_.device.str(), why);
#ifdef DDP_HAVE_NVJPEG
  state_->decoder = make_nvjpeg_decoder(opts_.device.index);
  state_->library = nvjpeg_library();
#endif
  state_->stream = cuda::Stream::create(opts_.device.index);
}

DeviceDecodeLoader::~DeviceDecodeLoader() = default;

void DeviceDecodeLoader::set_epoch(int64_t epoch) { state_->inner->set_epoch(epoch); }
int64_t DeviceDecodeLoader::epoch() const { return state_->inner->epoch(); }
int64_t DeviceDecodeLoader::size() const { return state_->inner->size(); }
const Shape& DeviceDecodeLoader::input_shape() const { return state_->input_shape; }
LoaderStats DeviceDecodeLoader::stats() const { return state_->inner->stats(); }

std::string DeviceDecodeLoader::describe() const {
  return fmt::format("{} on {}, decoded with {}", dataset_->describe(), opts_.device.str(),
                     state_->library);
}

void DeviceDecodeLoader::start() {
  state_->inner->start();
  pass_epoch_ = state_->inner->epoch();
}

std::optional<Batch> DeviceDecodeLoader::next() {
  State& s = *state_;
  std::optional<Batch> host = s.inner->next();
  if (!host) {
    // Every batch of the pass has been taken: what is left belongs to a pass
    // abandoned by start() (its workers may store bytes until they are joined).
    s.plans->clear();
    return std::nullopt;
  }
  const int64_t n = host->size();
  const ImageTransform& t = dataset_->transform();
  const Device dev = opts_.device;
  const auto* rows = static_cast<const int64_t*>(host->input.data_ptr());
  auto* labels = static_cast<int64_t*>(host->target.data_ptr());
  // The previous batch's bytes are released once its decode has run.
  if (!s.in_flight.empty()) s.ready.synchronize();
  s.in_flight.assign(size_t(n), {});
  std::vector<detail::DeviceJpegItem> items;
  std::vector<int64_t> on_cpu;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t* r = rows + k * kPlanFields;
    if (r[0] < 0) {
      on_cpu.push_back(k);
      continue;
    }
    s.in_flight[size_t(k)] = s.plans->take(r[0]);
    const CropPlan plan{.x = r[3],
                        .y = r[4],
                        .w = r[5],
                        .h = r[6],
                        .resized_w = r[7],
                        .resized_h = r[8],
                        .window_x = r[9],
                        .window_y = r[10],
                        .flip = r[11] != 0};
    items.push_back({s.in_flight[size_t(k)], r[1], r[2], plan, k});
  }
  Batch out;
  out.indices = std::move(host->indices);
  {
    cuda::StreamGuard guard(s.stream);
    out.input = Tensor::empty(with_batch(n, t.output_shape()), TensorOptions(t.dtype).device(dev));
    if (!items.empty()) {
      const std::vector<int64_t> refused = s.decoder->decode(items, t, out.input, s.stream);
      on_cpu.insert(on_cpu.end(), refused.begin(), refused.end());
    }
    if (!on_cpu.empty()) {
      // The CPU pipeline's own rows. See Note [Decoding on the GPU].
      const auto m = int64_t(on_cpu.size());
      Tensor cpu_rows = Tensor::empty(with_batch(m, t.output_shape()), t.dtype);
      const size_t row_bytes = dataset_->spec().input_bytes();
      for (int64_t j = 0; j < m; ++j) {
        const int64_t k = on_cpu[size_t(j)];
        SampleRng rng(opts_.seed, pass_epoch_, out.indices[size_t(k)]);
        dataset_->read(out.indices[size_t(k)],
                       static_cast<std::byte*>(cpu_rows.data_ptr()) + size_t(j) * row_bytes,
                       &labels[k], rng);
        out.input.narrow(0, k, 1).copy_(cpu_rows.narrow(0, j, 1), /*non_blocking=*/true);
      }
      cpu_decoded_ += m;
    }
    out.target = host->target.to(dev, /*non_blocking=*/true);
  }
  s.ready.record(s.stream);
  const cuda::Stream compute = cuda::current_stream(dev.index);
  s.ready.wait(compute);
  cuda::record_stream(out.input.storage().data(), compute);
  cuda::record_stream(out.target.storage().data(), compute);
  return out;
}

DeviceDecodeLoader::Iterator DeviceDecodeLoader::begin() {
  start();
  return Iterator(this);
}

}  // namespace ddp::data
