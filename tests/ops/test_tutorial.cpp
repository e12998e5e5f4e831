// The tutorials' own checks, in C++ (seeds/ 000 and 001).
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/qkv.h"

namespace qkv {
namespace {

TEST(Tutorial, ScaledDotProductAttentionShapesAndRowSums) {
  manual_seed(0);
  Tensor q = Tensor::randn({2, 4, 8}), k = Tensor::randn({2, 4, 8}), v = Tensor::randn({2, 4, 8});
  nn::ScaledDotProductAttention attention({.dropout = 0.1});
  attention.eval();
  AttentionOutput r = attention.forward(q, k, v);
  EXPECT_EQ(r.output.shape(), (Shape{2, 4, 8}));
  EXPECT_EQ(r.weights.shape(), (Shape{2, 4, 4}));
  Tensor sums = sum(r.weights, {-1});
  EXPECT_TRUE(allclose(sums, Tensor::ones({2, 4}), 0, 1e-6)) << sums;
}

TEST(Tutorial, MultiHeadAttentionShapes) {
  manual_seed(0);
  Tensor x = Tensor::randn({2, 6, 12});
  nn::MultiHeadAttention mha({.embed_dim = 12, .num_heads = 4, .dropout = 0.1});
  AttentionOutput r = mha.forward(x, x, x, Mask(), /*need_weights=*/true);
  EXPECT_EQ(r.output.shape(), (Shape{2, 6, 12}));
  EXPECT_EQ(r.weights.shape(), (Shape{2, 4, 6, 6}));
}

TEST(Tutorial, CausalMask5x5) {
  // tensor([[ True, False, False, False, False], ... [ True, True, True, True, True]])
  Tensor bias = Mask::causal(5, 5).to_bias({5, 5}, DType::F32, "test");
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) EXPECT_EQ(bias.at({i, j}) == 0.0, j <= i) << i << "," << j;
}

TEST(Tutorial, WorkedExampleDk2) {
  // Q = [[0.1,0.2],[0.5,0.6],[0.9,1.0]], K = [[0.3,0.4],[0.7,0.8],[1.1,1.2]]
  Tensor q = Tensor::from_vector(std::vector<double>{0.1, 0.2, 0.5, 0.6, 0.9, 1.0}, {3, 2});
  Tensor k = Tensor::from_vector(std::vector<double>{0.3, 0.4, 0.7, 0.8, 1.1, 1.2}, {3, 2});
  Tensor scores = matmul(q, k.transpose(0, 1));
  const double expect_scores[3][3] = {{0.11, 0.23, 0.35}, {0.39, 0.83, 1.27}, {0.67, 1.43, 2.19}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(scores.at({i, j}), expect_scores[i][j], 1e-12);
  AttentionOutput r = scaled_dot_product_attention(q, k, k, Mask(), {.need_weights = true});
  // The tutorial's table. It rounds every intermediate value (scaled scores,
  // exponentials) to 3 decimals before normalising, so its last digit can be
  // off by one from the exact softmax: exact row 1 ends 0.4407, row 2 ends
  // 0.5193. Hence the 1.5e-3 tolerance; the exact values are checked below.
  const double table[3][3] = {{0.305, 0.333, 0.362}, {0.237, 0.323, 0.440}, {0.177, 0.303, 0.520}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(r.weights.at({i, j}), table[i][j], 1.5e-3) << i << "," << j;
  // Exact values from the formula (softmax of scores / sqrt(2)), independently of the engine.
  for (int i = 0; i < 3; ++i) {
    double e[3], z = 0;
    for (int j = 0; j < 3; ++j) z += e[j] = std::exp(expect_scores[i][j] / std::sqrt(2.0));
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(r.weights.at({i, j}), e[j] / z, 1e-12) << i << "," << j;
  }
}

TEST(Tutorial, PaddingMaskBroadcastsOverHeadsAndQueries) {
  // create_padding_mask(seq) = (seq != pad).unsqueeze(1).unsqueeze(2) -> (batch, 1, 1, seq_len)
  Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{5, 6, 7, 0, 0, 3, 4, 5, 6, 7}, {2, 5});
  manual_seed(3);
  Tensor q = Tensor::randn({2, 2, 5, 4});
  AttentionOutput r = scaled_dot_product_attention(q, q, q, Mask::padding(ids, 0), {.need_weights = true});
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(r.weights.at({0, h, i, 3}), 0.0);
      EXPECT_EQ(r.weights.at({0, h, i, 4}), 0.0);
      EXPECT_GT(r.weights.at({1, h, i, 4}), 0.0);
    }
}

}  // namespace
}  // namespace qkv
