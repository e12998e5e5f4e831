// models::quant_mix_types (models/quant_mix.h) against llama-quantize itself: the type it gave
// every tensor of three shape-only models (one of them a mixture of experts) for every file type qkv
// writes
// (tests/reference/make_quant_mix_fixtures.py -> tests/fixtures/quant/quant_mix.json).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/kernels/quant.h"
#include "qkv/models/quant_mix.h"

namespace qkv::models {
namespace {

using kernels::QType;

nlohmann::json fixture() {
  std::ifstream in(std::string(QKV_FIXTURE_DIR) + "/quant/quant_mix.json");
  EXPECT_TRUE(in.good()) << "tests/fixtures/quant/quant_mix.json is missing";
  return nlohmann::json::parse(in);
}

QType type_named(const std::string& name) {
  const auto t = kernels::qtype_from_name(name);
  if (!t) throw ValueError("the fixture names type " + name + ", which qkv does not know");
  return *t;
}

TEST(QuantMix, EveryTensorOfEveryMixAsLlamaQuantize) {
  const nlohmann::json j = fixture();
  ASSERT_EQ(j["models"].size(), 3u);
  int mixes = 0;
  for (const auto& m : j["models"]) {
    const QuantMixModel model{m["model"]["arch"], m["model"]["n_layer"], m["model"]["n_head"], m["model"]["n_head_kv"],
                              m["model"]["n_expert"]};
    std::vector<QuantMixTensor> tensors;
    for (const auto& t : m["tensors"])
      tensors.push_back({t["name"], t["dims"].get<std::vector<std::int64_t>>(), type_named(t["type"])});
    for (const auto& [mix, types] : m["mixes"].items()) {
      const bool pure = mix.find(" --pure") != std::string::npos;
      const auto ftype = llama_ftype_from_name(mix.substr(0, mix.find(' ')));
      ASSERT_TRUE(ftype.has_value()) << mix;
      const std::vector<QType> got = quant_mix_types(*ftype, model, tensors, pure);
      ASSERT_EQ(got.size(), tensors.size());
      int wrong = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        if (kernels::qtype_name(got[i]) != types[i].get<std::string>() && wrong++ < 5)
          ADD_FAILURE() << m["name"].get<std::string>() << " " << mix << ": " << tensors[i].name << " is "
                        << kernels::qtype_name(got[i]) << ", llama-quantize writes " << types[i].get<std::string>();
      EXPECT_EQ(wrong, 0) << m["name"].get<std::string>() << " " << mix;
      ++mixes;
    }
  }
  EXPECT_EQ(mixes, 3 * 21);
}

// The order the tensors come in does not matter: llama.cpp counts attn_v / ffn_down in its own.
TEST(QuantMix, TheOrderGivenDoesNotMatter) {
  const nlohmann::json j = fixture();
  const auto& m = j["models"][0];
  const QuantMixModel model{m["model"]["arch"], m["model"]["n_layer"], m["model"]["n_head"], m["model"]["n_head_kv"], 0};
  std::vector<QuantMixTensor> tensors;
  for (const auto& t : m["tensors"])
    tensors.push_back({t["name"], t["dims"].get<std::vector<std::int64_t>>(), type_named(t["type"])});
  const std::vector<QType> forward = quant_mix_types(LlamaFtype::Q4_K_M, model, tensors);
  std::vector<QuantMixTensor> reversed(tensors.rbegin(), tensors.rend());
  const std::vector<QType> backward = quant_mix_types(LlamaFtype::Q4_K_M, model, reversed);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    EXPECT_EQ(forward[i], backward[tensors.size() - 1 - i]) << tensors[i].name;
}

TEST(QuantMix, NamesAsLlamaQuantizeSpellsThem) {
  EXPECT_EQ(llama_ftype_from_name("q4_k_m"), LlamaFtype::Q4_K_M);
  EXPECT_EQ(llama_ftype_from_name("Q4_K"), LlamaFtype::Q4_K_M);  // llama-quantize's aliases
  EXPECT_EQ(llama_ftype_from_name("q5_k"), LlamaFtype::Q5_K_M);
  EXPECT_EQ(llama_ftype_from_name("q3_k"), LlamaFtype::Q3_K_M);
  EXPECT_EQ(llama_ftype_from_name("IQ4_xs"), LlamaFtype::IQ4_XS);
  EXPECT_EQ(llama_ftype_from_name("bf16"), LlamaFtype::BF16);
  EXPECT_FALSE(llama_ftype_from_name("q2_k_s").has_value());  // needs an importance matrix
  EXPECT_FALSE(llama_ftype_from_name("iq2_xxs").has_value());
  EXPECT_EQ(static_cast<std::uint32_t>(LlamaFtype::Q4_K_M), 15u);
  EXPECT_EQ(std::string(llama_ftype_name(LlamaFtype::Q3_K_L)), "Q3_K_L");
  EXPECT_EQ(llama_ftype_default_type(LlamaFtype::Q5_K_S), QType::Q5_K);
  EXPECT_EQ(llama_ftype_of_type(QType::Q4_K), LlamaFtype::Q4_K_M);
  EXPECT_EQ(llama_ftype_of_type(QType::IQ4_NL), LlamaFtype::IQ4_NL);
  EXPECT_EQ(llama_ftype_from_name("mxfp4_moe"), LlamaFtype::MXFP4_MOE);
  EXPECT_EQ(static_cast<std::uint32_t>(LlamaFtype::MXFP4_MOE), 38u);
  EXPECT_EQ(llama_ftype_default_type(LlamaFtype::MXFP4_MOE), QType::MXFP4);
  EXPECT_EQ(llama_ftype_of_type(QType::MXFP4), LlamaFtype::MXFP4_MOE);
  const std::string names = llama_ftype_names();
  for (const char* n : {"f32", "q4_k_m", "q3_k_l", "iq4_nl", "mxfp4_moe", "q4_k", "q5_k"})
    EXPECT_NE(names.find(n), std::string::npos) << names;
}

// MXFP4_MOE beyond the fixture's llama-shaped mixture (llama.cpp's rule, src/llama-quant.cpp): a
// tensor is an expert's for its third dim above 1, not for its name; rows that are not a multiple of
// 32 fall back to F16; bailingmoe3's 3-D tensors other than the FFN's (its MLA projections) get Q8_0.
TEST(QuantMix, Mxfp4MoeTakesTheExpertsByTheirShape) {
  const QuantMixModel moe{"qwen3moe", 2, 4, 1, 4};
  const std::vector<QuantMixTensor> ts = {{"blk.0.ffn_up_exps.weight", {256, 64, 4}, QType::BF16},
                                          {"blk.0.ffn_up_exps.weight", {256, 64, 1}, QType::BF16},
                                          {"blk.0.ffn_down_exps.weight", {48, 256, 4}, QType::BF16},
                                          {"blk.1.attn_k_b.weight", {64, 32, 4}, QType::BF16},
                                          {"blk.1.ffn_norm.weight", {256}, QType::F32}};
  const std::vector<QType> got = quant_mix_types(LlamaFtype::MXFP4_MOE, moe, ts);
  EXPECT_EQ(got, (std::vector<QType>{QType::MXFP4, QType::Q8_0, QType::F16, QType::MXFP4, QType::F32}));
  const QuantMixModel bailing{"bailingmoe3", 2, 4, 1, 4};
  const std::vector<QType> b = quant_mix_types(LlamaFtype::MXFP4_MOE, bailing, ts);
  EXPECT_EQ(b, (std::vector<QType>{QType::MXFP4, QType::Q8_0, QType::F16, QType::Q8_0, QType::F32}));
  // --pure: every quantized tensor MXFP4 (the fallback aside).
  EXPECT_EQ(quant_mix_types(LlamaFtype::MXFP4_MOE, moe, ts, true),
            (std::vector<QType>{QType::MXFP4, QType::MXFP4, QType::F16, QType::MXFP4, QType::F32}));
}

// An expert model's tensors are placed by their layer number, which must be in the name.
TEST(QuantMix, ExpertModelsNeedLayerNames) {
  const QuantMixModel moe{"llama", 2, 4, 1, 4};
  const std::vector<QuantMixTensor> ok = {{"blk.1.ffn_down_exps.weight", {256, 256, 4}, QType::F16}};
  EXPECT_EQ(quant_mix_types(LlamaFtype::Q4_K_M, moe, ok)[0], QType::Q6_K);  // layer 1 of 2: use_more_bits
  const std::vector<QuantMixTensor> bad = {{"ffn_down_exps.weight", {256, 256, 4}, QType::F16}};
  try {
    quant_mix_types(LlamaFtype::Q4_K_M, moe, bad);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot tell the layer of tensor 'ffn_down_exps.weight'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace qkv::models
