// Files written independently of libddp (tests/golden/make_safetensors.py:
// PyTorch tensors, a hand-written header from Python's json module) load
// with the right names, order, dtypes, shapes and bits; a PyTorch model's
// state_dict loads strictly into the equivalent ddp module tree and gives
// PyTorch's output.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/io/safetensors.h"
#include "golden/torch_dtypes_expected.h"
#include "nn/nn_test_util.h"

namespace ddp::test {
namespace {

using ::testing::ElementsAre;

std::string golden(const std::string& name) {
  return std::string(DDP_TEST_DATA_DIR) + "/golden/" + name;
}

// Element i of a CPU tensor's bytes as an unsigned integer of its width.
uint64_t element_bits(const Tensor& t, int64_t i) {
  uint64_t bits = 0;
  size_t size = element_size(t.dtype());
  std::memcpy(&bits, static_cast<const char*>(t.data_ptr()) + size_t(i) * size, size);
  return bits;
}

TEST(SafetensorsGolden, TorchTensorsOfEveryDTypeLoadBitForBit) {
  io::Metadata meta;
  nn::TensorDict loaded = io::load_safetensors(golden("torch_dtypes.safetensors"), &meta);
  EXPECT_EQ(meta.at("format"), "pt");
  EXPECT_EQ(meta.at("producer"), "tests/golden/make_safetensors.py");
  ASSERT_EQ(loaded.size(), golden::kTorchDTypeTensors.size());
  size_t index = 0;
  for (const golden::TorchTensor& g : golden::kTorchDTypeTensors) {
    SCOPED_TRACE(g.name);
    EXPECT_EQ(loaded.keys()[index++], g.name);  // the header's order
    const Tensor& t = loaded.at(g.name);
    EXPECT_STREQ(io::safetensors_dtype_name(t.dtype()), g.dtype);
    EXPECT_EQ(t.shape(), g.shape);
    ASSERT_TRUE(t.is_contiguous());
    ASSERT_EQ(size_t(t.numel()), g.bits.size());
    for (int64_t i = 0; i < t.numel(); ++i)
      EXPECT_EQ(element_bits(t, i), g.bits[size_t(i)]) << "element " << i;
    if (g.values.empty()) continue;
    // ddp's reading of the bits agrees with torch's: f16/bf16 decoding,
    // subnormals, infinities, NaN.
    std::vector<double> v = t.to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) {
      if (std::isnan(g.values[i]))
        EXPECT_TRUE(std::isnan(v[i])) << "element " << i;
      else
        EXPECT_EQ(v[i], g.values[i]) << "element " << i;
    }
  }
}

TEST(SafetensorsGolden, OurRewriteOfTheTorchFileLoadsTheSame) {
  nn::TensorDict loaded = io::load_safetensors(golden("torch_dtypes.safetensors"));
  std::string path = ::testing::TempDir() + "ddp_golden_rewrite_" + std::to_string(::getpid());
  io::save_safetensors(path, loaded);
  nn::TensorDict again = io::load_safetensors(path);
  std::remove(path.c_str());
  ASSERT_EQ(again.keys(), loaded.keys());
  for (const auto& [name, t] : loaded)
    EXPECT_EQ(0, std::memcmp(t.data_ptr(), again[name].data_ptr(), t.nbytes())) << name;
}

TEST(SafetensorsGolden, TorchStateDictLoadsIntoTheSameModuleTree) {
  nn::TensorDict file = io::load_safetensors(golden("torch_mlp.safetensors"));
  auto mlp = make_mlp();
  // PyTorch's names and order are ours.
  EXPECT_EQ(file.keys(), mlp->state_dict().keys());
  EXPECT_THAT(file.keys(),
              ElementsAre("0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean",
                          "1.running_var", "1.num_batches_tracked", "3.weight", "3.bias"));
  EXPECT_TRUE(io::load_state_dict(golden("torch_mlp.safetensors"), *mlp).ok());
  EXPECT_EQ(mlp->at<TestBatchNorm1d>(1)->num_batches_tracked.item<int64_t>(), 3);
  EXPECT_EQ(values(mlp->at<TestLinear>(3)->bias), values(file["3.bias"]));

  nn::TensorDict io_file = io::load_safetensors(golden("torch_mlp_io.safetensors"));
  mlp->eval();
  Tensor y = mlp->forward(io_file["input"]);
  ASSERT_EQ(y.shape(), (Shape{5, 3}));
  EXPECT_LT(max_abs_error(y, io_file["output"]), 1e-5) << y.to_string() << "\n"
                                                       << io_file["output"].to_string();
}

}  // namespace
}  // namespace ddp::test
