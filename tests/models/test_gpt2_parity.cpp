// The tiny GPT-2 of tests/fixtures/gpt2_tiny (trained by transformers; see
// tests/reference/fixture_index.md, block gpt2_tiny) against transformers' numbers:
// token ids, prompt logits, hidden states, greedy generation token for token (cached,
// uncached, batched) and the per-step logits of generate.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/infer/generate.h"
#include "qkv/io/tensors.h"
#include "qkv/models/gpt2.h"
#include "qkv/tokenize/bpe.h"
#include "testing/fixture.h"

namespace {

using qkv::Tensor;
using i64 = std::int64_t;

// transformers' own float32 spread between its attention paths is ~5e-6 (fixture index);
// qkv's kernels sum in other orders, so logits of a few units agree to ~1e-5. 1e-4 leaves room
// for other CPUs while a wrong weight or mask moves logits by 1e-2 and more.
constexpr double kAtol = 1e-4;

struct Reference {
  nlohmann::json j;
  qkv::io::LoadedTensors t;
  std::shared_ptr<qkv::models::GPT2LMHeadModel> model;
};

const Reference& ref() {
  static const Reference r = [] {
    Reference x;
    std::ifstream f(qkv::testing::fixture_path("gpt2_tiny_reference.json"));
    x.j = nlohmann::json::parse(f);
    x.t = qkv::testing::load_fixture("gpt2_tiny_logits.safetensors");
    x.model = qkv::models::load_gpt2(qkv::testing::fixture_path("gpt2_tiny"));
    return x;
  }();
  return r;
}

std::vector<i64> ids_of(const nlohmann::json& p) { return p["ids"].get<std::vector<i64>>(); }

Tensor forward(const std::vector<i64>& ids) {
  qkv::autograd::NoGradGuard ng;
  return ref().model->forward(Tensor::from_vector(ids, {1, static_cast<i64>(ids.size())})).select(0, 0);
}

TEST(Gpt2Parity, TokenizerGivesTransformersIds) {
  const auto bpe = qkv::tokenize::ByteLevelBPE::from_folder(qkv::testing::fixture_path("gpt2_tiny"));
  for (const auto& p : ref().j["prompts"]) {
    EXPECT_EQ(bpe.encode(p["text"].get<std::string>()), ids_of(p)) << p["name"];
    EXPECT_EQ(bpe.decode(p["new_ids"].get<std::vector<i64>>()), p["new_text"].get<std::string>()) << p["name"];
  }
}

TEST(Gpt2Parity, PromptLogitsMatchTransformers) {
  double worst = 0;
  for (const auto& p : ref().j["prompts"]) {
    // The fixture keeps the logits of the prompt's last rows (all of a short prompt's).
    const Tensor& want = ref().t.at(p["logits_tensor"].get<std::string>());
    const Tensor all = forward(ids_of(p));
    const Tensor got = all.narrow(0, all.size(0) - want.size(0), want.size(0));
    qkv::testing::expect_close(got, want, 0, kAtol, "logits of prompt " + p["name"].get<std::string>());
    worst = std::max(worst, qkv::max_abs_diff(got.to(qkv::DType::F64), want.to(qkv::DType::F64)));
  }
  std::cout << "[ gpt2     ] max |logits - transformers| over the prompts: " << worst << "\n";
  RecordProperty("max_abs_diff", std::to_string(worst));
}

TEST(Gpt2Parity, HiddenStatesLocateAnyDivergence) {
  const auto& acts = ref().j["activations"];
  std::vector<i64> ids;
  for (const auto& p : ref().j["prompts"])
    if (p["name"] == acts["prompt"]) ids = ids_of(p);
  ASSERT_FALSE(ids.empty());
  qkv::autograd::NoGradGuard ng;
  const auto hs = ref().model->hidden_states(Tensor::from_vector(ids, {1, static_cast<i64>(ids.size())}));
  ASSERT_EQ(hs.size(), 3u);
  for (std::size_t l = 0; l < hs.size(); ++l)
    qkv::testing::expect_close(hs[l].select(0, 0), ref().t.at("hidden." + std::to_string(l)), 0, kAtol,
                               "hidden state " + std::to_string(l));
}

TEST(Gpt2Parity, GreedyGenerationTokenForTokenCachedAndUncached) {
  const i64 n = ref().j["max_new_tokens"].get<i64>();
  for (bool cache : {true, false})
    for (const auto& p : ref().j["prompts"]) {
      // transformers ran exactly n steps without stopping at <|endoftext|>.
      const auto r = qkv::infer::generate(*ref().model, {ids_of(p)}, {.max_new_tokens = n, .use_cache = cache});
      EXPECT_EQ(r[0].new_ids, p["new_ids"].get<std::vector<i64>>()) << p["name"] << (cache ? " cached" : " uncached");
    }
}

TEST(Gpt2Parity, StepLogitsOfGenerateThroughTheCache) {
  const auto& s = ref().j["step_logits"];
  const Tensor& want = ref().t.at(s["tensor"].get<std::string>());
  std::vector<i64> ids, new_ids;
  for (const auto& p : ref().j["prompts"])
    if (p["name"] == s["prompt"]) ids = ids_of(p), new_ids = p["new_ids"].get<std::vector<i64>>();
  ASSERT_FALSE(ids.empty());
  const auto& m = *ref().model;
  qkv::infer::KVCache cache(m.cache_options(1, 128));
  std::vector<i64> feed = ids;
  for (i64 k = 0; k < want.size(0); ++k) {
    const Tensor logits = m.forward_cached(Tensor::from_vector(feed, {1, static_cast<i64>(feed.size())}),
                                           {static_cast<i64>(feed.size())}, cache);
    qkv::testing::expect_close(logits.select(0, 0), want.select(0, k), 0, kAtol, "step " + std::to_string(k));
    feed = {new_ids[static_cast<std::size_t>(k)]};
  }
}

TEST(Gpt2Parity, BatchedGenerationEqualsTransformersBatch) {
  // transformers ran the prompts left-padded in one batch; qkv gives each its own cache slot.
  std::vector<std::vector<i64>> prompts;
  for (const auto& p : ref().j["prompts"]) prompts.push_back(ids_of(p));
  const auto r = qkv::infer::generate(*ref().model, prompts, {.max_new_tokens = ref().j["max_new_tokens"].get<i64>()});
  const auto want = ref().j["batch"]["new_ids"].get<std::vector<std::vector<i64>>>();
  ASSERT_EQ(r.size(), want.size());
  for (std::size_t b = 0; b < r.size(); ++b) EXPECT_EQ(r[b].new_ids, want[b]) << "row " << b;
}

}  // namespace
