// scaled_dot_product_attention on strided q/k/v on the CPU (Note [Strided
// attention operands] in src/nn/functional/attention.cpp): GPT's views of its
// qkv projection, transposed heads and a last dim that is not dense give the
// output and gradients of contiguous copies, bit for bit, in f64 and f32,
// causal and not; GPT's block makes no operand copy; bad strided inputs raise
// ShapeError. The CPU runs the reference path (it has no fused kernel); the
// same checks on the GPU's fused kernels are in attention_gpu_test.cpp.

#include <gtest/gtest.h>

#include <string>

#include "ddp/core/error.h"
#include "nn/attention_strided_util.h"

using namespace ddp;
namespace F = ddp::nn::functional;
namespace sa = ddp::test::strided_attention;

TEST(AttentionStrided, LayoutsMatchTheCopyingPathBitForBit) {
  for (DType dtype : {DType::f64, DType::f32})
    for (bool causal : {true, false}) sa::check_layouts(2, 3, 9, 8, dtype, Device::cpu(), causal, 0.0);
}

TEST(AttentionStrided, BroadcastKeysAreReadLikeCopies) {
  // k and v expanded over the batch (stride 0): a view no fused kernel reads
  // in place; the result is that of the materialised tensors.
  Generator gen(5);
  Tensor q = randn({3, 2, 6, 8}, {}, &gen), k1 = randn({1, 2, 6, 8}, {}, &gen),
         v1 = randn({1, 2, 6, 8}, {}, &gen);
  Tensor k = k1.expand({3, 2, 6, 8}), v = v1.expand({3, 2, 6, 8});
  Tensor got = F::scaled_dot_product_attention(q, k, v, true);
  Tensor want = F::scaled_dot_product_attention(q, k.contiguous(), v.contiguous(), true);
  EXPECT_EQ(ddp::test::scaled_error(got, want), 0.0);
}

TEST(AttentionStrided, GptBlockMakesNoOperandCopy) {
  const sa::BlockRun r = sa::run_gpt_block(DType::f32, Device::cpu());
  EXPECT_EQ(r.copies, 0);  // the CPU never copies for a fused kernel: it has none
}

TEST(AttentionStrided, BadStridedInputsRaise) {
  const int64_t B = 2, T = 5, H = 2, D = 4, C = H * D;
  Tensor qkv = randn({B, T, 3 * C});
  auto heads = [&](int64_t i, int64_t h) {
    return qkv.narrow(2, i * C, C).reshape({B, T, h, C / h}).transpose(1, 2);
  };
  // Head counts that disagree (the same bytes viewed as 2 and 4 heads).
  try {
    F::scaled_dot_product_attention(heads(0, H), heads(1, 4), heads(2, 4), true);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("must agree in batch, heads and head size"),
              std::string::npos)
        << e.what();
  }
  // Fewer keys than queries under a causal mask (a narrowed view of k and v).
  EXPECT_THROW(F::scaled_dot_product_attention(heads(0, H), heads(1, H).narrow(2, 0, 3),
                                               heads(2, H).narrow(2, 0, 3), true),
               ShapeError);
  // k and v of different lengths.
  EXPECT_THROW(F::scaled_dot_product_attention(heads(0, H), heads(1, H),
                                               heads(2, H).narrow(2, 0, 3), false),
               ShapeError);
  // A 3-D view of the projection.
  EXPECT_THROW(F::scaled_dot_product_attention(qkv, qkv, qkv, false), ShapeError);
}
