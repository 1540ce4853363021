// Tests of writing and reading safetensors files (ddp/io/safetensors.h):
// byte-exact round trips of every dtype, order, metadata, scalars, empty and
// strided tensors, the header's layout, save errors, and saving and loading
// modules.
#include "ddp/io/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include "ddp/io/json.h"
#include "io/io_test_util.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string raw(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

// Values worth a round trip in each dtype: extremes, signed zero,
// subnormals, infinities, NaN.
nn::TensorDict every_dtype() {
  const double inf = INFINITY, nan = NAN;
  nn::TensorDict d;
  d.insert("f32", Tensor::from_vector<float>({0.0f, -0.0f, 1.0f / 3, -1e-40f, 3.4028235e38f,
                                              float(inf), float(-inf), float(nan)},
                                             {2, 4}));
  d.insert("f64",
           Tensor::from_vector<double>({1.0 / 3, -5e-324, 1.7976931348623157e308, nan}, {2, 2}));
  d.insert("f16",
           Tensor::from_vector<double>({1.0 / 3, 65504, 6e-8, -inf, nan, -0.0}, {6}, kFloat16));
  d.insert("bf16", Tensor::from_vector<double>({1.0 / 3, 3.38e38, 1e-40, inf, nan, -2.5}, {3, 2},
                                               kBFloat16));
  d.insert("i32", Tensor::from_vector<int32_t>({INT32_MIN, INT32_MAX, 0, -7}, {4}));
  d.insert("i64", Tensor::from_vector<int64_t>({INT64_MIN, INT64_MAX, 0, 123456789012345}, {2, 2}));
  d.insert("u8", Tensor::from_vector<uint8_t>({0, 1, 127, 128, 255}, {5}));
  d.insert("bool", Tensor::from_vector<bool>({true, false, true}, {3}));
  return d;
}

TEST(Safetensors, RoundTripsEveryDTypeByteForByte) {
  ScratchDir dir;
  nn::TensorDict saved = every_dtype();
  io::save_safetensors(dir.path("t.safetensors"), saved);
  nn::TensorDict loaded = io::load_safetensors(dir.path("t.safetensors"));
  ASSERT_EQ(loaded.keys(), saved.keys());
  for (const auto& [name, t] : saved) {
    const Tensor& l = loaded[name];
    EXPECT_EQ(l.dtype(), t.dtype()) << name;
    EXPECT_EQ(l.shape(), t.shape()) << name;
    EXPECT_EQ(l.device(), Device::cpu()) << name;
    EXPECT_EQ(raw(l), raw(t)) << name;
  }
}

TEST(Safetensors, KeepsOrderNamesAndMetadata) {
  ScratchDir dir;
  nn::TensorDict saved;
  saved.insert("z.last.weight", Tensor::ones({2}));
  saved.insert("a \"quoted\" name\n\xe2\x82\xac", Tensor::zeros({1}));
  saved.insert("", Tensor::full({}, 3.0));
  io::Metadata meta{{"format", "pt"}, {"note", "line1\nline2 \"q\" \\"}, {"empty", ""}};
  io::save_safetensors(dir.path("t.safetensors"), saved, meta);
  io::Metadata got{{"stale", "x"}};
  nn::TensorDict loaded = io::load_safetensors(dir.path("t.safetensors"), &got);
  EXPECT_EQ(loaded.keys(), saved.keys());
  EXPECT_EQ(got, meta);
  EXPECT_EQ(loaded[""].item<float>(), 3.0f);
}

TEST(Safetensors, ScalarsEmptyAndStridedTensors) {
  ScratchDir dir;
  Tensor base = Tensor::from_vector<float>({0, 1, 2, 3, 4, 5}, {2, 3});
  nn::TensorDict saved;
  saved.insert("scalar", Tensor::full({}, -1.5, kFloat64));
  saved.insert("empty", Tensor::zeros({0, 4}, kInt64));
  saved.insert("transposed", base.t());
  saved.insert("strided", base.slice(1, 0, 3, 2));
  Tensor trainable = Tensor::ones({2}, TensorOptions().requires_grad());
  saved.insert("trainable", trainable);
  io::save_safetensors(dir.path("t.safetensors"), saved);
  nn::TensorDict loaded = io::load_safetensors(dir.path("t.safetensors"));
  EXPECT_EQ(loaded["scalar"].shape(), Shape{});
  EXPECT_EQ(loaded["scalar"].item<double>(), -1.5);
  EXPECT_EQ(loaded["empty"].shape(), (Shape{0, 4}));
  EXPECT_EQ(loaded["empty"].dtype(), kInt64);
  EXPECT_EQ(values(loaded["transposed"]), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(loaded["transposed"].shape(), (Shape{3, 2}));
  EXPECT_EQ(values(loaded["strided"]), (std::vector<double>{0, 2, 3, 5}));
  EXPECT_FALSE(loaded["trainable"].requires_grad());
}

TEST(Safetensors, HeaderLayoutFollowsTheFormat) {
  ScratchDir dir;
  nn::TensorDict saved;
  saved.insert("a", Tensor::zeros({3}, kFloat16));  // 6 bytes
  saved.insert("b", Tensor::zeros({2, 2}, kInt64));
  io::save_safetensors(dir.path("t.safetensors"), saved, {{"k", "v"}});
  std::string bytes = read_bytes(dir.path("t.safetensors"));
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[size_t(i)]);
  EXPECT_EQ(n % 8, 0u);  // data starts 8-byte aligned
  EXPECT_EQ(bytes.size(), 8 + n + 6 + 32);
  io::json::Value h = io::json::parse(bytes.substr(8, n));
  EXPECT_THAT(h.keys(), ElementsAre("__metadata__", "a", "b"));
  EXPECT_EQ(h.find("a")->find("dtype")->as_string(), "F16");
  EXPECT_EQ(h.find("b")->find("dtype")->as_string(), "I64");
  const auto& off = h.find("b")->find("data_offsets")->as_array();
  EXPECT_EQ(off[0].as_uint64(), 6u);
  EXPECT_EQ(off[1].as_uint64(), 38u);
  EXPECT_EQ(h.find("b")->find("shape")->as_array().size(), 2u);
  EXPECT_EQ(h.find("__metadata__")->find("k")->as_string(), "v");
}

TEST(Safetensors, DTypeNames) {
  EXPECT_STREQ(io::safetensors_dtype_name(kFloat32), "F32");
  EXPECT_STREQ(io::safetensors_dtype_name(kBFloat16), "BF16");
  EXPECT_STREQ(io::safetensors_dtype_name(kBool), "BOOL");
  EXPECT_STREQ(io::safetensors_dtype_name(kUInt8), "U8");
}

TEST(Safetensors, SaveRefusesBadInput) {
  ScratchDir dir;
  std::string path = dir.path("t.safetensors");
  nn::TensorDict d;
  d.insert("x", Tensor());
  EXPECT_DDP_ERROR(io::save_safetensors(path, d), ValueError, "tensor 'x' is undefined");
  nn::TensorDict m;
  m.insert("__metadata__", Tensor::zeros({1}));
  EXPECT_DDP_ERROR(io::save_safetensors(path, m), ValueError, "\"__metadata__\" is reserved");
  nn::TensorDict bad_name;
  bad_name.insert("bad\xff", Tensor::zeros({1}));
  EXPECT_DDP_ERROR(io::save_safetensors(path, bad_name), ValueError,
                   "a tensor name or metadata string cannot be stored: json: at byte");
  EXPECT_TRUE(dir.files().empty());  // nothing was created
  EXPECT_DDP_ERROR(io::save_safetensors(dir.path("no/such/dir/t.safetensors"), every_dtype()),
                   IoError, "cannot create");
}

TEST(Safetensors, FailedSaveLeavesThePreviousFileIntact) {
  ScratchDir dir;
  std::string path = dir.path("t.safetensors");
  io::save_safetensors(path, every_dtype());
  std::string before = read_bytes(path);
  nn::TensorDict bad = every_dtype();
  bad.insert("late", Tensor());
  EXPECT_THROW(io::save_safetensors(path, bad), ValueError);
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_THAT(dir.files(), ElementsAre("t.safetensors"));  // no temporary left behind
  // Overwriting works and replaces the content.
  nn::TensorDict small;
  small.insert("only", Tensor::ones({1}));
  io::save_safetensors(path, small);
  EXPECT_THAT(io::load_safetensors(path).keys(), ElementsAre("only"));
  EXPECT_THAT(dir.files(), ElementsAre("t.safetensors"));
}

TEST(Safetensors, ModuleRoundTrip) {
  ScratchDir dir;
  manual_seed(1);
  auto a = make_mlp();
  a->forward(randn({4, 4}));  // moves the running statistics
  manual_seed(2);
  auto b = make_mlp();
  io::save_state_dict(dir.path("mlp.safetensors"), *a, {{"epoch", "3"}});
  EXPECT_TRUE(io::load_state_dict(dir.path("mlp.safetensors"), *b).ok());
  for (const auto& [name, t] : a->state_dict())
    EXPECT_EQ(raw(t), raw(b->state_dict()[name])) << name;
  io::Metadata meta;
  io::load_safetensors(dir.path("mlp.safetensors"), &meta);
  EXPECT_EQ(meta.at("epoch"), "3");
  // A model of another shape: the strict errors of load_state_dict.
  auto other = std::make_shared<nn::Sequential>();
  other->push_back(std::make_shared<TestLinear>(4, 9));
  EXPECT_DDP_ERROR(io::load_state_dict(dir.path("mlp.safetensors"), *other), ShapeError,
                   "0.weight: [9, 4] in the module, [8, 4] in the state dict");
  nn::LoadResult r = io::load_state_dict(dir.path("mlp.safetensors"), *b, false);
  EXPECT_TRUE(r.ok());
}

TEST(Safetensors, ReducedPrecisionCheckpointLoadsIntoAnF32Model) {
  ScratchDir dir;
  manual_seed(3);
  auto a = make_mlp();
  a->to(kBFloat16);
  io::save_state_dict(dir.path("bf16.safetensors"), *a);
  nn::TensorDict file = io::load_safetensors(dir.path("bf16.safetensors"));
  EXPECT_EQ(file["0.weight"].dtype(), kBFloat16);
  EXPECT_EQ(file["1.num_batches_tracked"].dtype(), kInt64);
  auto b = make_mlp();
  io::load_state_dict(dir.path("bf16.safetensors"), *b);
  EXPECT_EQ(b->at<TestLinear>(0)->weight.dtype(), kFloat32);
  EXPECT_EQ(values(b->at<TestLinear>(0)->weight), values(a->at<TestLinear>(0)->weight));
}

}  // namespace
}  // namespace ddp::test
