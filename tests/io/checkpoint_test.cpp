// Checkpoints: round trips, the layout on disk, resuming a CPU run bit for
// bit, damaged and mismatched checkpoints, and failed saves that must leave
// the previous checkpoint intact.
#include "ddp/io/checkpoint.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "ddp/io/json.h"
#include "ddp/io/safetensors.h"
#include "ddp/nn/nn.h"
#include "ddp/optim/lr_scheduler.h"
#include "ddp/optim/sgd.h"
#include "io/io_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::HasSubstr;
namespace F = nn::functional;

// Stands in for amp::GradScaler: a Stateful type of one's own.
struct FakeScaler {
  double scale = 65536.0;
  int64_t growth_tracker = 0;
  nn::TensorDict state_dict() const {
    return {{"scale", Tensor::scalar(scale, DType::f64)},
            {"growth_tracker", Tensor::scalar(double(growth_tracker), DType::i64)}};
  }
  void load_state_dict(const nn::TensorDict& d) {
    const Tensor* s = d.find("scale");
    const Tensor* g = d.find("growth_tracker");
    DDP_CHECK(s && g && d.size() == 2, "FakeScaler: bad state dict");
    scale = s->item<double>();
    growth_tracker = g->item<int64_t>();
  }
};
static_assert(io::Stateful<FakeScaler>);
static_assert(io::Stateful<nn::Module>);
static_assert(io::Stateful<optim::Optimizer>);
static_assert(io::Stateful<optim::LRScheduler>);
static_assert(!io::Stateful<int>);

std::shared_ptr<nn::Sequential> make_model(int64_t hidden = 16) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
      std::make_shared<nn::Linear>(4, hidden), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dropout>(0.3), std::make_shared<nn::Linear>(hidden, 1)});
}

// A model, its optimizer and scheduler, a scaler, and a checkpoint of all.
struct Trainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::WarmupCosineLR> sched;
  FakeScaler scaler;
  io::Checkpoint ckpt;

  explicit Trainer(uint64_t seed, int64_t hidden = 16) {
    manual_seed(seed);
    model = make_model(hidden);
    opt = std::make_unique<optim::SGD>(model->parameters(), 0.05,
                                       optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-4});
    sched = std::make_unique<optim::WarmupCosineLR>(
        *opt, 20, optim::WarmupCosineOptions{.warmup_steps = 3, .start_factor = 0.1});
    ckpt.add("model", model).add("optimizer", *opt).add("scaler", scaler).add("scheduler", *sched);
  }

  // One training step on batch `s` of a fixed data set; returns the loss.
  float train_step(int s) {
    Generator data(1000 + uint64_t(s));
    Tensor x = randn({8, 4}, {}, &data);
    Tensor y = randn({8, 1}, {}, &data);
    Tensor loss = F::mse_loss(model->forward(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
    sched->step();
    scaler.growth_tracker += 1;
    return loss.item<float>();
  }
};

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

bool same_state(const nn::TensorDict& a, const nn::TensorDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a)
    if (!b.contains(k) || !bitwise_equal(t, b.at(k))) return false;
  return true;
}

// An independent bitwise CRC-32 (zlib's), to check the manifest's.
uint32_t reference_crc32(const std::string& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
  }
  return ~c;
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.insert(e.path().filename().string());
  return out;
}

// ---- round trip and layout ------------------------------------------------------

TEST(Checkpoint, RoundTripRestoresEverySection) {
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  Trainer a(1);
  for (int s = 0; s < 4; ++s) a.train_step(s);
  a.scaler.scale = 1024.0;
  Generator extra(77);
  extra.reserve(1234);
  a.ckpt.add_generator("data", extra);
  const uint64_t offset = default_generator().offset();
  io::save_checkpoint(path, a.ckpt,
                      {.epoch = 2, .step = 4, .metadata = {{"arch", "mlp"}, {"note", "a \"b\""}}});

  Trainer b(2);
  Generator extra_b(5);
  b.ckpt.add_generator("data", extra_b);
  manual_seed(31337);
  io::CheckpointInfo info = io::load_checkpoint(path, b.ckpt);
  EXPECT_EQ(info.epoch, 2);
  EXPECT_EQ(info.step, 4);
  EXPECT_EQ(info.metadata, (io::Metadata{{"arch", "mlp"}, {"note", "a \"b\""}}));
  EXPECT_EQ(info.sections, (std::vector<std::string>{"model", "optimizer", "scaler", "scheduler"}));
  EXPECT_EQ(info.generators, (std::vector<std::string>{"default", "data"}));
  EXPECT_TRUE(same_state(b.model->state_dict(), a.model->state_dict()));
  EXPECT_TRUE(same_state(b.opt->state_dict(), a.opt->state_dict()));
  EXPECT_TRUE(same_state(b.sched->state_dict(), a.sched->state_dict()));
  EXPECT_EQ(b.scaler.scale, 1024.0);
  EXPECT_EQ(b.scaler.growth_tracker, 4);
  EXPECT_EQ(b.sched->last_step(), 4);
  EXPECT_EQ(default_generator().seed(), 1u);
  EXPECT_EQ(default_generator().offset(), offset);
  EXPECT_EQ(extra_b.seed(), 77u);
  EXPECT_EQ(extra_b.offset(), 1234u);
}

TEST(Checkpoint, LayoutOnDiskAndChecksums) {
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  Trainer a(1);
  a.train_step(0);
  io::save_checkpoint(path, a.ckpt, {.epoch = 0, .step = 1});
  EXPECT_EQ(
      files_in(path),
      (std::set<std::string>{"checkpoint.json", "model.g1.safetensors", "optimizer.g1.safetensors",
                             "scaler.g1.safetensors", "scheduler.g1.safetensors"}));
  // A section file is a plain safetensors file under the section's keys.
  nn::TensorDict model = io::load_safetensors(path + "/model.g1.safetensors");
  EXPECT_TRUE(same_state(model, a.model->state_dict()));

  std::string text = read_bytes(path + "/checkpoint.json");
  io::json::Value m = io::json::parse(text);
  EXPECT_EQ(m.find("format")->as_string(), "ddp.checkpoint");
  EXPECT_EQ(m.find("format_version")->as_uint64(), 1u);
  EXPECT_EQ(m.find("generation")->as_uint64(), 1u);
  EXPECT_EQ(m.find("step")->as_uint64(), 1u);
  const io::json::Value* gen = m.find("generators")->find("default");
  ASSERT_NE(gen, nullptr);
  EXPECT_EQ(gen->find("offset")->as_uint64(), default_generator().offset());
  for (const char* s : {"model", "optimizer", "scaler", "scheduler"}) {
    const io::json::Value* e = m.find("sections")->find(s);
    ASSERT_NE(e, nullptr) << s;
    std::string bytes = read_bytes(path + "/" + e->find("file")->as_string());
    EXPECT_EQ(e->find("bytes")->as_uint64(), bytes.size()) << s;
    EXPECT_EQ(e->find("crc32")->as_string(), fmt::format("{:08x}", reference_crc32(bytes))) << s;
  }
  EXPECT_EQ(reference_crc32("123456789"), 0xCBF43926u);  // the CRC-32 check value

  // The next save is generation 2 and removes generation 1.
  a.train_step(1);
  io::save_checkpoint(path, a.ckpt, {.step = 2});
  EXPECT_EQ(
      files_in(path),
      (std::set<std::string>{"checkpoint.json", "model.g2.safetensors", "optimizer.g2.safetensors",
                             "scaler.g2.safetensors", "scheduler.g2.safetensors"}));
  EXPECT_EQ(io::read_checkpoint_info(path).generation, 2u);
  EXPECT_EQ(io::read_checkpoint_info(path).step, 2);
}

TEST(Checkpoint, OnlyRankZeroWrites) {
  ScratchDir dir;
  Trainer a(1);
  io::save_checkpoint(dir.path("ckpt"), a.ckpt, {.rank = 3, .step = 1});
  EXPECT_FALSE(std::filesystem::exists(dir.path("ckpt")));
  io::save_checkpoint(dir.path("ckpt"), a.ckpt, {.rank = 0, .step = 1});
  EXPECT_TRUE(std::filesystem::exists(dir.path("ckpt/checkpoint.json")));
  // Every rank can load.
  Trainer b(2);
  EXPECT_EQ(io::load_checkpoint(dir.path("ckpt"), b.ckpt).step, 1);
}

// ---- resuming bit for bit ------------------------------------------------------------

// Trains 12 steps without stopping (checkpointing after step 5 on the way),
// then resumes fresh objects from that checkpoint: the losses of steps 6..12
// and the final parameters are exactly those of the run that never stopped.
TEST(Checkpoint, ResumingACpuRunContinuesBitForBit) {
  constexpr int kSteps = 12, kStop = 5;
  ScratchDir dir;
  const std::string path = dir.path("ckpt");
  Trainer a(1);
  std::vector<float> losses;
  for (int s = 0; s < kSteps; ++s) {
    losses.push_back(a.train_step(s));
    if (s + 1 == kStop) io::save_checkpoint(path, a.ckpt, {.epoch = 0, .step = kStop});
  }

  Trainer b(99);      // other initial weights
  manual_seed(4242);  // and another generator state
  io::CheckpointInfo info = io::load_checkpoint(path, b.ckpt);
  ASSERT_EQ(info.step, kStop);
  for (int s = int(info.step); s < kSteps; ++s)
    EXPECT_EQ(b.train_step(s), losses[size_t(s)]) << "step " << s + 1;
  nn::TensorDict pa = a.model->state_dict(), pb = b.model->state_dict();
  for (const auto& [k, t] : pa) EXPECT_TRUE(bitwise_equal(pb.at(k), t)) << k;
  EXPECT_TRUE(same_state(b.opt->state_dict(), a.opt->state_dict()));
  EXPECT_EQ(*b.opt->param_groups()[0].lr, *a.opt->param_groups()[0].lr);
  // Dropout made the generator matter: the resumed run without the
  // generator state diverges (so the test above can fail).
  Trainer c(99);
  io::Checkpoint no_gen(/*include_default_generator=*/false);
  no_gen.add("model", c.model).add("optimizer", *c.opt).add("scheduler", *c.sched);
  io::load_checkpoint(path, no_gen, {.strict = false});
  manual_seed(4242);
  EXPECT_NE(c.train_step(kStop), losses[kStop]);
}

// ---- checkpoints across memory layouts ---------------------------------------------

// A small convolutional model, contiguous or channels-last, with SGD and a
// checkpoint of both. Its input is fed in the model's layout.
struct ConvTrainer {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  io::Checkpoint ckpt;
  bool channels_last;

  ConvTrainer(uint64_t seed, bool channels_last_) : channels_last(channels_last_) {
    manual_seed(seed);
    model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
        std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1), std::make_shared<nn::ReLU>(),
        std::make_shared<nn::Conv2d>(8, 4, 3, 2, 1), std::make_shared<nn::Flatten>(),
        std::make_shared<nn::Linear>(4 * 3 * 3, 2)});
    if (channels_last) model->to(MemoryFormat::channels_last);
    opt = std::make_unique<optim::SGD>(model->parameters(), 0.05,
                                       optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-4});
    ckpt.add("model", model).add("optimizer", *opt);
  }
  float train_step(int s) {
    Generator data(2000 + uint64_t(s));
    Tensor x = randn({4, 3, 6, 6}, {}, &data);
    Tensor y = randn({4, 2}, {}, &data);
    if (channels_last) x = F::to_channels_last(x);
    Tensor loss = F::mse_loss(model->forward(x), y);
    opt->zero_grad();
    loss.backward();
    opt->step();
    return loss.item<float>();
  }
};

// Tensors are stored in logical order whatever their layout, so a run
// saved contiguous resumes channels-last (and the reverse) bit for bit, with
// the resumed model and optimizer state in the resuming model's layout.
TEST(Checkpoint, ResumingAcrossAMemoryLayoutChangeIsBitExact) {
  constexpr int kSteps = 8, kStop = 3;
  std::vector<float> losses;
  {
    ConvTrainer whole(1, false);
    for (int s = 0; s < kSteps; ++s) losses.push_back(whole.train_step(s));
  }
  for (bool saved_cl : {false, true}) {
    SCOPED_TRACE(saved_cl ? "saved channels-last, resumed contiguous"
                          : "saved contiguous, resumed channels-last");
    ScratchDir dir;
    const std::string path = dir.path("ckpt");
    ConvTrainer a(1, saved_cl);
    for (int s = 0; s < kStop; ++s) EXPECT_EQ(a.train_step(s), losses[size_t(s)]) << s;
    io::save_checkpoint(path, a.ckpt, {.step = kStop});
    // On disk: the logical values, contiguous.
    nn::TensorDict disk = io::load_safetensors(path + "/model.g1.safetensors");
    for (const auto& [k, t] : a.model->state_dict()) {
      ASSERT_TRUE(disk.contains(k)) << k;
      EXPECT_TRUE(disk.at(k).is_contiguous()) << k;
      EXPECT_EQ(disk.at(k).to_vector<float>(), t.to_vector<float>()) << k;
    }
    ConvTrainer b(99, !saved_cl);
    io::load_checkpoint(path, b.ckpt);
    for (const Tensor& p : b.model->parameters())
      if (p.dim() == 4) EXPECT_EQ(F::is_channels_last(p), !saved_cl) << p.describe();
    for (int s = kStop; s < kSteps; ++s) EXPECT_EQ(b.train_step(s), losses[size_t(s)]) << s;
    for (const auto& [k, t] : b.opt->state_dict())
      if (t.dim() == 4) EXPECT_EQ(F::is_channels_last(t), !saved_cl) << k;
  }
}

// ---- damaged and mismatched checkpoints ------------------------------------------------

struct Saved {
  ScratchDir dir;
  std::string path = dir.path("ckpt");
  Trainer a{1};
  Saved() {
    for (int s = 0; s < 3; ++s) a.train_step(s);
    io::save_checkpoint(path, a.ckpt, {.epoch = 1, .step = 3});
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

TEST(CheckpointBad, MissingDirectoryOrFile) {
  Saved s;
  Trainer b(2);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.dir.path("nope"), b.ckpt), IoError, "does not exist");
  EXPECT_THAT(last_error_message(), HasSubstr("nope/checkpoint.json"));
  std::filesystem::remove(s.file("scaler.g1.safetensors"));
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, b.ckpt), IoError, "scaler.g1.safetensors");
}

TEST(CheckpointBad, WrongFormatVersion) {
  Saved s;
  std::string text = read_bytes(s.file("checkpoint.json"));
  size_t at = text.find("\"format_version\": 1");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 19, "\"format_version\": 3");
  write_bytes(s.file("checkpoint.json"), text);
  Trainer b(2);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, b.ckpt), IoError,
                   "format_version 3 is not supported (this build reads versions 1 to 2)");
  EXPECT_THAT(last_error_message(), HasSubstr(s.file("checkpoint.json")));
}

TEST(CheckpointBad, TruncatedSectionFile) {
  Saved s;
  std::string bytes = read_bytes(s.file("optimizer.g1.safetensors"));
  write_bytes(s.file("optimizer.g1.safetensors"), bytes.substr(0, bytes.size() - 10));
  Trainer b(2);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, b.ckpt), IoError,
                   fmt::format("is {} bytes, the manifest records {} (truncated)",
                               bytes.size() - 10, bytes.size()));
  EXPECT_THAT(last_error_message(), HasSubstr("optimizer.g1.safetensors' (section 'optimizer')"));
}

TEST(CheckpointBad, TruncatedManifest) {
  Saved s;
  std::string text = read_bytes(s.file("checkpoint.json"));
  write_bytes(s.file("checkpoint.json"), text.substr(0, text.size() / 2));
  Trainer b(2);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, b.ckpt), IoError, "not valid JSON");
}

TEST(CheckpointBad, FlippedByteInASectionFile) {
  Saved s;
  std::string bytes = read_bytes(s.file("model.g1.safetensors"));
  bytes[bytes.size() - 3] ^= 0x10;  // in the last tensor's data
  write_bytes(s.file("model.g1.safetensors"), bytes);
  Trainer b(2);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, b.ckpt), IoError, "is corrupt: its CRC32 is");
  EXPECT_THAT(last_error_message(), HasSubstr("model.g1.safetensors' (section 'model')"));
}

TEST(CheckpointBad, FlippedByteInTheManifest) {
  Saved s;
  std::string text = read_bytes(s.file("checkpoint.json"));
  size_t at = text.find("\"epoch\": 1");
  ASSERT_NE(at, std::string::npos);
  text[at + 9] = '7';  // still valid JSON, and a plausible epoch
  write_bytes(s.file("checkpoint.json"), text);
  Trainer b(2);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, b.ckpt), IoError, "checksum mismatch");
}

// A model of other shapes: ShapeError naming the file and the entry, and
// nothing changes, not even the sections that would have fitted.
TEST(CheckpointBad, ShapeMismatchChangesNothing) {
  Saved s;
  Trainer b(2, /*hidden=*/8);
  // The model comes last, so the other sections load before it fails (the
  // optimizer is left out: its state would not fit either).
  io::Checkpoint ckpt;
  ckpt.add("scaler", b.scaler).add("scheduler", *b.sched).add("model", b.model);
  for (int k = 0; k < 2; ++k) b.train_step(k);
  nn::TensorDict m0 = b.model->state_dict(), o0 = b.opt->state_dict(), s0 = b.sched->state_dict();
  for (auto* d : {&m0, &o0, &s0})
    for (auto& [k, t] : *d) t = t.clone();
  uint64_t offset = default_generator().offset();

  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, ckpt, {.strict = false}), ShapeError,
                   "section 'model' of '" + s.file("model.g1.safetensors") + "' does not fit");
  EXPECT_THAT(last_error_message(), HasSubstr("0.weight: [8, 4] in the module, [16, 4]"));
  EXPECT_TRUE(same_state(b.model->state_dict(), m0));
  EXPECT_TRUE(same_state(b.opt->state_dict(), o0));
  EXPECT_TRUE(same_state(b.sched->state_dict(), s0));
  EXPECT_EQ(b.scaler.growth_tracker, 2);
  EXPECT_EQ(default_generator().offset(), offset);
}

TEST(CheckpointBad, MissingAndExtraKeysOfTheModel) {
  Saved s;
  manual_seed(3);
  auto other =
      std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::UnaryModule>>{
          std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::ReLU>()});
  io::Checkpoint ckpt;
  ckpt.add("model", other);
  nn::TensorDict before = other->state_dict();
  for (auto& [k, t] : before) t = t.clone();
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, ckpt, {.strict = false}), ValueError,
                   "unexpected keys (2): [3.weight, 3.bias]");
  EXPECT_THAT(last_error_message(), HasSubstr("model.g1.safetensors"));
  EXPECT_TRUE(same_state(other->state_dict(), before));
}

TEST(CheckpointBad, MissingOrExtraSection) {
  Saved s;
  Trainer b(2);
  FakeScaler ema;
  b.ckpt.add("ema", ema);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, b.ckpt), ValueError,
                   "has no section 'ema' (it has: model, optimizer, scaler, scheduler)");
  Trainer c(2);
  io::Checkpoint only_model;
  only_model.add("model", c.model);
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, only_model), ValueError,
                   "has a section 'optimizer' that the Checkpoint lacks");
  // Not strict: the model alone loads, the rest is ignored.
  io::load_checkpoint(s.path, only_model, {.strict = false});
  EXPECT_TRUE(same_state(c.model->state_dict(), s.a.model->state_dict()));
}

// A section of one's own that refuses its state after the model loaded:
// the model is put back.
TEST(CheckpointBad, LaterSectionFailingRollsBackEarlierOnes) {
  Saved s;
  Trainer b(2);
  nn::TensorDict before = b.model->state_dict();
  for (auto& [k, t] : before) t = t.clone();
  io::Checkpoint ckpt;
  ckpt.add("model", b.model);
  ckpt.add(
      "scaler", [] { return nn::TensorDict{}; },
      [](const nn::TensorDict& d) {
        // Refuses the file's tensors, takes back its own (empty) state.
        if (!d.empty()) DDP_THROW(ValueError, "scaler refuses");
      });
  EXPECT_DDP_ERROR(io::load_checkpoint(s.path, ckpt, {.strict = false}), ValueError,
                   "section 'scaler' of '" + s.file("scaler.g1.safetensors") +
                       "' does not fit; nothing was loaded: scaler refuses");
  EXPECT_TRUE(same_state(b.model->state_dict(), before));
}

// ---- failed saves keep the previous checkpoint ---------------------------------------

// After a failed save the directory holds exactly the old files, and they
// load to the old state.
void expect_old_checkpoint_intact(const Saved& s, const std::set<std::string>& files) {
  EXPECT_EQ(files_in(s.path), files);
  Trainer b(2);
  io::CheckpointInfo info = io::load_checkpoint(s.path, b.ckpt);
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(b.scaler.growth_tracker, 3);
}

TEST(CheckpointSave, SectionThatThrowsWritesNothing) {
  Saved s;
  std::set<std::string> files = files_in(s.path);
  s.a.ckpt.add(
      "broken", []() -> nn::TensorDict { DDP_THROW(ValueError, "cannot serialise"); },
      [](const nn::TensorDict&) {});
  EXPECT_DDP_ERROR(io::save_checkpoint(s.path, s.a.ckpt, {.step = 9}), ValueError,
                   "section 'broken' failed to give its state; nothing was written: "
                   "cannot serialise");
  expect_old_checkpoint_intact(s, files);
}

TEST(CheckpointSave, SectionFileThatFailsRemovesWhatWasWritten) {
  Saved s;
  std::set<std::string> files = files_in(s.path);
  // The model and optimizer files are written before this one fails.
  s.a.ckpt.add(
      "undefined",
      [] {
        return nn::TensorDict{{"t", Tensor()}};
      },
      [](const nn::TensorDict&) {});
  EXPECT_DDP_ERROR(io::save_checkpoint(s.path, s.a.ckpt, {.step = 9}), ValueError,
                   "writing section 'undefined' to '" + s.file("undefined.g2.safetensors"));
  expect_old_checkpoint_intact(s, files);
}

TEST(CheckpointSave, UnwritableManifestKeepsThePreviousCheckpoint) {
  Saved s;
  std::set<std::string> files = files_in(s.path);
  // A directory where the manifest's temporary file must go.
  std::string tmp = fmt::format("{}.tmp.{}", s.file("checkpoint.json"), ::getpid());
  std::filesystem::create_directory(tmp);
  s.a.train_step(3);
  EXPECT_DDP_ERROR(io::save_checkpoint(s.path, s.a.ckpt, {.step = 4}), IoError,
                   "cannot create '" + tmp + "'");
  std::filesystem::remove(tmp);
  expect_old_checkpoint_intact(s, files);
}

// ---- bad arguments -----------------------------------------------------------------

TEST(CheckpointArgs, BadNamesAndOptions) {
  ScratchDir dir;
  FakeScaler x;
  io::Checkpoint ckpt;
  ckpt.add("a", x);
  EXPECT_DDP_ERROR(ckpt.add("a", x), ValueError, "section 'a' was added already");
  EXPECT_DDP_ERROR(ckpt.add("a/b", x), ValueError, "section name 'a/b' must be 1 to 64");
  EXPECT_DDP_ERROR(ckpt.add("", x), ValueError, "section name '' must be");
  EXPECT_DDP_ERROR(ckpt.add("n", std::shared_ptr<FakeScaler>()), ValueError, "null pointer");
  EXPECT_DDP_ERROR(ckpt.add_generator("default", default_generator()), ValueError,
                   "generator 'default' was added already");
  EXPECT_DDP_ERROR(io::save_checkpoint(dir.path("c"), ckpt, {.step = -1}), ValueError,
                   "epoch and step must be >= 0");
  EXPECT_DDP_ERROR(io::save_checkpoint(dir.path("c"), ckpt, {.rank = -1}), ValueError,
                   "rank must be >= 0");
  EXPECT_FALSE(std::filesystem::exists(dir.path("c")));
}

}  // namespace
}  // namespace ddp::test
