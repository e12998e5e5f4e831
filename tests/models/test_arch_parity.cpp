// The architectures of the registry beyond the Llama family, against transformers
// (tests/reference/make_arch_fixtures.py): tiny models trained briefly on Genesis with each
// family's real options switched on — Qwen3 (q/k norms, head_dim apart from hidden / heads),
// Gemma 2 (soft-capped scores and logits, four norms of 1 + w, GELU-tanh, alternate sliding
// layers), Gemma 3 (q/k norms, sliding and global layers with their own RoPE bases, linear
// scaling on the global one), Phi-3 (fused qkv and gate/up, partial rotary, LongRoPE crossing its
// original context, sliding window), SmolLM3 (NoPE layers) and a Llama-2-style model — from
// their Hugging Face folders and from GGUF files written by llama.cpp's converter: the last
// prompt logits within the R1 rule of the float64 reference, 40 greedy tokens equal to
// transformers' generate (a divergence only at a near-tie, top-2 margin < 1e-3) cached, batched
// with mixed lengths, alone and uncached, and token-by-token decoding equal to the whole prompt.
// The mixtures of experts the same way (tests/reference/make_moe_fixtures.py: Mixtral, whose
// llama.cpp file is architecture llama with expert tensors; Qwen3-MoE with per-head q/k norms and
// renormalised weights; OLMoE with q/k norms over all heads and weights not renormalised), and
// their routers' choices equal transformers' at every prompt position (near-ties excepted). And
// the hybrids (tests/reference/make_hybrid_fixtures.py: Qwen3.5, Gated DeltaNet layers around a
// gated full-attention one, whose GGUF keeps the value heads in llama.cpp's tiled order; Qwen3.5-MoE,
// the same with a mixture of experts and a shared expert in every layer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/io/gguf.h"
#include "qkv/io/safetensors.h"
#include "qkv/io/tensors.h"
#include "qkv/kernels/quant.h"
#include "qkv/models/decoder_io.h"
#include "decoder_parity_util.h"
#include "testing/fixture.h"

namespace {

using qkv::testing::expect_same_tokens;
using qkv::testing::kNearTie;
using qkv::testing::prompt_logits;

using qkv::Tensor;
using i64 = std::int64_t;

// The fixture folders: the dense architectures, the mixtures of experts, the hybrids of linear and
// softmax attention.
const std::vector<std::string> kDirs = {"arch", "moe", "hybrid"};

// Every folder's reference.json entries in one object, each with the folder it came from ("_dir").
const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    nlohmann::json all = nlohmann::json::object();
    for (const std::string& dir : kDirs) {
      const nlohmann::json ref = qkv::testing::json_fixture(dir + "/reference.json");  // (alive while iterated)
      for (const auto& [name, value] : ref.items()) {
        if (name[0] == '_') continue;
        all[name] = value;
        all[name]["_dir"] = dir;
      }
    }
    return all;
  }();
  return j;
}
const qkv::io::LoadedTensors& logits_ref() {
  static const qkv::io::LoadedTensors t = [] {
    qkv::io::LoadedTensors all;
    for (const std::string& dir : kDirs)
      for (auto& kv : qkv::testing::load_fixture(dir + "/logits.safetensors").tensors) all.tensors.push_back(kv);
    return all;
  }();
  return t;
}

// "qwen3" -> the folder, "qwen3_gguf" -> qwen3.gguf (in the variant's fixture folder).
std::string model_path(const std::string& name) {
  const std::string suffix = "_gguf", dir = reference()[name]["_dir"].get<std::string>() + "/";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return qkv::testing::fixture_path(dir + name.substr(0, name.size() - suffix.size()) + ".gguf");
  return qkv::testing::fixture_path(dir + name);
}

std::vector<std::string> variants() {
  std::vector<std::string> v;
  for (const auto& [name, value] : reference().items()) v.push_back(name);
  return v;
}

bool is_mixture(const std::string& name) { return reference()[name]["_dir"] == "moe"; }

std::vector<std::string> mixtures() {
  std::vector<std::string> v;
  for (const std::string& name : variants())
    if (is_mixture(name)) v.push_back(name);
  return v;
}

std::vector<std::vector<i64>> prompts_of(const std::string& name) {
  return reference()[name]["prompts"].get<std::vector<std::vector<i64>>>();
}



class ArchParity : public ::testing::TestWithParam<std::string> {};

TEST_P(ArchParity, LastPromptLogitsWithinR1OfFloat64) {
  const std::string name = GetParam();
  const auto model = qkv::models::load_decoder(model_path(name));
  const auto prompts = prompts_of(name);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const Tensor got = prompt_logits(*model, prompts[i]).to(qkv::DType::F64);
    const std::string key = name + ".p" + std::to_string(i);
    const double err = logits_ref().at(key + ".err").item();
    const Tensor want = logits_ref().at(key + ".logits").to(qkv::DType::F64);  // (float64, stored rounded to float32)
    const double worst = qkv::max_abs_diff(got.select(0, static_cast<i64>(prompts[i].size()) - 1), want);
    // R1 (REFERENCES section 2): c = 2 times transformers' own float32 error, floor 1e-5.
    EXPECT_LE(worst, 2 * err + 1e-5) << key << ": float32 reference spread " << err;
  }
}

TEST_P(ArchParity, GreedyGenerationCachedBatchedAloneAndUncached) {
  const std::string name = GetParam();
  const auto model = qkv::models::load_decoder(model_path(name));
  const auto prompts = prompts_of(name);
  const nlohmann::json& r = reference()[name];
  const i64 n_new = static_cast<i64>(r["generated"][0].size());
  // All prompts at once: mixed lengths in one cache, each in its own slot.
  const auto batched = qkv::infer::generate(*model, prompts, {.max_new_tokens = n_new});
  for (std::size_t i = 0; i < prompts.size(); ++i)
    expect_same_tokens(batched[i].new_ids, r["generated"][i], r["margins"][i], name + " batched prompt " + std::to_string(i));
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = qkv::infer::generate(*model, {prompts[i]}, {.max_new_tokens = n_new});
    EXPECT_EQ(alone[0].new_ids, batched[i].new_ids) << name << ": prompt " << i << "'s tokens depend on its batch";
  }
  const auto uncached = qkv::infer::generate(*model, {prompts[0]}, {.max_new_tokens = n_new, .use_cache = false});
  expect_same_tokens(uncached[0].new_ids, r["generated"][0], r["margins"][0], name + " uncached");
}

TEST_P(ArchParity, DecodingTokenByTokenGivesThePromptLogits) {
  // The decode kernel one token at a time against the prefix up to that token at once
  // (FlashAttention), over the longest prompt (past every sliding window, and past Phi-3's
  // original context, where LongRoPE switches to its long factors for the whole sequence).
  const std::string name = GetParam();
  const auto model = qkv::models::load_decoder(model_path(name));
  auto prompts = prompts_of(name);
  const std::vector<i64> ids = *std::max_element(prompts.begin(), prompts.end(),
                                                 [](const auto& a, const auto& b) { return a.size() < b.size(); });
  const i64 n = static_cast<i64>(ids.size());
  qkv::infer::KVCache cache(model->cache_options(1, n));
  for (i64 t = 0; t < n; ++t) {
    const Tensor step = model->forward_cached(
        Tensor::from_vector(std::vector<i64>{ids[static_cast<std::size_t>(t)]}, {1, 1}), {1}, cache);
    const Tensor whole = prompt_logits(*model, std::vector<i64>(ids.begin(), ids.begin() + t + 1));
    EXPECT_LE(qkv::max_abs_diff(step.select(0, 0), whole.select(0, t)), 1e-4) << name << " position " << t;
  }
}

TEST_P(ArchParity, WrittenAsGgufAndReadBackWithTheSameLogits) {
  // qkv convert's writer (through the architecture's one table of tensor names): the weights as
  // stored give the same logits read back, Q8_0 within its rounding; llama.cpp's names and keys
  // (the fixtures' GGUF files are read through the same table).
  const std::string name = GetParam();
  const auto m = qkv::models::load_decoder(model_path(name));
  const std::vector<i64> ids = prompts_of(name)[0];

  const std::string dir = ::testing::TempDir();
  const std::string same = dir + "/qkv_arch_" + name + ".gguf", q8 = dir + "/qkv_arch_" + name + "_q8.gguf";
  qkv::models::save_decoder_gguf(*m, same, {}, {}, name);
  qkv::models::save_decoder_gguf(*m, q8, {.ftype = qkv::models::LlamaFtype::Q8_0}, {}, name);
  const auto a = qkv::models::load_decoder(same), b = qkv::models::load_decoder(q8);
  // (Mixtral is written as llama.cpp writes it: architecture llama with expert tensors.)
  EXPECT_EQ(a->spec().arch, m->spec().arch == "mixtral" ? "llama" : m->spec().arch);
  const Tensor want = prompt_logits(*m, ids);
  EXPECT_LE(qkv::max_abs_diff(prompt_logits(*a, ids), want), 1e-4) << name;
  // Q8_0 rounds each weight to 1/254 of its block's largest: the logits moved by 0.6-2.0% of their
  // range here (2.0%: Gemma 2, whose final soft-cap of 3 squeezes the range the error is measured by).
  double range = 0;
  for (i64 i = 0; i < want.numel(); ++i) range = std::max(range, std::abs(static_cast<double>(want.contiguous().data<float>()[i])));
  EXPECT_LE(qkv::max_abs_diff(prompt_logits(*b, ids), want), 0.03 * range) << name << " (logits up to " << range << ")";
  std::filesystem::remove(same);
  std::filesystem::remove(q8);
}

// Qwen3.5's linear attention: a 250-token prompt through the chunked form in one pass against the
// same tokens decoded one at a time through the recurrence (each row of a step its own state
// update): every position's logits agree, and the prompt fed in two pieces (the cache's states
// carried between them) gives the one-pass logits. (The step's chunks are 256 tokens and these
// models hold 256 positions: the chunks' boundaries are tested in test_gated_delta, over 2,000
// tokens, and at the real shape by tests/reference/real_shape_parity.py, BENCHMARKS.md.)
TEST(HybridParity, ChunkedPrefillIsTheRecurrence) {
  for (const std::string name : {"qwen3_5", "qwen3_5_gguf", "qwen3_5_moe_gguf"}) {
    const auto model = qkv::models::load_decoder(model_path(name));
    const i64 n = 250, V = model->spec().vocab_size;
    std::vector<i64> ids(static_cast<std::size_t>(n));
    for (i64 t = 0; t < n; ++t) ids[static_cast<std::size_t>(t)] = (t * 7919 + 13) % (V - 10);
    const Tensor whole = prompt_logits(*model, ids);
    qkv::infer::KVCache cache(model->cache_options(1, n));
    double worst = 0;
    for (i64 t = 0; t < n; ++t) {
      const Tensor step = model->forward_cached(
          Tensor::from_vector(std::vector<i64>{ids[static_cast<std::size_t>(t)]}, {1, 1}), {1}, cache);
      worst = std::max(worst, qkv::max_abs_diff(step.select(0, 0), whole.select(0, t)));
    }
    EXPECT_LE(worst, 1e-4) << name;
    qkv::infer::KVCache pieces(model->cache_options(1, n));
    const i64 cut = 137;
    model->forward_cached(Tensor::from_vector(std::vector<i64>(ids.begin(), ids.begin() + cut), {1, cut}), {cut}, pieces);
    const Tensor rest = model->forward_cached(
        Tensor::from_vector(std::vector<i64>(ids.begin() + cut, ids.end()), {1, n - cut}), {n - cut}, pieces, true);
    EXPECT_LE(qkv::max_abs_diff(rest.select(0, 0).select(0, n - cut - 1), whole.select(0, n - 1)), 1e-4) << name;
  }
}

// qkv convert of the Qwen3.5 folders writes llama.cpp's converter's file: the same tensors, types,
// shapes and bytes (the value heads reordered into llama.cpp's tiled order, norms 1 + w; ssm_a =
// -exp(A_log) within a float32 ulp, exp being the library's), and the same linear-attention keys.
TEST(HybridParity, ConvertedFolderIsLlamaCppsFile) {
  for (const std::string name : {"qwen3_5", "qwen3_5_moe"}) {
    const auto m = qkv::models::load_decoder(model_path(name));
    const std::string out = ::testing::TempDir() + "/qkv_hybrid_" + name + ".gguf";
    qkv::models::save_decoder_gguf(*m, out, {}, {}, name);
    const auto ours = qkv::io::GGUFFile::open(out), theirs = qkv::io::GGUFFile::open(model_path(name + "_gguf"));
    EXPECT_EQ(ours.tensors().size(), theirs.tensors().size()) << name;
    for (const auto& t : theirs.tensors()) {
      const auto* o = ours.find(t.name);
      ASSERT_NE(o, nullptr) << name << ": " << t.name << " not written";
      EXPECT_EQ(o->type, t.type) << name << ": " << t.name;
      EXPECT_EQ(o->dims, t.dims) << name << ": " << t.name;
      ASSERT_EQ(o->nbytes, t.nbytes) << name << ": " << t.name;
      const bool a = t.name.size() > 6 && t.name.compare(t.name.size() - 6, 6, ".ssm_a") == 0;
      if (!a) {
        EXPECT_EQ(std::memcmp(ours.data(*o), theirs.data(t), t.nbytes), 0) << name << ": " << t.name << "'s bytes";
        continue;
      }
      std::vector<float> x(t.nbytes / 4), y(t.nbytes / 4);
      std::memcpy(x.data(), ours.data(*o), t.nbytes);
      std::memcpy(y.data(), theirs.data(t), t.nbytes);
      for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 2e-7 * std::abs(y[i])) << name << ": " << t.name;
    }
    const std::string arch(theirs.get_string("general.architecture"));
    EXPECT_EQ(std::string(ours.get_string("general.architecture")), arch);
    for (const char* k : {"ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size",
                          "rope.dimension_count", "block_count", "attention.head_count", "attention.key_length"})
      EXPECT_EQ(ours.get_int(arch + "." + k), theirs.get_int(arch + "." + k)) << name << ": " << k;
    EXPECT_EQ(ours.find_value(arch + ".attention.recurrent_layers")->describe(),
              theirs.find_value(arch + ".attention.recurrent_layers")->describe())
        << name;
    std::filesystem::remove(out);
  }
}

class MoeParity : public ::testing::TestWithParam<std::string> {};

TEST_P(MoeParity, RouterChoicesEqualTransformers) {
  // Every prompt position's k experts in every layer, as transformers' router chose them in the
  // float32 forward pass of the whole prompt (ranked by weight; skipped where the k-th and
  // (k+1)-th probabilities are within 1e-3: a near-tie either side may take).
  const std::string name = GetParam();
  const auto model = qkv::models::load_decoder(model_path(name));
  const nlohmann::json& r = reference()[name];
  const auto prompts = prompts_of(name);
  const i64 k = model->spec().moe.top_k;
  i64 compared = 0;
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const auto got = model->attention_weights(prompts[p]).experts;
    const auto& want = r["routes"][p];
    ASSERT_EQ(got.size(), want.size()) << name;
    for (std::size_t l = 0; l < got.size(); ++l)
      for (std::size_t t = 0; t < prompts[p].size(); ++t) {
        if (r["route_margins"][p][l][t].get<double>() < 1e-3) continue;
        const std::vector<std::int32_t> mine(got[l].begin() + static_cast<std::ptrdiff_t>(t) * k,
                                             got[l].begin() + static_cast<std::ptrdiff_t>(t + 1) * k);
        EXPECT_EQ(mine, want[l][t].get<std::vector<std::int32_t>>()) << name << " prompt " << p << " layer " << l
                                                                     << " position " << t;
        ++compared;
      }
  }
  EXPECT_GT(compared, 0);
}

// gpt-oss's clamped SwiGLU at a limit the tiny model's values reach (its experts stay below the
// real limit of 7, so the parity above does not see the clamp): the folder's weights with
// swiglu_limit lowered as make_moe_fixtures.py lowered it in transformers, whose float64 last
// prompt logits (moved by max_logit_change from the unclamped ones) qkv's must match by R1.
TEST(GptOss, ClampedSwiGluMatchesTransformersAtALimitTheValuesReach) {
  const auto m = qkv::models::load_decoder(model_path("gpt_oss"));
  const nlohmann::json& check = reference()["gpt_oss"]["clamp_check"];
  qkv::models::DecoderSpec spec = m->spec();
  ASSERT_EQ(spec.moe.swiglu_limit, 7.f);
  spec.moe.swiglu_limit = check["swiglu_limit"].get<float>();
  const qkv::models::DecoderLM clamped(spec, m->weights());
  const auto prompts = prompts_of("gpt_oss");
  double moved = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const i64 last = static_cast<i64>(prompts[i].size()) - 1;
    const Tensor got = prompt_logits(clamped, prompts[i]).to(qkv::DType::F64).select(0, last);
    const std::string key = "gpt_oss_clamped.p" + std::to_string(i);
    const double err = logits_ref().at(key + ".err").item();
    EXPECT_LE(qkv::max_abs_diff(got, logits_ref().at(key + ".logits").to(qkv::DType::F64)), 2 * err + 1e-5) << key;
    moved = std::max(moved, qkv::max_abs_diff(got, prompt_logits(*m, prompts[i]).to(qkv::DType::F64).select(0, last)));
  }
  EXPECT_GT(moved, 0.5 * check["max_logit_change"].get<double>()) << "the clamp must bite";
}

// gpt-oss as OpenAI publishes it: a folder whose experts are MXFP4 pairs (*_blocks [E, rows, G, 16]
// with weights 2i and 2i + 1 in byte i's nibbles, *_scales [E, rows, G]; gate and up rows
// interleaved in gate_up_proj). Made here from gpt_oss.gguf (MXFP4 experts by llama-quantize):
// its expert blocks rewritten in that layout, every other tensor dequantized to float32. Read
// back, the experts are the GGUF's blocks and the logits the GGUF's.
TEST(GptOss, MxFp4ExpertsOfAFolderAsPublishedAreTheGgufs) {
  namespace fs = std::filesystem;
  using qkv::kernels::QMatrix;
  using qkv::kernels::QType;
  const auto g = qkv::models::load_decoder(model_path("gpt_oss_gguf"));
  const qkv::models::DecoderSpec& c = g->spec();
  const qkv::models::DecoderWeights& w = g->weights();
  const i64 E = c.moe.experts, F = c.moe.expert_ff, C = c.hidden_size;
  ASSERT_EQ(w.layers[0].expert_gate[0].type, QType::MXFP4);
  std::vector<std::vector<std::uint8_t>> store;  // the tensors' bytes, alive until written
  std::vector<qkv::io::StTensorView> views;
  auto add = [&](const std::string& name, qkv::io::StDType dt, qkv::Shape shape, std::vector<std::uint8_t> bytes) {
    store.push_back(std::move(bytes));
    views.push_back({name, dt, std::move(shape), store.back().data(), store.back().size()});
  };
  auto floats = [&](const std::string& name, qkv::Shape shape, const float* v) {
    i64 n = 1;
    for (i64 d : shape) n *= d;
    std::vector<std::uint8_t> b(static_cast<std::size_t>(n) * 4);
    std::memcpy(b.data(), v, b.size());
    add(name, qkv::io::StDType::F32, std::move(shape), std::move(b));
  };
  auto matrix = [&](const std::string& name, const QMatrix& m) {
    std::vector<float> f(static_cast<std::size_t>(m.rows * m.cols));
    for (i64 r = 0; r < m.rows; ++r)
      qkv::kernels::dequantize_row(m.type, static_cast<const std::uint8_t*>(m.data) + r * m.row_bytes, f.data() + r * m.cols,
                                   m.cols);
    floats(name, {m.rows, m.cols}, f.data());
  };
  // Expert matrices (rows of MXFP4 blocks) -> the published pair; `mats` interleaved by rows.
  auto pair = [&](const std::string& name, const std::vector<const std::vector<QMatrix>*>& mats) {
    const QMatrix& m0 = (*mats[0])[0];
    const i64 rows = m0.rows * static_cast<i64>(mats.size()), G = m0.cols / 32;
    std::vector<std::uint8_t> blocks, scales;
    for (i64 e = 0; e < E; ++e)
      for (i64 r = 0; r < rows; ++r) {
        const QMatrix& m = (*mats[static_cast<std::size_t>(r % static_cast<i64>(mats.size()))])[static_cast<std::size_t>(e)];
        const auto* row = static_cast<const std::uint8_t*>(m.data) + (r / static_cast<i64>(mats.size())) * m.row_bytes;
        for (i64 b = 0; b < G; ++b) {
          const std::uint8_t* blk = row + b * 17;  // { e; qs[16]: weight j low, j + 16 high }
          scales.push_back(blk[0]);
          auto code = [&](int j) { return j < 16 ? blk[1 + j] & 0x0F : blk[1 + j - 16] >> 4; };
          for (int i = 0; i < 16; ++i) blocks.push_back(static_cast<std::uint8_t>(code(2 * i) | code(2 * i + 1) << 4));
        }
      }
    add(name + "_blocks", qkv::io::StDType::U8, {E, rows, G, 16}, std::move(blocks));
    add(name + "_scales", qkv::io::StDType::U8, {E, rows, G}, std::move(scales));
  };
  matrix("model.embed_tokens.weight", w.embed);
  matrix("lm_head.weight", w.lm_head);
  floats("model.norm.weight", {C}, w.norm);
  for (i64 l = 0; l < c.num_layers(); ++l) {
    const auto& L = w.layers[static_cast<std::size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const auto& [n, lin] : {std::pair{"q_proj", &L.q}, {"k_proj", &L.k}, {"v_proj", &L.v}, {"o_proj", &L.o}}) {
      matrix(p + "self_attn." + n + ".weight", lin->w);
      floats(p + "self_attn." + n + ".bias", {lin->w.rows}, lin->bias);
    }
    floats(p + "self_attn.sinks", {c.num_heads}, L.sinks);
    floats(p + "input_layernorm.weight", {C}, L.attn_norm);
    floats(p + "post_attention_layernorm.weight", {C}, L.ffn_norm);
    matrix(p + "mlp.router.weight", L.router.w);
    floats(p + "mlp.router.bias", {E}, L.router.bias);
    pair(p + "mlp.experts.gate_up_proj", {&L.expert_gate, &L.expert_up});
    pair(p + "mlp.experts.down_proj", {&L.expert_down});
    std::vector<float> gub(static_cast<std::size_t>(E * 2 * F));
    for (i64 e = 0; e < E; ++e)
      for (i64 j = 0; j < F; ++j) {
        gub[static_cast<std::size_t>(e * 2 * F + 2 * j)] = L.expert_gate_bias[e * F + j];
        gub[static_cast<std::size_t>(e * 2 * F + 2 * j + 1)] = L.expert_up_bias[e * F + j];
      }
    floats(p + "mlp.experts.gate_up_proj_bias", {E, 2 * F}, gub.data());
    floats(p + "mlp.experts.down_proj_bias", {E, C}, L.expert_down_bias);
  }
  const fs::path dir = fs::path(::testing::TempDir()) / "qkv_gpt_oss_mxfp4_folder";
  fs::create_directories(dir);
  fs::copy_file(model_path("gpt_oss") + "/config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  qkv::io::write_safetensors((dir / "model.safetensors").string(), views);
  const auto f = qkv::models::load_decoder(dir.string());
  for (const auto* list : {&f->weights().layers[1].expert_gate, &f->weights().layers[1].expert_down})
    for (const QMatrix& m : *list) EXPECT_EQ(m.type, QType::MXFP4);
  for (i64 l = 0; l < c.num_layers(); ++l)
    for (i64 e = 0; e < E; ++e)
      for (const auto& [a, b] : {std::pair{&w.layers[l].expert_up, &f->weights().layers[l].expert_up},
                                 {&w.layers[l].expert_down, &f->weights().layers[l].expert_down}}) {
        const QMatrix& x = (*a)[static_cast<std::size_t>(e)];
        const QMatrix& y = (*b)[static_cast<std::size_t>(e)];
        EXPECT_EQ(std::memcmp(x.data, y.data, static_cast<std::size_t>(x.rows * x.row_bytes)), 0) << "layer " << l << " expert " << e;
      }
  for (const auto& ids : prompts_of("gpt_oss_gguf"))
    EXPECT_LE(qkv::max_abs_diff(prompt_logits(*f, ids), prompt_logits(*g, ids)), 1e-4);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, ArchParity, ::testing::ValuesIn(variants()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
INSTANTIATE_TEST_SUITE_P(Models, MoeParity, ::testing::ValuesIn(mixtures()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
