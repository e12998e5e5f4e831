// The Llama family against transformers (tests/reference/make_llama_fixtures.py): tiny random
// Llama (GQA, llama3 rope scaling, float32), Mistral (multi-query, sliding window 8, bfloat16,
// tied), Qwen2 (q/k/v biases, float16, sharded) folders, the same llama and qwen2 models as GGUF
// files (llama.cpp's permuted attn_q / attn_k; Q8_0, and a mix of Q4_0 ... BF16), and the real
// SmolLM2-135M-Instruct Q4_1 GGUF: prompt logits within the R1 rule of the float64 reference,
// greedy generation token for token (cached and batched with mixed lengths, and uncached),
// a divergence allowed only where transformers' top-2 margin is below 1e-3.
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

#include "qkv/infer/generate.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/io/tensors.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/models/decoder_io.h"
#include "decoder_parity_util.h"
#include "testing/fixture.h"
#include "testing/guards.h"
#include "testing/sanitizers.h"

namespace {

using qkv::testing::expect_same_tokens;
using qkv::testing::kNearTie;
using qkv::testing::prompt_logits;

using qkv::Tensor;
using i64 = std::int64_t;

const nlohmann::json& reference() {
  static const nlohmann::json j = qkv::testing::json_fixture("llama_family/reference.json");
  return j;
}
const qkv::io::LoadedTensors& logits_ref() {
  static const qkv::io::LoadedTensors t = qkv::testing::load_fixture("llama_family/logits.safetensors");
  return t;
}

std::string smollm2_path() { return std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

std::string model_path(const std::string& name) {
  if (name == "smollm2") return smollm2_path();
  if (name == "llama_gguf") return qkv::testing::fixture_path("llama_family/llama_q8_0.gguf");
  if (name == "qwen2_gguf") return qkv::testing::fixture_path("llama_family/qwen2_mixed.gguf");
  return qkv::testing::fixture_path("llama_family/" + name);
}

std::vector<std::vector<i64>> prompts_of(const std::string& name) {
  return reference()[name]["prompts"].get<std::vector<std::vector<i64>>>();
}



class LlamaParity : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaParity, PromptLogitsWithinR1OfFloat64) {
  const std::string name = GetParam();
  const auto model = qkv::models::load_decoder(model_path(name));
  const auto prompts = prompts_of(name);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const Tensor got = prompt_logits(*model, prompts[i]).to(qkv::DType::F64);
    const std::string key = name + ".p" + std::to_string(i);
    const double err = logits_ref().at(key + ".err").item();
    const i64 n = static_cast<i64>(prompts[i].size());
    if (name == "smollm2") {
      // The top 256 logits of the last position.
      const auto ids = logits_ref().at(key + ".top_ids").to_vector<i64>();
      const auto want = logits_ref().at(key + ".top_f64").to_vector<double>();
      double worst = 0;
      for (std::size_t j = 0; j < ids.size(); ++j)
        worst = std::max(worst, std::abs(got.at({n - 1, ids[j]}) - want[j]));
      EXPECT_LE(worst, 2 * err + 1e-5) << key << ": float32 reference spread " << err;
    } else {
      const Tensor want = logits_ref().at(key + ".f64");
      const Tensor last = got.narrow(0, n - 4, 4);
      const double worst = qkv::max_abs_diff(last, want);
      // R1 (REFERENCES section 2): c = 2 times transformers' own float32 error, floor 1e-5.
      EXPECT_LE(worst, 2 * err + 1e-5) << key << ": float32 reference spread " << err;
    }
  }
}

TEST_P(LlamaParity, GreedyGenerationCachedBatchedAndUncached) {
  const std::string name = GetParam();
  const auto model = qkv::models::load_decoder(model_path(name));
  const auto prompts = prompts_of(name);
  const nlohmann::json& r = reference()[name];
  const i64 n_new = static_cast<i64>(r["generated"][0].size());
  // All prompts at once: mixed lengths in one cache, each in its own slot.
  const auto batched = qkv::infer::generate(*model, prompts, {.max_new_tokens = n_new});
  for (std::size_t i = 0; i < prompts.size(); ++i)
    expect_same_tokens(batched[i].new_ids, r["generated"][i], r["margins"][i], name + " batched prompt " + std::to_string(i));
  // Alone, and without the cache (recomputing the whole sequence each step) for the first prompt.
  const auto alone = qkv::infer::generate(*model, {prompts[0]}, {.max_new_tokens = n_new});
  EXPECT_EQ(alone[0].new_ids, batched[0].new_ids) << name << ": a prompt's tokens depend on its batch";
  if (name != "smollm2") {
    const auto uncached = qkv::infer::generate(*model, {prompts[0]}, {.max_new_tokens = n_new, .use_cache = false});
    expect_same_tokens(uncached[0].new_ids, r["generated"][0], r["margins"][0], name + " uncached");
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaParity,
                         ::testing::Values("llama", "mistral", "qwen2", "llama_gguf", "qwen2_gguf", "smollm2"));

TEST(LlamaModel, DecodingTokenByTokenGivesThePromptLogits) {
  // The cache path (decode kernel, one token at a time) against the whole prompt at once
  // (FlashAttention); with Mistral's window 8 the prompt of 21 tokens crosses it.
  for (const std::string name : {"llama", "mistral", "qwen2"}) {
    const auto model = qkv::models::load_decoder(model_path(name));
    const std::vector<i64> ids = prompts_of(name)[2];
    const i64 n = static_cast<i64>(ids.size());
    const Tensor whole = prompt_logits(*model, ids);
    qkv::infer::KVCache cache(model->cache_options(1, n));
    for (i64 t = 0; t < n; ++t) {
      const Tensor step = model->forward_cached(Tensor::from_vector(std::vector<i64>{ids[static_cast<std::size_t>(t)]}, {1, 1}),
                                                {1}, cache);
      EXPECT_LE(qkv::max_abs_diff(step.select(0, 0), whole.select(0, t)), 1e-4) << name << " position " << t;
    }
  }
}

// A decoding step over a long context (1000 cached keys: each key/value head's keys split into
// chunks) runs as one team, the decode kernel's chunks shared among its members; a step where
// another sequence prefills runs the kernel outside a team; a step where both decode one token
// reads Q and writes O in place. The decoding sequence's logits are the same bits every way and
// for 1 or 2 threads, and those of the whole prompt at once.
TEST(LlamaModel, LongContextDecodeStepGivesTheSameBitsInATeamOrNot) {
  qkv::testing::ThreadsGuard tg;
  const auto m = qkv::models::load_decoder(smollm2_path());
  // 1000 keys: 3 chunks for SmolLM2's 3 key/value heads; 600 under the sanitizers: 2 chunks.
  const i64 V = m->vocab_size(), n0 = qkv::testing::full_or_reduced<i64>(1000, 600);
  ASSERT_GT(qkv::kernels::decode_attention_splits(1, 1, n0 + 1), 1) << "the step must split its keys";
  std::vector<i64> prompt(static_cast<std::size_t>(n0 + 1));
  for (i64 j = 0; j <= n0; ++j) prompt[static_cast<std::size_t>(j)] = (j * 7919 + 13) % V;
  qkv::set_num_threads(2);
  qkv::infer::KVCache cache(m->cache_options(2, n0 + 16));
  {  // sequence 0: n0 tokens; sequence 1: 5
    std::vector<i64> ids(static_cast<std::size_t>(2 * n0), 1);
    std::copy(prompt.begin(), prompt.begin() + n0, ids.begin());
    m->forward_cached(Tensor::from_vector(ids, {2, n0}), {n0, 5}, cache);
  }
  const i64 last = prompt[static_cast<std::size_t>(n0)];
  auto step = [&](int threads, i64 other_new) {
    qkv::set_num_threads(threads);
    qkv::infer::KVCache c = cache;
    const i64 w = std::max<i64>(1, other_new);
    std::vector<i64> ids(static_cast<std::size_t>(2 * w), 3);
    ids[0] = last;
    return m->forward_cached(Tensor::from_vector(ids, {2, w}), {1, other_new}, c).select(0, 0).contiguous();
  };
  const Tensor team2 = step(2, 0), team1 = step(1, 0);
  const Tensor mixed = step(2, qkv::infer::kDecodeKernelMaxQueries + 3);  // sequence 1 prefills: no team
  EXPECT_EQ(0, std::memcmp(team2.data<float>(), team1.data<float>(), static_cast<std::size_t>(V) * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(team2.data<float>(), mixed.data<float>(), static_cast<std::size_t>(V) * sizeof(float)));
  // Both sequences decoding one token: the decode kernel reads q and writes att in place.
  const Tensor both2 = step(2, 1), both1 = step(1, 1);
  EXPECT_EQ(0, std::memcmp(team2.data<float>(), both2.data<float>(), static_cast<std::size_t>(V) * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(team2.data<float>(), both1.data<float>(), static_cast<std::size_t>(V) * sizeof(float)));
  qkv::set_num_threads(2);
  const Tensor whole = prompt_logits(*m, prompt);
  EXPECT_LE(qkv::max_abs_diff(team2, whole.select(0, n0)), 2e-3);
}

// Q8 activations put SmolLM2's Q4_1 and Q8_0 matrices in the decode layout where the kernels read
// it (AVX2, and AVX-512 VNNI: each ISA the CPU has, the exact logits taken on it) and give the
// file's pages back. The prompt's logits (prefill panels packed from the layout) and a
// token-by-token decode (decode rows from it, the tied embedding looked up in it) are bit for bit
// those of the same model without the layout (set to Q8 while the scalar kernels, which do not
// read it, were active), and within the Q8 path's error of the exact ones; the layout holds the
// matrices' bytes and stays this model's (a model built from its weights reads the blocks); back
// on F32 it is gone and the logits are the exact ones again, bit for bit (the given-back pages
// read from the file again).
void q8_layout_keeps_the_logits(qkv::kernels::Isa isa) {
  SCOPED_TRACE(std::string("ISA ") + qkv::kernels::isa_name(isa));
  qkv::testing::IsaGuard isa_guard;
  qkv::kernels::set_isa(isa);
  const auto m = qkv::models::load_decoder(smollm2_path());
  const auto plain = qkv::models::load_decoder(smollm2_path());
  const std::vector<i64> ids = {1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 28, 7018, 288, 253, 30, 2};
  const i64 n = static_cast<i64>(ids.size());
  const Tensor exact = prompt_logits(*m, ids);
  qkv::kernels::set_isa(qkv::kernels::Isa::Scalar);
  plain->set_activations(qkv::kernels::QActivations::Q8);
  qkv::kernels::set_isa(isa);
  m->set_activations(qkv::kernels::QActivations::Q8);
  EXPECT_EQ(plain->decode_layout_bytes(), 0);
  if (isa >= qkv::kernels::Isa::Avx2) {
    EXPECT_GT(m->decode_layout_bytes(), m->weight_bytes() * 9 / 10);
    // One buffer, the matrices in the order a step reads them, each where the last one ended
    // (64-byte aligned): a decode step streams one run of memory (huge pages, kept in the TLB).
    const auto& w = m->weights();
    std::vector<const qkv::kernels::QMatrix*> order;
    for (const auto& L : w.layers)
      for (const auto* lin : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) order.push_back(&lin->w);
    order.push_back(&w.lm_head);
    const auto* at = static_cast<const std::uint8_t*>(order.front()->rows8);
    ASSERT_NE(at, nullptr);
    for (const auto* q : order) {
      EXPECT_EQ(q->rows8, at) << "a layout out of reading order";
      at += (qkv::kernels::qgemm_rows8_bytes(*q) + 63) / 64 * 64;
    }
    EXPECT_EQ(at - static_cast<const std::uint8_t*>(order.front()->rows8), m->decode_layout_bytes());
  } else {
    EXPECT_EQ(m->decode_layout_bytes(), 0);
  }
  {  // a model built from these weights reads the blocks, not this model's layout
    const qkv::models::DecoderLM copy(m->spec(), m->weights());
    for (const auto& L : copy.weights().layers) EXPECT_EQ(L.down.w.rows8, nullptr);
    EXPECT_EQ(copy.weights().lm_head.rows8, nullptr);
    EXPECT_EQ(copy.weights().embed.rows8, nullptr);
  }
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() &&
           std::memcmp(a.data<float>(), b.data<float>(), static_cast<std::size_t>(a.numel()) * 4) == 0;
  };
  const Tensor q8 = prompt_logits(*m, ids);
  EXPECT_TRUE(same_bits(q8, prompt_logits(*plain, ids))) << "prompt logits with and without the decode layout";
  qkv::infer::KVCache cache(m->cache_options(1, n)), cache2(plain->cache_options(1, n));
  double worst = 0, steps = 0;
  i64 same = 0;
  for (i64 t = 0; t < n; ++t) {
    const Tensor id = Tensor::from_vector(std::vector<i64>{ids[static_cast<std::size_t>(t)]}, {1, 1});
    const Tensor step = m->forward_cached(id, {1}, cache).select(0, 0);
    EXPECT_TRUE(same_bits(step, plain->forward_cached(id, {1}, cache2).select(0, 0))) << "decode step " << t;
    const Tensor e = exact.select(0, t);
    worst = std::max(worst, qkv::max_abs_diff(q8.select(0, t), e));
    steps = std::max(steps, qkv::max_abs_diff(step, e));
    const float* a = step.data<float>();
    const float* b = e.data<float>();
    const i64 V = e.numel();
    same += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
  }
  std::printf("[ q8 layout ] max |q8 - exact| prompt %.4g, decode %.4g; argmax equal at %lld of %lld\n", worst, steps,
              static_cast<long long>(same), static_cast<long long>(n));
  EXPECT_LT(worst, 4.0);
  EXPECT_LT(steps, 4.0);
  EXPECT_GE(same, n - 3);
  m->set_activations(qkv::kernels::QActivations::F32);
  EXPECT_EQ(m->decode_layout_bytes(), 0);
  EXPECT_TRUE(same_bits(prompt_logits(*m, ids), exact)) << "exact logits after the layout was dropped";
}

TEST(LlamaModel, QEightDecodeLayoutKeepsTheLogits) {
  for (qkv::kernels::Isa isa : {qkv::kernels::Isa::Avx2, qkv::kernels::Isa::Avx512})
    if (isa <= qkv::kernels::detected_isa()) q8_layout_keeps_the_logits(isa);
}

TEST(LlamaModel, AvxTwoPathGivesTheSameTokens) {
  const auto model = qkv::models::load_decoder(model_path("qwen2_gguf"));
  const auto prompts = prompts_of("qwen2_gguf");
  const nlohmann::json& r = reference()["qwen2_gguf"];
  const qkv::kernels::Isa was = qkv::kernels::active_isa();
  qkv::kernels::set_isa(qkv::kernels::Isa::Avx2);
  const auto got = qkv::infer::generate(*model, prompts, {.max_new_tokens = 40});
  qkv::kernels::set_isa(was);
  for (std::size_t i = 0; i < prompts.size(); ++i)
    expect_same_tokens(got[i].new_ids, r["generated"][i], r["margins"][i], "AVX2 prompt " + std::to_string(i));
}

}  // namespace
