// REFERENCES.md section 5, items 1-10: typed errors whose messages name the op,
// the argument and the shapes, or a defined result.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/qkv.h"

namespace qkv {
namespace {

// Runs f, expects exception E whose message contains every needle.
template <class E, class F>
void expect_error(F f, std::initializer_list<const char*> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const char* n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

TEST(BadInput, MatmulShapes) {
  expect_error<ShapeError>([] { matmul(Tensor::zeros({2, 5, 512}), Tensor::zeros({64, 512})); },
                           {"matmul", "[2,5,512]", "[64,512]", "512", "64"});
  expect_error<ShapeError>([] { matmul(Tensor::zeros({3, 2, 4}), Tensor::zeros({2, 4, 5})); },
                           {"matmul", "batch", "[3]", "[2]"});
  expect_error<ShapeError>([] { matmul(Tensor::scalar(1.0), Tensor::zeros({2})); }, {"matmul"});
  expect_error<TypeError>([] { matmul(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}, DType::F64)); },
                          {"matmul", "float32", "float64"});
  expect_error<ShapeError>([] { linear(Tensor::zeros({2, 7}), Tensor::zeros({4, 5})); }, {"linear", "[2,7]", "[4,5]"});
}

TEST(BadInput, MultiHeadAttentionShapes) {
  expect_error<ValueError>([] { nn::MultiHeadAttention({.embed_dim = 512, .num_heads = 7}); },
                           {"512", "not divisible", "7"});
  nn::MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2});
  expect_error<ShapeError>([&] { mha.forward(Tensor::zeros({2, 3, 6}), Tensor::zeros({2, 3, 8}), Tensor::zeros({2, 3, 8})); },
                           {"MultiHeadAttention", "query", "[2,3,6]"});
  expect_error<ShapeError>([&] { mha.forward(Tensor::zeros({2, 3, 8}), Tensor::zeros({2, 4, 8}), Tensor::zeros({2, 5, 8})); },
                           {"MultiHeadAttention", "[2,4,8]", "[2,5,8]"});
  expect_error<ShapeError>([&] { mha.forward(Tensor::zeros({3, 8}), Tensor::zeros({3, 8}), Tensor::zeros({3, 8})); },
                           {"MultiHeadAttention", "[3,8]"});
}

TEST(BadInput, AttentionShapesAndMasks) {
  Tensor q = Tensor::zeros({2, 4, 5, 8}), k = Tensor::zeros({2, 4, 6, 8}), v = Tensor::zeros({2, 4, 6, 8});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, Tensor::zeros({2, 4, 6, 7}), v); },
                           {"scaled_dot_product_attention", "head dim", "[2,4,5,8]", "[2,4,6,7]"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, Tensor::zeros({2, 4, 5, 8})); },
                           {"scaled_dot_product_attention", "[2,4,6,8]", "[2,4,5,8]"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, v, Mask::keep(Tensor::ones({3, 6}, DType::Bool))); },
                           {"scaled_dot_product_attention", "keep[3,6]", "[2,4,5,6]"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, v, Mask::additive(Tensor::zeros({2, 1, 5, 7}))); },
                           {"additive", "[2,1,5,7]", "[2,4,5,6]"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, v, Mask::causal(5, 5)); },
                           {"causal", "Lq=5", "Lk=6"});
  expect_error<ShapeError>([] { Mask::padding(Tensor::zeros({2, 3}), 0); }, {"padding", "int64", "[2,3]"});
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, k, v, Mask(), {.dropout_p = 1.0}); }, {"dropout_p", "[0, 1)"});
}

// Grouped-query attention (PyTorch's enable_gqa) and the sliding window: heads that do not
// divide, heads that differ without enable_gqa, keys and values with different heads, other
// leading dims that differ, a negative window.
TEST(BadInput, GroupedQueryHeadsAndWindow) {
  Tensor q = Tensor::zeros({2, 9, 5, 8}), k = Tensor::zeros({2, 3, 6, 8}), v = Tensor::zeros({2, 3, 6, 8});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, v); },
                           {"scaled_dot_product_attention", "[2,9,5,8] has 9 heads (dim -3)", "[2,3,6,8] has 3",
                            "enable_gqa"});
  const Tensor k4 = Tensor::zeros({2, 4, 6, 8});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k4, k4, Mask(), {.enable_gqa = true}); },
                           {"scaled_dot_product_attention", "enable_gqa", "divide", "9 heads", "[2,4,6,8] has 4"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, k, Tensor::zeros({2, 1, 6, 8}), Mask(),
                                                              {.enable_gqa = true}); },
                           {"scaled_dot_product_attention", "k [2,3,6,8] has 3 heads", "v [2,1,6,8] has 1"});
  expect_error<ShapeError>([&] { scaled_dot_product_attention(q, Tensor::zeros({1, 3, 6, 8}), Tensor::zeros({1, 3, 6, 8}),
                                                              Mask(), {.enable_gqa = true}); },
                           {"scaled_dot_product_attention", "leading dims differ", "[1,3,6,8]"});
  expect_error<ValueError>([&] { scaled_dot_product_attention(q, k, v, Mask(), {.enable_gqa = true, .sliding_window = -2}); },
                           {"scaled_dot_product_attention", "sliding_window", "-2"});
  // and the valid call runs (output with q's heads)
  EXPECT_EQ(scaled_dot_product_attention(q, k, v, Mask(), {.enable_gqa = true}).output.shape(), (Shape{2, 9, 5, 8}));
}

TEST(BadInput, ViewsAndIndices) {
  expect_error<ShapeError>([] { Tensor::zeros({2, 3}).view({4, 2}); }, {"view", "[4,2]", "[2,3]"});
  expect_error<ShapeError>([] { Tensor::zeros({2, 3}).transpose(0, 1).view({6}); }, {"contiguous()"});
  expect_error<IndexError>([] { Tensor::zeros({2, 3}).transpose(0, 2); }, {"transpose", "dim 2", "rank 2"});
  expect_error<IndexError>([] { Tensor::zeros({2, 3}).narrow(1, 2, 2); }, {"narrow", "size 3"});
  expect_error<ShapeError>([] { concat({Tensor::zeros({2, 3}), Tensor::zeros({3, 3})}, 1); }, {"concat", "[3,3]", "[2,3]"});
  expect_error<IndexError>([] { embedding(Tensor::zeros({5, 3}), Tensor::from_vector(std::vector<std::int64_t>{1, 5}, {2})); },
                           {"embedding", "id 5", "5 rows"});
  expect_error<IndexError>([] { embedding(Tensor::zeros({5, 3}), Tensor::from_vector(std::vector<std::int64_t>{-1}, {1})); },
                           {"embedding", "id -1"});
  expect_error<IndexError>([] { cross_entropy(Tensor::zeros({2, 3}), Tensor::from_vector(std::vector<std::int64_t>{0, 3}, {2})); },
                           {"cross_entropy", "target 3", "3 classes"});
  expect_error<ShapeError>([] { layer_norm(Tensor::zeros({2, 4}), {5}, Tensor(), Tensor()); },
                           {"layer_norm", "[5]", "[2,4]"});
}

TEST(BadInput, AbsurdSizesFailBeforeAllocating) {
  expect_error<AllocError>([] { Tensor::empty({1LL << 40, 1LL << 40}); }, {"[1099511627776,1099511627776]"});
  expect_error<AllocError>([] { Tensor::zeros({1LL << 31, 1LL << 31, 4}); }, {"zeros"});
  expect_error<ShapeError>([] { Tensor::zeros({-1, 3}); }, {"negative"});
  // the engine still works afterwards
  EXPECT_EQ(sum(Tensor::ones({3, 3})).item(), 9.0);
}

TEST(BadInput, LayerNormLargeMeanTinyVariance) {
  // x = 1e6 + 1e-3 * noise (float64): two-pass statistics keep full accuracy.
  Generator g(3);
  Tensor noise = Tensor::randn({4, 64}, &g, DType::F64);
  Tensor x = add(mul(noise, 1e-3), 1e6);
  Tensor y = layer_norm(x, {64}, Tensor(), Tensor(), 1e-12);
  Tensor m = mean(noise, {-1}, true);
  // eps enters the reference as in the definition: 1/sqrt(var + eps)
  Tensor sd = sqrt(add(mean(square(sub(mul(noise, 1e-3), mul(m, 1e-3))), {-1}, true), 1e-12));
  Tensor expect = div(mul(sub(noise, m), 1e-3), sd);
  EXPECT_LT(max_abs_diff(y, expect), 1e-6);
  // constant rows: zero variance -> (x - mean) = 0 exactly, no NaN
  Tensor c = layer_norm(Tensor::full({2, 8}, 3.0), {8}, Tensor(), Tensor(), 1e-5);
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  expect_error<ValueError>([] { layer_norm(Tensor::zeros({2, 4}), {4}, Tensor(), Tensor(), 0.0); }, {"eps"});
}

TEST(BadInput, Dropout) {
  Tensor x = Tensor::ones({100});
  expect_error<ValueError>([&] { dropout(x, 1.0, true); }, {"dropout", "[0, 1)", "1.0"});
  expect_error<ValueError>([&] { dropout(x, -0.1, true); }, {"dropout"});
  expect_error<ValueError>([&] { dropout(x, NAN, true); }, {"dropout"});
  expect_error<ValueError>([] { nn::Dropout({.p = 1.5}); }, {"Dropout", "1.5"});
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));   // p = 0: identical
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));  // eval: none
  Generator g(1);
  Tensor y = dropout(x, 0.5, true, &g);
  int zeros = 0;
  for (float v : y.to_vector<float>()) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f);
    zeros += v == 0.0f;
  }
  EXPECT_GT(zeros, 30);
  EXPECT_LT(zeros, 70);
  nn::Dropout d({.p = 0.5});
  d.eval();
  EXPECT_TRUE(d.forward(x).is_same(x));
}

TEST(BadInput, NanPropagatesThroughOps) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, NAN, 3}, {1, 3});
  EXPECT_TRUE(std::isnan(relu(x).at({0, 1})));
  EXPECT_TRUE(std::isnan(softmax(x, -1).at({0, 0})));
  EXPECT_TRUE(std::isnan(layer_norm(x, {3}, Tensor(), Tensor()).at({0, 0})));
  EXPECT_TRUE(std::isnan(matmul(x, Tensor::ones({3, 2})).at({0, 1})));
}

TEST(BadInput, PositionalEncodingPastMaxLen) {
  nn::SinusoidalPositionalEncoding pe({.d_model = 8, .max_len = 16});
  expect_error<ValueError>([&] { pe.forward(Tensor::zeros({1, 17, 8})); }, {"max_len 16", "17"});
  expect_error<ShapeError>([&] { pe.forward(Tensor::zeros({1, 4, 6})); }, {"[1,4,6]"});
}

}  // namespace
}  // namespace qkv
