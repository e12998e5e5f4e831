// Finite-difference gradient checks (float64) for every differentiable op.
#include "testing/gradcheck.h"

namespace qkv {
namespace {

using testing::gradcheck;
using testing::rand64;
using V = std::vector<Tensor>;

TEST(GradCheck, BinaryBroadcast) {
  EXPECT_TRUE(gradcheck([](const V& x) { return add(x[0], x[1]); }, {rand64({2, 3, 4}, 1), rand64({3, 1}, 2)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sub(x[0], x[1]); }, {rand64({2, 1, 4}, 1), rand64({3, 4}, 2)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return mul(x[0], x[1]); }, {rand64({2, 3, 4}, 1), rand64({4}, 2)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return div(x[0], add(square(x[1]), 1.0)); },
                        {rand64({2, 3}, 1), rand64({2, 1}, 2)}));
}

TEST(GradCheck, ScalarOps) {
  EXPECT_TRUE(gradcheck([](const V& x) { return add(mul(x[0], 3.5), -2.0); }, {rand64({3, 4}, 3)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return neg(x[0]); }, {rand64({5}, 3)}));
}

TEST(GradCheck, Unary) {
  EXPECT_TRUE(gradcheck([](const V& x) { return exp(x[0]); }, {rand64({3, 4}, 4)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return log(add(square(x[0]), 0.5)); }, {rand64({3, 4}, 5)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sqrt(add(square(x[0]), 0.5)); }, {rand64({3, 4}, 6)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return tanh(x[0]); }, {rand64({3, 4}, 7)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sigmoid(x[0]); }, {rand64({3, 4}, 8)}));
  // relu is not differentiable at 0; random normals avoid it.
  EXPECT_TRUE(gradcheck([](const V& x) { return relu(x[0]); }, {rand64({3, 4}, 9)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return gelu(x[0]); }, {mul(rand64({4, 5}, 10), 3.0)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return gelu(x[0], GeluApprox::Tanh); }, {mul(rand64({4, 5}, 11), 3.0)}));
}

TEST(GradCheck, MaskedFill) {
  Tensor m = Tensor::from_bools({1, 0, 0, 1, 0, 1}, {2, 3});
  EXPECT_TRUE(gradcheck([m](const V& x) { return masked_fill(x[0], m, -7.0); }, {rand64({4, 2, 3}, 12)}));
}

TEST(GradCheck, Reductions) {
  EXPECT_TRUE(gradcheck([](const V& x) { return sum(x[0]); }, {rand64({3, 4}, 13)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sum(x[0], {0, 2}, false); }, {rand64({3, 4, 5}, 14)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return sum(x[0], {-1}, true); }, {rand64({3, 4, 5}, 15)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return mean(x[0], {1}, false); }, {rand64({3, 4, 5}, 16)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return mean(x[0]); }, {rand64({3, 4}, 17)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return amax(x[0], 1, false); }, {rand64({3, 4, 5}, 18)}));
}

TEST(GradCheck, Matmul) {
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {rand64({3, 5}, 19), rand64({5, 4}, 20)}));
  // batched with broadcasting over leading dims
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {rand64({2, 1, 3, 5}, 21), rand64({3, 5, 2}, 22)}));
  // transposed operands (no copy in the kernel)
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0].transpose(0, 1), x[1].transpose(-1, -2)); },
                        {rand64({5, 3}, 23), rand64({4, 5}, 24)}));
  // 1-D operands
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {rand64({5}, 25), rand64({2, 5, 3}, 26)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return matmul(x[0], x[1]); }, {rand64({2, 4, 5}, 27), rand64({5}, 28)}));
}

TEST(GradCheck, Linear) {
  EXPECT_TRUE(gradcheck([](const V& x) { return linear(x[0], x[1], x[2]); },
                        {rand64({2, 3, 5}, 29), rand64({4, 5}, 30), rand64({4}, 31)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return linear(x[0].transpose(0, 1), x[1]); },
                        {rand64({3, 2, 5}, 32), rand64({4, 5}, 33)}));
}

TEST(GradCheck, ShapeOps) {
  EXPECT_TRUE(gradcheck([](const V& x) { return x[0].view({2, 12}); }, {rand64({2, 3, 4}, 34)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return x[0].transpose(0, 2).reshape({-1}); }, {rand64({2, 3, 4}, 35)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return x[0].permute({2, 0, 1}).contiguous(); }, {rand64({2, 3, 4}, 36)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return x[0].narrow(1, 1, 2); }, {rand64({2, 4, 3}, 37)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return x[0].select(0, -1); }, {rand64({2, 4, 3}, 38)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return mul(x[0].expand({3, 2, 4}), 1.0); }, {rand64({2, 1}, 39)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return x[0].unsqueeze(1).squeeze(1); }, {rand64({2, 3}, 40)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return concat({x[0], x[1]}, 1); }, {rand64({2, 3}, 41), rand64({2, 2}, 42)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return stack({x[0], x[1]}, 0); }, {rand64({2, 3}, 43), rand64({2, 3}, 44)}));
  EXPECT_TRUE(gradcheck(
      [](const V& x) {
        auto parts = split(x[0], 2, 1);
        return mul(parts[0], parts[2].expand({3, 2}));
      },
      {rand64({3, 5}, 45)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return x[0].clone(); }, {rand64({2, 3}, 46)}));
}

TEST(GradCheck, SoftmaxFamily) {
  EXPECT_TRUE(gradcheck([](const V& x) { return softmax(x[0], -1); }, {rand64({3, 5}, 47)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return softmax(x[0], 0); }, {rand64({3, 5}, 48)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return log_softmax(x[0], -1); }, {rand64({3, 5}, 49)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return log_softmax(x[0], 1); }, {rand64({2, 4, 3}, 50)}));
  // a fully masked row: zero output, zero gradient, the other rows exact
  Tensor m = Tensor::from_bools({0, 0, 0, 1, 0, 1}, {2, 3});
  EXPECT_TRUE(gradcheck([m](const V& x) { return softmax(masked_fill(x[0], m, -INFINITY), -1); }, {rand64({2, 3}, 51)}));
}

TEST(GradCheck, LayerNorm) {
  EXPECT_TRUE(gradcheck([](const V& x) { return layer_norm(x[0], {5}, x[1], x[2], 1e-5); },
                        {rand64({2, 3, 5}, 52), rand64({5}, 53), rand64({5}, 54)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return layer_norm(x[0], {3, 4}, Tensor(), Tensor(), 1e-3); },
                        {rand64({2, 3, 4}, 55)}));
}

TEST(GradCheck, RmsNorm) {
  EXPECT_TRUE(gradcheck([](const V& x) { return rms_norm(x[0], {5}, x[1], 1e-5); },
                        {rand64({2, 3, 5}, 66), rand64({5}, 67)}));
  EXPECT_TRUE(gradcheck([](const V& x) { return rms_norm(x[0], {3, 4}); }, {rand64({2, 3, 4}, 68)}));
}

TEST(GradCheck, RotaryEmbedding) {
  const Tensor pos = Tensor::from_vector(std::vector<std::int64_t>{3, 0, 7, 100, 2}, {5});
  // every pair style, partial rotary (R < D), given and default positions, llama3 scaling
  EXPECT_TRUE(gradcheck([](const V& x) { return apply_rotary_emb(x[0]); }, {rand64({2, 3, 5, 8}, 69)}));
  EXPECT_TRUE(gradcheck([pos](const V& x) {
    return apply_rotary_emb(x[0], pos, {.base = 500.0, .rotary_dim = 4, .style = kernels::RopeStyle::Interleaved});
  }, {rand64({2, 5, 6}, 70)}));
  EXPECT_TRUE(gradcheck([pos](const V& x) {
    return apply_rotary_emb(x[0], pos, {.scaling = {.type = kernels::RopeScaling::Type::Llama3, .factor = 8,
                                                    .original_max_positions = 16}});
  }, {rand64({5, 8}, 71)}));
}

TEST(GradCheck, MultiHeadAttention) {
  // [B=2, Lq=3, E=4], key/value of other widths (kdim 5, vdim 3), H=2, a causal mask
  auto f = [](bool bias) {
    return [bias](const V& x) {
      MultiHeadAttentionWeights w{.w_q = x[3], .w_k = x[4], .w_v = x[5], .w_o = x[6]};
      if (bias) w.b_q = w.b_k = w.b_v = w.b_o = x[7];
      return multi_head_attention(x[0], x[1], x[2], w, 2, Mask::causal()).output;
    };
  };
  const V in = {rand64({2, 3, 4}, 72), rand64({2, 5, 5}, 73), rand64({2, 5, 3}, 74), rand64({4, 4}, 75),
                rand64({4, 5}, 76), rand64({4, 3}, 77), rand64({4, 4}, 78), rand64({4}, 79)};
  EXPECT_TRUE(gradcheck(f(true), in));
  EXPECT_TRUE(gradcheck(f(false), V(in.begin(), in.begin() + 7)));
}

TEST(GradCheck, Dropout) {
  // The mask is a pure function of (seed, offset): a fresh generator each call gives the same mask.
  EXPECT_TRUE(gradcheck(
      [](const V& x) {
        Generator g(99);
        return dropout(x[0], 0.3, true, &g);
      },
      {rand64({4, 6}, 56)}));
}

TEST(GradCheck, Embedding) {
  Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 3, 1, 0, 2, 3}, {2, 3});
  EXPECT_TRUE(gradcheck([ids](const V& x) { return embedding(x[0], ids); }, {rand64({4, 5}, 57)}));
  // padding_idx: that row receives no gradient (PyTorch semantics), the others do.
  Tensor w = rand64({4, 5}, 58);
  w.requires_grad_();
  sum(embedding(w, ids, 1)).backward();
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(w.grad().at({1, j}), 0.0);
    EXPECT_EQ(w.grad().at({3, j}), 2.0);
  }
}

TEST(GradCheck, CrossEntropy) {
  Tensor t = Tensor::from_vector(std::vector<std::int64_t>{2, 0, 4, -100, 1}, {5});
  EXPECT_TRUE(gradcheck([t](const V& x) { return cross_entropy(x[0], t); }, {rand64({5, 5}, 59)}));
  EXPECT_TRUE(gradcheck(
      [t](const V& x) { return cross_entropy(x[0], t, {.label_smoothing = 0.1}); }, {rand64({5, 5}, 60)}));
  EXPECT_TRUE(gradcheck([t](const V& x) { return cross_entropy(x[0], t, {.mean = false}); }, {rand64({5, 5}, 61)}));
}

TEST(GradCheck, ScaledDotProductAttention) {
  auto sdpa = [](const Mask& m, SdpaOptions o = {}) {
    return [m, o](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], m, o).output; };
  };
  V qkv = {rand64({2, 3, 4, 5}, 62), rand64({2, 3, 6, 5}, 63), rand64({2, 3, 6, 3}, 64)};
  EXPECT_TRUE(gradcheck(sdpa(Mask()), qkv));
  EXPECT_TRUE(gradcheck(sdpa(Mask::causal()), qkv));  // Lq=4 < Lk=6: bottom-right
  Tensor keep = Tensor::from_bools({1, 1, 0, 0, 1, 0,  //
                                    0, 0, 0, 0, 0, 0,  // fully masked row
                                    1, 1, 1, 1, 1, 1,  //
                                    0, 1, 0, 1, 0, 1},
                                   {4, 6});
  EXPECT_TRUE(gradcheck(sdpa(Mask::keep(keep)), qkv));
  EXPECT_TRUE(gradcheck(sdpa(Mask::additive(rand64({1, 3, 1, 6}, 65)) & Mask::causal()), qkv));
  EXPECT_TRUE(gradcheck(
      [](const V& x) {
        Generator g(5);
        return scaled_dot_product_attention(x[0], x[1], x[2], Mask(), {.dropout_p = 0.25, .generator = &g}).output;
      },
      qkv));
  // the weights themselves are differentiable too
  EXPECT_TRUE(gradcheck(
      [](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], Mask::causal(), {.need_weights = true}).weights; },
      qkv));
}

// Grouped-query heads (enable_gqa: 6 query heads on 2 and on 1 key/value heads; the gradient of a
// shared head sums over its query heads) and sliding windows (1 and 3, with and without causal,
// Lq < Lk and Lq > Lk: rows with no key give zero gradient), in float64 (the math path).
TEST(GradCheck, ScaledDotProductAttentionGqaAndWindow) {
  auto sdpa = [](const Mask& m, SdpaOptions o) {
    return [m, o](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], m, o).output; };
  };
  V gqa = {rand64({2, 6, 4, 5}, 70), rand64({2, 2, 6, 5}, 71), rand64({2, 2, 6, 3}, 72)};
  EXPECT_TRUE(gradcheck(sdpa(Mask(), {.enable_gqa = true}), gqa));
  EXPECT_TRUE(gradcheck(sdpa(Mask::causal(), {.enable_gqa = true, .sliding_window = 3}), gqa));
  V mqa = {rand64({1, 6, 5, 4}, 73), rand64({1, 1, 5, 4}, 74), rand64({1, 1, 5, 4}, 75)};
  EXPECT_TRUE(gradcheck(sdpa(Mask::causal(), {.enable_gqa = true, .sliding_window = 1}), mqa));
  V tall = {rand64({1, 2, 7, 4}, 76), rand64({1, 2, 4, 4}, 77), rand64({1, 2, 4, 4}, 78)};  // Lq > Lk
  EXPECT_TRUE(gradcheck(sdpa(Mask(), {.sliding_window = 2}), tall));
  EXPECT_TRUE(gradcheck(sdpa(Mask::causal(), {.sliding_window = 2}), tall));
}

}  // namespace
}  // namespace qkv
