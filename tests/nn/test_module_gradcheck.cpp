// Gradient checks (float64, finite differences) of whole modules: inputs and all parameters.
#include "testing/gradcheck.h"

namespace qkv {
namespace {

using testing::gradcheck_module;
using testing::rand64;
using V = std::vector<Tensor>;

TEST(ModuleGradCheck, MultiHeadAttentionSelf) {
  manual_seed(1);
  nn::MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2});
  mha.to(DType::F64);
  EXPECT_TRUE(gradcheck_module(
      mha, [&](const V& x) { return mha.forward(x[0], x[0], x[0], Mask::causal()).output; }, {rand64({2, 4, 8}, 1)}));
}

TEST(ModuleGradCheck, MultiHeadAttentionCross) {
  manual_seed(2);
  nn::MultiHeadAttention mha({.embed_dim = 6, .num_heads = 3, .kdim = 5, .vdim = 4});
  mha.to(DType::F64);
  Tensor pad = Tensor::from_vector(std::vector<std::int64_t>{4, 5, 6, 7, 8, 3, 2, 0, 0, 0}, {2, 5});
  EXPECT_TRUE(gradcheck_module(
      mha, [&](const V& x) { return mha.forward(x[0], x[1], x[2], Mask::padding(pad, 0)).output; },
      {rand64({2, 3, 6}, 2), rand64({2, 5, 5}, 3), rand64({2, 5, 4}, 4)}));
}

TEST(ModuleGradCheck, EncoderBlockPostAndPreNorm) {
  for (bool pre : {false, true}) {
    manual_seed(3);
    nn::TransformerEncoderBlock blk({.d_model = 8, .num_heads = 2, .d_ff = 12, .dropout = 0.0,
                                     .activation = pre ? nn::Activation::GELU : nn::Activation::ReLU,
                                     .norm_first = pre});
    blk.to(DType::F64);
    EXPECT_TRUE(gradcheck_module(blk, [&](const V& x) { return blk.forward(x[0]); }, {rand64({2, 3, 8}, 5)}))
        << "norm_first=" << pre;
  }
}

TEST(ModuleGradCheck, DecoderBlock) {
  for (bool pre : {false, true}) {
    manual_seed(4);
    nn::TransformerDecoderBlock blk({.d_model = 8, .num_heads = 2, .d_ff = 12, .dropout = 0.0, .norm_first = pre});
    blk.to(DType::F64);
    EXPECT_TRUE(gradcheck_module(
        blk, [&](const V& x) { return blk.forward(x[0], x[1], Mask::causal()); },
        {rand64({2, 3, 8}, 6), rand64({2, 4, 8}, 7)}))
        << "norm_first=" << pre;
  }
}

TEST(ModuleGradCheck, PositionalEncodings) {
  manual_seed(5);
  nn::LearnedPositionalEncoding lpe({.max_len = 6, .d_model = 4});
  lpe.to(DType::F64);
  EXPECT_TRUE(gradcheck_module(lpe, [&](const V& x) { return lpe.forward(x[0], 1); }, {rand64({2, 3, 4}, 8)}));
  nn::SinusoidalPositionalEncoding spe({.d_model = 4, .max_len = 8, .dtype = DType::F64});
  EXPECT_TRUE(gradcheck_module(spe, [&](const V& x) { return spe.forward(x[0]); }, {rand64({2, 3, 4}, 9)}));
}

}  // namespace
}  // namespace qkv
