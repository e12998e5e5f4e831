// Module plumbing: dotted names, state dicts, train/eval, dtype conversion.
#include <gtest/gtest.h>

#include <cmath>

#include "qkv/qkv.h"

namespace qkv {
namespace {

TEST(Module, DottedPyTorchStyleNames) {
  nn::TransformerEncoder enc({.num_layers = 2, .layer = {.d_model = 8, .num_heads = 2, .d_ff = 16}});
  auto np = enc.named_parameters();
  std::vector<std::string> names;
  for (auto& [n, t] : np) names.push_back(n);
  EXPECT_EQ(names.front(), "layers.0.self_attn.w_q.weight");
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.1.ffn.linear2.bias"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.1.norm2.weight"), names.end());
  EXPECT_EQ(np.size(), 2u * (8 + 4 + 4));
  EXPECT_EQ(enc.named_parameters()[0].second.shape(), (Shape{8, 8}));
}

TEST(Module, StateDictRoundTripAndErrors) {
  manual_seed(1);
  nn::MultiHeadAttention a({.embed_dim = 8, .num_heads = 2});
  manual_seed(2);
  nn::MultiHeadAttention b({.embed_dim = 8, .num_heads = 2});
  Tensor x = Tensor::randn({1, 3, 8});
  EXPECT_GT(max_abs_diff(a.forward(x, x, x).output, b.forward(x, x, x).output), 1e-4);
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(max_abs_diff(a.forward(x, x, x).output, b.forward(x, x, x).output), 0.0);

  auto sd = a.state_dict();
  sd.erase("w_o.bias");
  sd["extra.weight"] = Tensor::zeros({1});
  try {
    b.load_state_dict(sd);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("missing keys: w_o.bias"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unexpected keys: extra.weight"), std::string::npos) << e.what();
  }
  auto sd2 = a.state_dict();
  sd2["w_q.weight"] = Tensor::zeros({4, 8});
  EXPECT_THROW(b.load_state_dict(sd2), ShapeError);
}

TEST(Module, TrainEvalControlsDropout) {
  manual_seed(3);
  nn::TransformerEncoderBlock blk({.d_model = 8, .num_heads = 2, .d_ff = 16, .dropout = 0.5});
  Tensor x = Tensor::randn({2, 4, 8});
  blk.eval();
  Tensor a = blk.forward(x), b = blk.forward(x);
  EXPECT_EQ(max_abs_diff(a, b), 0.0);
  blk.train();
  EXPECT_GT(max_abs_diff(blk.forward(x), a), 1e-3);
}

TEST(Module, ToFloat64KeepsValues) {
  manual_seed(4);
  nn::Linear lin({.in_features = 3, .out_features = 2});
  Tensor w32 = lin.weight.clone();
  lin.to(DType::F64);
  EXPECT_EQ(lin.weight.dtype(), DType::F64);
  EXPECT_EQ(max_abs_diff(lin.weight.to(DType::F32), w32), 0.0);
  EXPECT_TRUE(lin.weight.requires_grad());
}

TEST(Module, LinearInitBound) {
  manual_seed(5);
  nn::Linear lin({.in_features = 16, .out_features = 32});
  for (float w : lin.weight.to_vector<float>()) EXPECT_LE(std::fabs(w), 0.25f);
}

TEST(PositionalEncoding, SinusoidalInterleaved) {
  Tensor pe = nn::sinusoidal_table(10, 6, DType::F64);
  EXPECT_DOUBLE_EQ(pe.at({3, 0}), std::sin(3.0));
  EXPECT_DOUBLE_EQ(pe.at({3, 1}), std::cos(3.0));
  EXPECT_NEAR(pe.at({3, 2}), std::sin(3.0 / std::pow(10000.0, 2.0 / 6)), 1e-12);
  EXPECT_NEAR(pe.at({3, 5}), std::cos(3.0 / std::pow(10000.0, 4.0 / 6)), 1e-12);
}

}  // namespace
}  // namespace qkv
