// Attention semantics: mask conventions, fully masked rows, bottom-right causal,
// huge logits, NaN propagation, empty key sets, determinism.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/qkv.h"

namespace qkv {
namespace {

Tensor rnd(const Shape& s, std::uint64_t seed, DType dt = DType::F32) {
  Generator g(seed);
  return Tensor::randn(s, &g, dt);
}

TEST(Attention, KeepBlockAndAdditiveAgree) {
  Tensor q = rnd({2, 3, 4, 8}, 1), k = rnd({2, 3, 6, 8}, 2), v = rnd({2, 3, 6, 8}, 3);
  Tensor keep = Tensor::from_bools({1, 0, 1, 1, 0, 1}, {6});
  Tensor block = logical_not(keep);
  Tensor add = masked_fill(Tensor::zeros({6}), block, -INFINITY);
  auto a = scaled_dot_product_attention(q, k, v, Mask::keep(keep)).output;
  auto b = scaled_dot_product_attention(q, k, v, Mask::block(block)).output;
  auto c = scaled_dot_product_attention(q, k, v, Mask::additive(add)).output;
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  EXPECT_EQ(max_abs_diff(a, c), 0.0);
  // and differs from no mask
  EXPECT_GT(max_abs_diff(a, scaled_dot_product_attention(q, k, v).output), 1e-3);
}

TEST(Attention, FullyMaskedRowsGiveZeroOutputAndZeroGradient) {
  Tensor q = rnd({1, 2, 3, 4}, 4), k = rnd({1, 2, 5, 4}, 5), v = rnd({1, 2, 5, 4}, 6);
  q.requires_grad_();
  k.requires_grad_();
  v.requires_grad_();
  Tensor keep = Tensor::from_bools({1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 1}, {3, 5});  // row 1 fully masked
  auto r = scaled_dot_product_attention(q, k, v, Mask::keep(keep), {.need_weights = true});
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(r.output.at({0, h, 1, d}), 0.0);
  sum(r.output).backward();
  for (int h = 0; h < 2; ++h)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(q.grad().at({0, h, 1, d}), 0.0);
  for (float g : k.grad().to_vector<float>()) EXPECT_TRUE(std::isfinite(g));
  for (float g : v.grad().to_vector<float>()) EXPECT_TRUE(std::isfinite(g));
}

TEST(Attention, CausalIsBottomRightWhenLqLessThanLk) {
  // KV-cache decode: the last Lq queries of an Lk-long sequence.
  Tensor q = rnd({1, 1, 7, 4}, 7), k = rnd({1, 1, 7, 4}, 8), v = rnd({1, 1, 7, 4}, 9);
  auto full = scaled_dot_product_attention(q, k, v, Mask::causal()).output;
  auto last = scaled_dot_product_attention(q.narrow(2, 5, 2), k, v, Mask::causal()).output;
  EXPECT_LT(max_abs_diff(last, full.narrow(2, 5, 2)), 1e-6);
  // Lq > Lk: the first Lq - Lk queries see nothing -> zeros
  auto tall = scaled_dot_product_attention(q, k.narrow(2, 0, 4), v.narrow(2, 0, 4), Mask::causal()).output;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(tall.at({0, 0, i, 0}), 0.0);
  EXPECT_NE(tall.at({0, 0, 3, 0}), 0.0);
}

TEST(Attention, HugeLogitsStayFinite) {
  Tensor q = mul(rnd({1, 1, 4, 8}, 10), 100.0), k = mul(rnd({1, 1, 4, 8}, 11), 100.0), v = rnd({1, 1, 4, 8}, 12);
  auto r = scaled_dot_product_attention(q, k, v, Mask(), {.need_weights = true});
  for (float x : r.output.to_vector<float>()) EXPECT_TRUE(std::isfinite(x));
  Tensor s = sum(r.weights, {-1});
  EXPECT_TRUE(allclose(s, Tensor::ones({1, 1, 4}), 0, 1e-5));
}

TEST(Attention, NanInputsPropagateVisibly) {
  Tensor q = rnd({1, 1, 3, 4}, 13), k = rnd({1, 1, 3, 4}, 14), v = rnd({1, 1, 3, 4}, 15);
  q.set({0, 0, 1, 2}, NAN);
  auto out = scaled_dot_product_attention(q, k, v).output;
  EXPECT_TRUE(std::isnan(out.at({0, 0, 1, 0})));
  EXPECT_FALSE(std::isnan(out.at({0, 0, 0, 0})));
}

TEST(Attention, NoKeysGivesZeros) {
  Tensor q = rnd({2, 3, 4}, 16), k = Tensor::zeros({2, 0, 4}), v = Tensor::zeros({2, 0, 5});
  auto out = scaled_dot_product_attention(q, k, v).output;
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5}));
  for (float x : out.to_vector<float>()) EXPECT_EQ(x, 0.0f);
  // B = 0 and L = 0 work too
  EXPECT_EQ(scaled_dot_product_attention(Tensor::zeros({0, 2, 4}), Tensor::zeros({0, 3, 4}), Tensor::zeros({0, 3, 4}))
                .output.shape(),
            (Shape{0, 2, 4}));
  EXPECT_EQ(scaled_dot_product_attention(Tensor::zeros({1, 0, 4}), Tensor::zeros({1, 3, 4}), Tensor::zeros({1, 3, 4}))
                .output.shape(),
            (Shape{1, 0, 4}));
}

TEST(Attention, VeryNegativeFillsActLikeMasks) {
  Tensor q = rnd({1, 2, 4}, 17), k = rnd({1, 3, 4}, 18), v = rnd({1, 3, 4}, 19);
  Tensor add = Tensor::from_vector(std::vector<float>{0, -1e9f, 0}, {3});
  Tensor keep = Tensor::from_bools({1, 0, 1}, {3});
  EXPECT_LT(max_abs_diff(scaled_dot_product_attention(q, k, v, Mask::additive(add)).output,
                         scaled_dot_product_attention(q, k, v, Mask::keep(keep)).output),
            1e-6);
}

TEST(Attention, DeterministicAcrossRuns) {
  manual_seed(5);
  nn::MultiHeadAttention mha({.embed_dim = 32, .num_heads = 4, .dropout = 0.1});
  Tensor x = rnd({2, 9, 32}, 20);
  auto run = [&]() {
    Generator& g = default_generator();
    g.manual_seed(77);
    x.zero_grad();
    Tensor xx = x.detach();
    xx.requires_grad_();
    Tensor out = mha.forward(xx, xx, xx, Mask::causal()).output;
    sum(square(out)).backward();
    return std::make_pair(out.to_vector<float>(), xx.grad().to_vector<float>());
  };
  auto a = run();
  auto b = run();
  EXPECT_EQ(a.first, b.first);
  EXPECT_EQ(a.second, b.second);
}

// The float32 fast path (flash kernels: shared key/value heads read in place, window tiles
// skipped) against the float64 math path (heads copied, window as a mask), forward and gradients
// through autograd, for grouped / multi-query heads, windows, causal, Lq != Lk and a key padding mask.
TEST(Attention, GqaAndWindowFastPathMatchesTheMathPath) {
  struct C {
    Shape q, kv;
    std::int64_t window;
    bool causal;
  };
  const C cases[] = {{{2, 6, 40, 16}, {2, 2, 40, 16}, 0, true},   {{2, 6, 40, 16}, {2, 3, 70, 16}, 9, true},
                     {{1, 4, 130, 64}, {1, 1, 130, 64}, 33, true}, {{1, 4, 9, 32}, {1, 2, 20, 32}, 5, false},
                     {{3, 20, 8}, {3, 50, 8}, 7, true}};
  std::uint64_t seed = 30;
  for (const C& c : cases) {
    Tensor q = rnd(c.q, seed++), k = rnd(c.kv, seed++), v = rnd(c.kv, seed++), g = rnd(c.q, seed++);
    std::vector<std::int64_t> tokens(20, 1);
    tokens[17] = tokens[18] = tokens[19] = 0;  // three padded keys
    const Mask mask = c.causal ? Mask::causal() : Mask::padding(Tensor::from_vector(tokens, {1, 20}), 0);
    const SdpaOptions o{.enable_gqa = true, .sliding_window = c.window};
    auto run = [&](DType dt) {
      Tensor qq = q.to(dt).detach(), kk = k.to(dt).detach(), vv = v.to(dt).detach();
      qq.requires_grad_();
      kk.requires_grad_();
      vv.requires_grad_();
      Tensor out = scaled_dot_product_attention(qq, kk, vv, mask, o).output;
      sum(mul(out, g.to(dt))).backward();
      return std::vector<Tensor>{out.to(DType::F64), qq.grad().to(DType::F64), kk.grad().to(DType::F64),
                                 vv.grad().to(DType::F64)};
    };
    const auto fast = run(DType::F32), ref = run(DType::F64);
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(fast[i].shape(), ref[i].shape()) << what[i];
      // float32 against float64: |err| <= 1e-5 + 1e-5 * max |ref| (measured up to ~2e-6 relative)
      const double scale = max_abs_diff(ref[i], Tensor::zeros(ref[i].shape(), DType::F64));
      EXPECT_LE(max_abs_diff(fast[i], ref[i]), 1e-5 + 1e-5 * scale)
          << what[i] << " window " << c.window << " q " << shape_str(c.q);
    }
  }
}

}  // namespace
}  // namespace qkv
