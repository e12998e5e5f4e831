// qkv heatmap's numbers for every decoder architecture of the registry: the attention weights
// of each layer and head (DecoderLM::attention_weights, through models::text_attention with
// the model's own tokenizer) against transformers' output_attentions with eager attention,
// computed in float64 (tests/reference/make_decoder_attention_fixtures.py) — Qwen3, Gemma 2
// (soft-capped scores, sliding layers), Gemma 3, Phi-3 (partial rotary, window), SmolLM3 (NoPE
// layers), a Llama-2-style SentencePiece model, Llama (llama3 rope), Mistral (window), Qwen2
// (biases) and SmolLM2-135M-Instruct (the real Q4_1 GGUF). Each text is longer than the
// model's window. The arch models' GGUF files (llama.cpp's converter, Q8_0) against their weights
// dequantized by gguf-py into the same transformers class (<arch>_gguf).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/io/tensors.h"
#include "qkv/models/decoder_io.h"
#include "qkv/models/text_attention.h"
#include "testing/fixture.h"

namespace {

using qkv::Tensor;
using i64 = std::int64_t;

const nlohmann::json& index_json() {
  static const nlohmann::json j = [] {
    std::ifstream f(qkv::testing::fixture_path("decoder_attention.json"));
    return nlohmann::json::parse(f);
  }();
  return j;
}

const qkv::io::LoadedTensors& reference() {
  static const qkv::io::LoadedTensors t = qkv::testing::load_fixture("decoder_attention.safetensors");
  return t;
}

std::vector<std::string> names() {
  std::vector<std::string> v;
  for (const auto& [name, value] : index_json().items()) v.push_back(name);
  return v;
}

std::string full_path(const std::string& relative) { return std::string(QKV_SOURCE_DIR) + "/" + relative; }

// Every layer's maps within the R1 rule (2 x transformers' own float32 error, floor 1e-5) of
// the float64 reference.
void expect_maps(const std::string& name, const std::vector<Tensor>& layers, const std::string& what) {
  const double err = reference().at(name + ".err").item();
  i64 L = 0;
  while (reference().contains(name + ".layer" + std::to_string(L))) ++L;
  ASSERT_GT(L, 0) << name;
  ASSERT_EQ(static_cast<i64>(layers.size()), L) << what;
  for (i64 l = 0; l < L; ++l) {
    const Tensor& want = reference().at(name + ".layer" + std::to_string(l));
    qkv::testing::expect_close(layers[static_cast<std::size_t>(l)], want, 0.0, 2 * err + 1e-5,
                               what + " layer " + std::to_string(l));
  }
}

class DecoderAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderAttention, WeightsEqualTransformersOutputAttentions) {
  const std::string name = GetParam();
  const auto& e = index_json()[name];
  const std::string path = full_path(e["path"].get<std::string>());
  const auto ids = e["ids"].get<std::vector<i64>>();
  if (e["text"].is_null()) {
    // A folder without a tokenizer: the ids as given.
    const auto m = qkv::models::load_decoder(path);
    expect_maps(name, m->attention_weights(ids).layers, name);
    return;
  }
  const auto a = qkv::models::text_attention(path, e["text"].get<std::string>());
  EXPECT_EQ(a.ids, ids) << name << ": the tokenizer's ids";
  EXPECT_EQ(a.model_type, e["model_type"].get<std::string>());
  EXPECT_TRUE(a.causal);
  ASSERT_EQ(a.tokens.size(), ids.size());
  expect_maps(name, a.layers, name);
}

INSTANTIATE_TEST_SUITE_P(Models, DecoderAttention, ::testing::ValuesIn(names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
