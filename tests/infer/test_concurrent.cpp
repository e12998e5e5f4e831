// One loaded model serving several user threads at once (REFERENCES.md section 5 item 14):
// 8 threads x 50 requests of mixed sizes against one model of each kind, every result equal
// bit for bit to the same request served alone, the weights unchanged afterwards and the
// process-wide random generator never drawn from. Three servers:
//   Encoder      a TransformerEncoder stack + a cross-attention MultiHeadAttention (eval mode)
//   Generator    the tiny GPT-2 folder of the fixtures driven as `qkv generate` drives it (BPE
//                encode, infer::generate with a KV cache per request, streamed decode), greedy
//                and seeded sampling, cached and recomputed
//   Embedder     infer::SentenceEmbedder on all-MiniLM-L6-v2 (needs `make models`; fails
//                without it, like test_bert)
// The pool has 2 threads, so every user thread's kernels fork and most calls find the pool
// taken by another user thread (and run their chunks on their own thread).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "qkv/autograd/autograd.h"
#include "qkv/core/rng.h"
#include "qkv/infer/embed.h"
#include "qkv/infer/generate.h"
#include "qkv/models/gpt2.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops/ops.h"
#include "qkv/tokenize/bpe.h"
#include "testing/concurrent.h"
#include "testing/guards.h"

namespace {

using namespace qkv;
using qkv::testing::kPoolThreads;
using qkv::testing::kRequestsPerThread;
using qkv::testing::kUserThreads;
using qkv::testing::same_bits;
using qkv::testing::serve_concurrently;
using i64 = std::int64_t;

constexpr int kRequests = kUserThreads * kRequestsPerThread;

// A deep copy of every parameter and buffer, to show serving left them untouched.
nn::StateDict snapshot(const nn::Module& m) {
  nn::StateDict sd = m.state_dict();
  for (auto& [name, t] : sd) t = t.detach().contiguous().clone();
  return sd;
}

void expect_unchanged(const nn::StateDict& before, const nn::Module& m) {
  const nn::StateDict after = m.state_dict();
  ASSERT_EQ(before.size(), after.size());
  for (const auto& [name, t] : before) EXPECT_TRUE(same_bits(t, after.at(name))) << name << " changed while serving";
}

// The process-wide generator's state, to show inference never draws from it.
struct GeneratorState {
  std::uint64_t seed = default_generator().seed(), offset = default_generator().offset();
  bool operator==(const GeneratorState&) const = default;
};

// ---- (a) an encoder stack and a cross-attention module ----

constexpr i64 kEncWidth = 96;

struct EncoderRequest {
  Tensor x, memory;  // [B, L, E], [B, S, E]
  Mask self_mask, cross_mask;
  bool need_weights = false, record_graph = false;
};

// Request r: batch 1..3, lengths 1..40 (row kernel up to 32 keys, tiled past it), four mask kinds,
// the attention weights for some, and for every fifth autograd left on (the graph is the caller's).
EncoderRequest encoder_request(int r) {
  Generator gen(1000 + static_cast<std::uint64_t>(r));
  const i64 B = 1 + r % 3, L = 1 + (r * 7) % 40, S = 1 + (r * 11) % 37;
  EncoderRequest q;
  q.x = Tensor::randn({B, L, kEncWidth}, &gen);
  q.memory = Tensor::randn({B, S, kEncWidth}, &gen);
  std::vector<int> keep(static_cast<std::size_t>(B * S));
  for (i64 b = 0; b < B; ++b)
    for (i64 j = 0; j < S; ++j) keep[static_cast<std::size_t>(b * S + j)] = j < S - b;  // row b pads its last b keys
  const Mask padding = Mask::keep(Tensor::from_bools(keep, {B, 1, 1, S}));
  switch (r % 4) {
    case 0: break;
    case 1: q.self_mask = Mask::causal(); break;
    case 2: q.cross_mask = padding; break;
    default: q.self_mask = Mask::causal(), q.cross_mask = padding; break;
  }
  q.need_weights = r % 2 == 1;
  q.record_graph = r % 5 == 0;
  return q;
}

struct EncoderServer {
  nn::TransformerEncoder encoder{nn::EncoderOptions{
      .num_layers = 2,
      .layer = {.d_model = kEncWidth, .num_heads = 4, .d_ff = 256, .dropout = 0.1, .norm_first = true},
      .final_norm = true}};
  nn::MultiHeadAttention cross{nn::MultiHeadAttentionOptions{.embed_dim = kEncWidth, .num_heads = 6, .dropout = 0.1}};
  EncoderServer() {
    encoder.eval();  // inference mode: the dropout layers pass through
    cross.eval();
  }
  // -> {encoder output, cross-attention output, its weights (undefined unless asked)}
  std::vector<Tensor> serve(const EncoderRequest& q) const {
    autograd::NoGradGuard no_grad;
    autograd::set_grad_enabled(q.record_graph);
    const Tensor h = encoder.forward(q.x, q.self_mask);
    AttentionOutput a = cross.forward(h, q.memory, q.memory, q.cross_mask, q.need_weights);
    return {h.detach(), a.output.detach(), a.weights.defined() ? a.weights.detach() : Tensor()};
  }
};

TEST(Concurrent, EncoderStackServesEightThreadsBitwiseAsAlone) {
  qkv::testing::ThreadsGuard guard;
  set_num_threads(kPoolThreads);
  manual_seed(7);
  const EncoderServer server;
  std::vector<EncoderRequest> requests;
  for (int r = 0; r < kRequests; ++r) requests.push_back(encoder_request(r));
  std::vector<std::vector<Tensor>> alone(kRequests), together(kRequests);
  for (int r = 0; r < kRequests; ++r) alone[r] = server.serve(requests[r]);
  const nn::StateDict before = snapshot(server.encoder), before_cross = snapshot(server.cross);
  const GeneratorState rng;

  const auto errors = serve_concurrently(kUserThreads, kRequests, [&](int r) { together[r] = server.serve(requests[r]); });
  EXPECT_TRUE(errors.empty()) << errors.size() << " requests threw, first: " << errors.front();
  int wrong = 0;
  for (int r = 0; r < kRequests; ++r) {
    ASSERT_EQ(together[r].size(), 3u) << "request " << r;
    for (std::size_t i = 0; i < 3; ++i)
      if (!same_bits(alone[r][i], together[r][i])) {
        ++wrong;
        ADD_FAILURE() << "request " << r << " output " << i << " differs from the request served alone";
      }
  }
  EXPECT_EQ(wrong, 0);
  expect_unchanged(before, server.encoder);
  expect_unchanged(before_cross, server.cross);
  EXPECT_TRUE(GeneratorState{} == rng) << "inference drew from default_generator()";
}

// ---- (b) GPT-2 generation, a KV cache per request ----
// The committed tiny GPT-2 folder (tests/fixtures/gpt2_tiny: weights, vocab.json, merges.txt),
// driven as `qkv generate` drives it: text prompts -> ByteLevelBPE ids -> infer::generate with a
// streaming decoder per sequence in the token callback -> text.

const std::vector<std::string> kPrompts = {
    "In the beginning",
    "And God said, Let there be light: and there was light.",
    "The",
    "Blessed are the meek: for they shall inherit the earth. Blessed are they",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "Hello, world",
    "For God so loved the world, that he gave",
    "Let",
};

struct GenerateRequest {
  std::vector<std::string> texts;
  infer::GenerationOptions options;
};

// Request r: 1..3 prompts (1 to ~20 tokens), 3..12 new tokens, greedy or sampled (temperature,
// top-k, top-p, seed r), eos on for some, the recompute path (no cache) for every seventh.
GenerateRequest generate_request(int r, std::int64_t eos) {
  GenerateRequest q;
  for (int b = 0; b < 1 + r % 3; ++b) q.texts.push_back(kPrompts[static_cast<std::size_t>((r * 3 + b * 5) % 8)]);
  q.options.max_new_tokens = 3 + r % 10;
  if (r % 3 != 0)
    q.options.sampling = {.temperature = 0.7 + 0.1 * (r % 4),
                          .top_k = r % 2 ? 0 : 40,
                          .top_p = r % 3 == 2 ? 0.9 : 1.0,
                          .seed = static_cast<std::uint64_t>(r)};
  if (r % 4 == 1) q.options.eos_id = eos;
  q.options.use_cache = r % 7 != 3;
  return q;
}

struct Generated {
  std::vector<std::vector<i64>> ids;
  std::vector<infer::StopReason> reasons;
  std::vector<std::string> texts;  // streamed through a StreamDecoder, as the CLI prints them
  bool operator==(const Generated&) const = default;
};

Generated run(const infer::CausalLM& model, const tokenize::ByteLevelBPE& tok, const GenerateRequest& q) {
  std::vector<std::vector<i64>> prompts;
  for (const std::string& t : q.texts) prompts.push_back(tok.encode(t));
  Generated g;
  g.texts.resize(prompts.size());
  std::vector<tokenize::StreamDecoder> dec(prompts.size(), tokenize::StreamDecoder(std::make_shared<tokenize::ByteLevelBPE>(tok)));
  auto on_token = [&](i64 b, i64 id) {
    g.texts[static_cast<std::size_t>(b)] += dec[static_cast<std::size_t>(b)].push(id);
    return true;
  };
  for (const auto& res : infer::generate(model, prompts, q.options, on_token)) {
    g.ids.push_back(res.new_ids);
    g.reasons.push_back(res.reason);
  }
  for (std::size_t b = 0; b < dec.size(); ++b) g.texts[b] += dec[b].finish();
  return g;
}

TEST(Concurrent, Gpt2GeneratorServesEightThreadsBitwiseAsAlone) {
  qkv::testing::ThreadsGuard guard;
  set_num_threads(kPoolThreads);
  const std::string dir = std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny";
  const auto model = models::load_gpt2(dir);
  const tokenize::ByteLevelBPE tok = tokenize::ByteLevelBPE::from_folder(dir);
  ASSERT_TRUE(tok.eos_id().has_value());
  std::vector<GenerateRequest> requests;
  for (int r = 0; r < kRequests; ++r) requests.push_back(generate_request(r, *tok.eos_id()));
  std::vector<Generated> alone(kRequests), together(kRequests);
  for (int r = 0; r < kRequests; ++r) alone[r] = run(*model, tok, requests[r]);
  const nn::StateDict before = snapshot(*model);
  const GeneratorState rng;

  const auto errors =
      serve_concurrently(kUserThreads, kRequests, [&](int r) { together[r] = run(*model, tok, requests[r]); });
  EXPECT_TRUE(errors.empty()) << errors.size() << " requests threw, first: " << errors.front();
  int wrong = 0, sampled = 0, distinct = 0;
  for (int r = 0; r < kRequests; ++r) {
    if (!(together[r] == alone[r])) {
      ++wrong;
      ADD_FAILURE() << "request " << r << " generated other tokens than alone";
    }
    sampled += requests[r].options.sampling.temperature > 0;
    distinct += r > 0 && alone[r].ids != alone[r - 1].ids;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(sampled, kRequests / 2);
  EXPECT_GT(distinct, kRequests / 2) << "the requests should differ";
  expect_unchanged(before, *model);
  EXPECT_TRUE(GeneratorState{} == rng) << "generation drew from default_generator()";
}

// ---- (c) sentence embeddings with all-MiniLM-L6-v2 ----

const std::vector<std::string> kSentences = {
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "In the beginning God created the heaven and the earth.",
    "Hi",
    "Thread pools, caches and random generators must not be shared by accident.",
};

// Request r of 24 distinct ones: 1..4 sentences (mixed lengths), batch size 1..3.
struct EmbedRequest {
  std::vector<std::string> texts;
  infer::EmbedOptions options;
};

EmbedRequest embed_request(int r) {
  const int k = r % 24;
  EmbedRequest q;
  for (int i = 0; i <= k % 4; ++i) q.texts.push_back(kSentences[static_cast<std::size_t>((k * 5 + i * 7) % 12)]);
  q.options.batch_size = 1 + k % 3;
  return q;
}

// Under ThreadSanitizer (make test-tsan) an embedding runs ~25x slower (this test took 319 s):
// there the test runs in reduced size, 8 threads x 6 requests (each distinct request twice).
#if defined(__SANITIZE_THREAD__)
constexpr int kEmbedRequests = kUserThreads * 6;
#else
constexpr int kEmbedRequests = kRequests;
#endif

TEST(Concurrent, SentenceEmbedderServesEightThreadsBitwiseAsAlone) {
  const std::string dir = std::string(QKV_SOURCE_DIR) + "/models/all-MiniLM-L6-v2";
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors")) << dir << " is missing: run `make models`";
  qkv::testing::ThreadsGuard guard;
  set_num_threads(kPoolThreads);
  const infer::SentenceEmbedder embedder = infer::SentenceEmbedder::from_folder(dir);
  std::vector<Tensor> alone(24), together(kEmbedRequests);
  for (int k = 0; k < 24; ++k) {
    const EmbedRequest q = embed_request(k);
    alone[k] = embedder.embed(q.texts, q.options);
  }
  const nn::StateDict before = snapshot(embedder.model());
  const GeneratorState rng;

  const auto errors = serve_concurrently(kUserThreads, kEmbedRequests, [&](int r) {
    const EmbedRequest q = embed_request(r);
    together[r] = embedder.embed(q.texts, q.options);
  });
  EXPECT_TRUE(errors.empty()) << errors.size() << " requests threw, first: " << errors.front();
  int wrong = 0;
  for (int r = 0; r < kEmbedRequests; ++r)
    if (!same_bits(alone[r % 24], together[r])) {
      ++wrong;
      ADD_FAILURE() << "request " << r << " embedded differently from alone";
    }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(alone[3].shape(), (Shape{4, 384}));
  expect_unchanged(before, embedder.model());
  EXPECT_TRUE(GeneratorState{} == rng) << "embedding drew from default_generator()";
}

}  // namespace
