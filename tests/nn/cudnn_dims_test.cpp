// The int-range check of cuDNN descriptors (kernels/cuda/cudnn_dims.h), which
// needs no GPU: broadcast views give huge sizes without memory.

#include <gtest/gtest.h>

#include "cuda/cudnn_dims.h"

namespace ddp {
namespace {

TEST(CudnnDims, FitsIntAsItIs) {
  Tensor t = Tensor::empty({2, 3, 4, 5});
  const std::array<int, 8> d = nn::cudnn_util::checked_dims(t, "conv2d (cuDNN)");
  EXPECT_EQ(d, (std::array<int, 8>{2, 3, 4, 5, 60, 20, 5, 1}));
}

TEST(CudnnDims, BeyondIntIsAShapeErrorNamingTheOp) {
  Tensor big = Tensor::empty({1, 1, 1, 1}).expand({1, 1, 1, int64_t(3) << 30});
  try {
    nn::cudnn_util::checked_dims(big, "conv2d (cuDNN)");
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("conv2d (cuDNN)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int range"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::cudnn_util::checked_dims(Tensor::empty({2, 3}), "batch_norm"), ShapeError);
}

}  // namespace
}  // namespace ddp
