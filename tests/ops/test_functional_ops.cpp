// The functional ops the Python package exposes beside the tutorials' ones: rms_norm,
// apply_rotary_emb and multi_head_attention, against float64 formulas written out here, and
// their error messages. (Their gradients: tests/ops/test_gradcheck.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "qkv/qkv.h"

namespace qkv {
namespace {

Tensor randn(const Shape& s, std::uint64_t seed, DType dt = DType::F32) {
  Generator g(seed);
  return Tensor::randn(s, &g, dt);
}

template <class E, class F>
void expect_error(F f, std::initializer_list<const char*> needles) {
  try {
    f();
    ADD_FAILURE() << "expected an exception";
  } catch (const E& e) {
    for (const char* n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << "'" << n << "' not in: " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

// y = x / sqrt(mean(x^2) + eps) * w over the last n values, in double.
std::vector<double> rms_norm_formula(const Tensor& x, const Tensor& w, std::int64_t n, double eps) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>(n, 1.0);
  std::vector<double> y(xv.size());
  for (std::size_t r = 0; r < xv.size() / n; ++r) {
    double s = 0;
    for (std::int64_t j = 0; j < n; ++j) s += xv[r * n + j] * xv[r * n + j];
    const double rs = 1.0 / std::sqrt(s / static_cast<double>(n) + eps);
    for (std::int64_t j = 0; j < n; ++j) y[r * n + j] = xv[r * n + j] * rs * wv[j];
  }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), atol + rtol * std::fabs(want[i])) << "element " << i;
}

TEST(RmsNormOp, MatchesTheFormulaInBothDtypes) {
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor x = randn({3, 7, 33}, 1, dt), w = randn({33}, 2, dt);
    expect_near_all(rms_norm(x, {33}, w, 1e-5).to_vector<double>(), rms_norm_formula(x, w, 33, 1e-5),
                    dt == DType::F32 ? 1e-6 : 1e-14, dt == DType::F32 ? 2e-6 : 1e-14);
    // two trailing dims, no weight, torch's default eps (the dtype's epsilon)
    const double eps = dt == DType::F32 ? std::numeric_limits<float>::epsilon() : std::numeric_limits<double>::epsilon();
    expect_near_all(rms_norm(x, {7, 33}).to_vector<double>(), rms_norm_formula(x, Tensor(), 7 * 33, eps),
                    dt == DType::F32 ? 1e-6 : 1e-14, dt == DType::F32 ? 2e-6 : 1e-14);
  }
  // a transposed (non-contiguous) input gives the values of its contiguous copy
  const Tensor xt = randn({16, 5}, 3).transpose(0, 1);
  EXPECT_EQ(max_abs_diff(rms_norm(xt, {16}), rms_norm(xt.contiguous(), {16})), 0.0);
  // empty rows and an empty batch
  EXPECT_EQ(rms_norm(Tensor::zeros({0, 4}), {4}).shape(), (Shape{0, 4}));
}

TEST(RmsNormOp, Errors) {
  expect_error<ShapeError>([] { rms_norm(Tensor::zeros({2, 5}), {4}); }, {"rms_norm", "normalized_shape [4]", "[2,5]"});
  expect_error<ShapeError>([] { rms_norm(Tensor::zeros({2, 5}), {5}, Tensor::zeros({4})); },
                           {"rms_norm", "weight [4]", "[5]"});
  expect_error<TypeError>([] { rms_norm(Tensor::zeros({2, 5}), {5}, Tensor::zeros({5}, DType::F64)); },
                          {"rms_norm", "weight is float64"});
  expect_error<ValueError>([] { rms_norm(Tensor::zeros({2, 5}), {5}, Tensor(), -1.0); }, {"rms_norm", "eps", "-1"});
  expect_error<TypeError>([] { rms_norm(Tensor::zeros({2, 5}, DType::I64), {5}); }, {"rms_norm", "int64"});
}

// a' = a cos - b sin, b' = b cos + a sin over the pairs of `style`, angle = pos * inv_freq[i] in double.
std::vector<double> rope_formula(const Tensor& x, const std::vector<std::int64_t>& pos, double base, std::int64_t R,
                                 kernels::RopeStyle style) {
  std::vector<double> v = x.to_vector<double>();
  const std::int64_t D = x.size(-1), T = x.size(-2), half = R / 2;
  for (std::size_t r = 0; r < v.size() / D; ++r) {
    const double p = static_cast<double>(pos[r % T]);
    for (std::int64_t i = 0; i < half; ++i) {
      // inv_freq in float32, as transformers computes it (1 / base^(2i/R) of float32 values)
      const float e = static_cast<float>(2 * i) / static_cast<float>(R);
      const double ang = p * static_cast<double>(1.0f / static_cast<float>(std::pow(base, static_cast<double>(e))));
      const std::size_t a = r * D + (style == kernels::RopeStyle::Half ? i : 2 * i);
      const std::size_t b = r * D + (style == kernels::RopeStyle::Half ? i + half : 2 * i + 1);
      const double va = v[a], vb = v[b];
      v[a] = va * std::cos(ang) - vb * std::sin(ang);
      v[b] = vb * std::cos(ang) + va * std::sin(ang);
    }
  }
  return v;
}

TEST(RotaryOp, MatchesTheFormulaInBothDtypesAndStyles) {
  const std::vector<std::int64_t> pos{5, 0, 17, 1, 300, 2, 9};
  const Tensor p = Tensor::from_vector(pos, {7});
  for (DType dt : {DType::F32, DType::F64})
    for (auto style : {kernels::RopeStyle::Half, kernels::RopeStyle::Interleaved})
      for (std::int64_t R : {std::int64_t{10}, std::int64_t{6}}) {  // full and partial rotary
        const Tensor x = randn({2, 3, 7, 10}, 4, dt);
        const Tensor y = apply_rotary_emb(x, p, {.base = 10000.0, .rotary_dim = R, .style = style});
        // float32: the angle is a float32 product (as in transformers): at position 300 a few
        // ulps of the angle (~2e-5 rad each) times |x| <= ~4 -> up to ~2e-4
        expect_near_all(y.to_vector<double>(), rope_formula(x, pos, 10000.0, R, style),
                        dt == DType::F32 ? 5e-4 : 1e-12, 0);
      }
  // default positions are 0..T-1; position 0 is the identity
  const Tensor x = randn({4, 8}, 5);
  EXPECT_EQ(max_abs_diff(apply_rotary_emb(x), apply_rotary_emb(x, Tensor::arange(4, DType::I64))), 0.0);
  EXPECT_EQ(max_abs_diff(apply_rotary_emb(x).narrow(0, 0, 1), x.narrow(0, 0, 1)), 0.0);
  // the input is left as it was, and a strided input works
  const Tensor xt = randn({8, 4}, 6).transpose(0, 1);
  const Tensor before = xt.clone();
  EXPECT_EQ(max_abs_diff(apply_rotary_emb(xt), apply_rotary_emb(xt.contiguous())), 0.0);
  EXPECT_EQ(max_abs_diff(xt, before), 0.0);
}

TEST(RotaryOp, Errors) {
  const Tensor x = Tensor::zeros({2, 3, 8});
  expect_error<ValueError>([&] { apply_rotary_emb(x, Tensor(), {.rotary_dim = 5}); }, {"apply_rotary_emb", "rotary_dim", "5", "D=8"});
  expect_error<ValueError>([&] { apply_rotary_emb(x, Tensor(), {.rotary_dim = 10}); }, {"apply_rotary_emb", "10"});
  expect_error<ValueError>([&] { apply_rotary_emb(x, Tensor(), {.base = 1.0}); }, {"apply_rotary_emb", "base"});
  expect_error<ShapeError>([&] { apply_rotary_emb(x, Tensor::arange(4, DType::I64)); }, {"apply_rotary_emb", "positions [4]", "[3]"});
  expect_error<TypeError>([&] { apply_rotary_emb(x, Tensor::arange(3)); }, {"apply_rotary_emb", "positions must be int64", "float32"});
  expect_error<ShapeError>([] { apply_rotary_emb(Tensor::zeros({8})); }, {"apply_rotary_emb", "rank >= 2", "[8]"});
}

TEST(MultiHeadAttentionOp, MatchesPerHeadFormula) {
  // B=2, Lq=3, Lk=4, E=6, H=3 (D=2), kdim 5, vdim 4, float64, with biases and a keep mask
  const std::int64_t B = 2, Lq = 3, Lk = 4, E = 6, H = 3, D = 2;
  const Tensor q = randn({B, Lq, E}, 10, DType::F64), k = randn({B, Lk, 5}, 11, DType::F64),
               v = randn({B, Lk, 4}, 12, DType::F64);
  MultiHeadAttentionWeights w{.w_q = randn({E, E}, 13, DType::F64), .w_k = randn({E, 5}, 14, DType::F64),
                              .w_v = randn({E, 4}, 15, DType::F64), .w_o = randn({E, E}, 16, DType::F64),
                              .b_q = randn({E}, 17, DType::F64), .b_k = randn({E}, 18, DType::F64),
                              .b_v = randn({E}, 19, DType::F64), .b_o = randn({E}, 20, DType::F64)};
  const Tensor keep = Tensor::from_bools({1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0}, {Lq, Lk});
  const AttentionOutput a = multi_head_attention(q, k, v, w, H, Mask::keep(keep), {.need_weights = true});
  ASSERT_EQ(a.output.shape(), (Shape{B, Lq, E}));
  ASSERT_EQ(a.weights.shape(), (Shape{B, H, Lq, Lk}));
  // proj(x)[b, t, o] = sum_i x[b, t, i] W[o, i] + bias[o]
  auto proj = [](const Tensor& x, const Tensor& W, const Tensor& bias, std::int64_t b, std::int64_t t, std::int64_t o) {
    double s = bias.at({o});
    for (std::int64_t i = 0; i < x.size(2); ++i) s += x.at({b, t, i}) * W.at({o, i});
    return s;
  };
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<double> merged(static_cast<std::size_t>(Lq * E));
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < Lq; ++i) {
        std::vector<double> s(Lk);
        double mx = -INFINITY, z = 0;
        for (std::int64_t j = 0; j < Lk; ++j) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d)
            dot += proj(q, w.w_q, w.b_q, b, i, h * D + d) * proj(k, w.w_k, w.b_k, b, j, h * D + d);
          s[j] = keep.at({i, j}) ? dot / std::sqrt(static_cast<double>(D)) : -INFINITY;
          mx = std::max(mx, s[j]);
        }
        for (double& e : s) z += (e = std::exp(e - mx));
        for (std::int64_t j = 0; j < Lk; ++j) EXPECT_NEAR(a.weights.at({b, h, i, j}), s[j] / z, 1e-12);
        for (std::int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (std::int64_t j = 0; j < Lk; ++j) o += s[j] / z * proj(v, w.w_v, w.b_v, b, j, h * D + d);
          merged[i * E + h * D + d] = o;
        }
      }
    for (std::int64_t i = 0; i < Lq; ++i)
      for (std::int64_t o = 0; o < E; ++o) {
        double y = w.b_o.at({o});
        for (std::int64_t c = 0; c < E; ++c) y += merged[i * E + c] * w.w_o.at({o, c});
        EXPECT_NEAR(a.output.at({b, i, o}), y, 1e-12);
      }
  }
}

TEST(MultiHeadAttentionOp, TheModuleIsTheOpOfItsWeights) {
  nn::MultiHeadAttention mha({.embed_dim = 8, .num_heads = 2});
  const Tensor x = randn({2, 5, 8}, 21);
  const AttentionOutput m = mha.forward(x, x, x, Mask::causal(), true);
  const AttentionOutput f = multi_head_attention(
      x, x, x,
      {.w_q = mha.w_q->weight, .w_k = mha.w_k->weight, .w_v = mha.w_v->weight, .w_o = mha.w_o->weight,
       .b_q = mha.w_q->bias, .b_k = mha.w_k->bias, .b_v = mha.w_v->bias, .b_o = mha.w_o->bias},
      2, Mask::causal(), {.need_weights = true});
  EXPECT_EQ(max_abs_diff(m.output, f.output), 0.0);
  EXPECT_EQ(max_abs_diff(m.weights, f.weights), 0.0);
}

TEST(MultiHeadAttentionOp, Errors) {
  const Tensor x = Tensor::zeros({2, 3, 6});
  const Tensor w6 = Tensor::zeros({6, 6});
  const MultiHeadAttentionWeights w{.w_q = w6, .w_k = w6, .w_v = w6, .w_o = w6};
  expect_error<ValueError>([&] { multi_head_attention(x, x, x, w, 4); },
                           {"multi_head_attention", "embed_dim (d_model) 6 is not divisible by num_heads 4"});
  expect_error<ValueError>([&] { multi_head_attention(x, x, x, w, 0); }, {"multi_head_attention", "num_heads must be >= 1"});
  expect_error<ShapeError>([&] { multi_head_attention(x, x, x, {.w_q = w6, .w_k = Tensor::zeros({6, 5}), .w_v = w6, .w_o = w6}, 2); },
                           {"multi_head_attention", "w_k must be [6, 6]", "[6,5]"});
  expect_error<ShapeError>([&] { multi_head_attention(x, x, x, {.w_q = w6, .w_k = w6, .w_v = w6, .w_o = w6, .b_o = Tensor::zeros({5})}, 2); },
                           {"multi_head_attention", "b_o must be [6]", "[5]"});
  expect_error<ShapeError>([&] { multi_head_attention(x, x, Tensor::zeros({2, 4, 6}), w, 2); },
                           {"multi_head_attention", "query [2,3,6]", "value [2,4,6]"});
  expect_error<ShapeError>([&] { multi_head_attention(x, x, x, {.w_q = w6}, 2); }, {"w_k", "undefined"});
}

}  // namespace
}  // namespace qkv
