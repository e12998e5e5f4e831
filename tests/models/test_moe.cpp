// Mixtures of experts in the one decoder (models/decoder.h, kernels/moe.h): the router's choices
// and weights (softmax then top-k, renormalised or not, top-k then softmax, ties, NaN logits), and
// the step's expert path against what it must equal: a mixture whose experts are all the same
// feed-forward is that feed-forward (the dense model's logits), and a mixture of different experts
// gives each sequence of a batch the bits it gets alone, on one thread or two, decoding or not.
// Parity with transformers on trained Mixtral, Qwen3-MoE and OLMoE models is test_arch_parity's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"
#include "qkv/kernels/moe.h"
#include "qkv/models/decoder_io.h"
#include "testing/fixture.h"

namespace {

using qkv::Tensor;
using qkv::kernels::MoeGating;
using qkv::kernels::MoeRouting;
using qkv::models::DecoderLM;
using i64 = std::int64_t;

struct Route {
  std::vector<std::int32_t> experts;
  std::vector<float> weights;
};
Route route(const std::vector<float>& logits, i64 E, i64 k, MoeRouting r) {
  const i64 R = static_cast<i64>(logits.size()) / E;
  Route out{std::vector<std::int32_t>(static_cast<std::size_t>(R * k)), std::vector<float>(static_cast<std::size_t>(R * k))};
  qkv::kernels::moe_route(logits.data(), R, E, k, r, out.experts.data(), out.weights.data());
  return out;
}

TEST(MoeRoute, SoftmaxThenTopKAsTransformers) {
  // softmax([1, 3, 2, 0]) = [0.0871, 0.6439, 0.2369, 0.0321]
  const std::vector<float> s = {1.f, 3.f, 2.f, 0.f};
  double z = 0;
  for (float v : s) z += std::exp(static_cast<double>(v));
  const Route plain = route(s, 4, 2, {});
  EXPECT_EQ(plain.experts, (std::vector<std::int32_t>{1, 2}));
  EXPECT_NEAR(plain.weights[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(plain.weights[1], std::exp(2.0) / z, 1e-6);
  const Route norm = route(s, 4, 2, {.renormalize = true});
  EXPECT_NEAR(norm.weights[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(norm.weights[0] + norm.weights[1], 1.0, 1e-6);
  const Route topk_first = route(s, 4, 2, {.gating = MoeGating::TopKSoftmax});
  EXPECT_EQ(topk_first.experts, plain.experts);
  EXPECT_NEAR(topk_first.weights[1], 1.0 / (1.0 + std::exp(1.0)), 1e-6);
  const Route scaled = route(s, 4, 2, {.renormalize = true, .scale = 2.5f});
  EXPECT_NEAR(scaled.weights[0], 2.5 * norm.weights[0], 1e-6);
  // Rows are routed independently.
  const Route two = route({1.f, 3.f, 2.f, 0.f, 0.f, 0.f, 5.f, 1.f}, 4, 1, {});
  EXPECT_EQ(two.experts, (std::vector<std::int32_t>{1, 2}));
}

TEST(MoeRoute, TiesTakeTheLowerExpertAndNaNIsNeverPreferred) {
  EXPECT_EQ(route({2.f, 5.f, 5.f, 5.f}, 4, 2, {}).experts, (std::vector<std::int32_t>{1, 2}));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const Route r = route({nan, 1.f, nan, 0.f}, 4, 3, {});
  EXPECT_EQ(r.experts[0], 1);
  EXPECT_EQ(r.experts[1], 3);
  EXPECT_EQ(r.weights[2], 0.f);  // a NaN logit has probability 0
  for (float w : r.weights) EXPECT_FALSE(std::isnan(w));
  // Nothing to choose by: the first k experts, equally.
  for (const auto& row : {std::vector<float>{nan, nan, nan}, std::vector<float>{-inf, -inf, -inf}}) {
    const Route u = route(row, 3, 2, {.renormalize = true});
    EXPECT_EQ(u.experts, (std::vector<std::int32_t>{0, 1}));
    EXPECT_EQ(u.weights, (std::vector<float>{0.5f, 0.5f}));
  }
  EXPECT_THROW(route({1.f, 2.f}, 2, 3, {}), qkv::ValueError);
  EXPECT_THROW(route({1.f, 2.f}, 2, 0, {}), qkv::ValueError);
}

// A model of the dense llama fixture whose feed-forwards are mixtures: expert e of layer l is the
// feed-forward of layer (l + e * shift) % L (shift 0: every expert the layer's own), the router a
// fixed pseudo-random [E, C] matrix.
std::shared_ptr<DecoderLM> as_mixture(const DecoderLM& dense, i64 E, i64 k, i64 shift, bool renormalize) {
  qkv::models::DecoderSpec s = dense.spec();
  qkv::models::DecoderWeights w = dense.weights();
  const i64 L = s.num_layers(), C = s.hidden_size;
  s.moe = {.experts = E, .top_k = k, .expert_ff = s.intermediate_size, .routing = {.renormalize = renormalize}};
  auto router = std::make_shared<std::vector<float>>();
  for (i64 i = 0; i < E * C; ++i) router->push_back(static_cast<float>(std::sin(0.7 * static_cast<double>(i) + 0.3)));
  w.keep_alive.push_back(router);
  for (i64 l = 0; l < L; ++l) {
    s.layers[static_cast<std::size_t>(l)].moe = true;
    auto& W = w.layers[static_cast<std::size_t>(l)];
    W.router.w = qkv::kernels::qmatrix(qkv::kernels::QType::F32, router->data(), E, C);
    for (i64 e = 0; e < E; ++e) {
      const auto& src = dense.weights().layers[static_cast<std::size_t>((l + e * shift) % L)];
      W.expert_gate.push_back(src.gate.w);
      W.expert_up.push_back(src.up.w);
      W.expert_down.push_back(src.down.w);
    }
    W.gate = W.up = W.down = {};
  }
  return std::make_shared<DecoderLM>(s, w);
}

std::vector<i64> ids_of(i64 n, i64 V, i64 seed) {
  std::vector<i64> ids;
  for (i64 i = 0; i < n; ++i) ids.push_back((i * 7 + seed * 13 + 3) % V);
  return ids;
}

Tensor all_logits(const DecoderLM& m, const std::vector<i64>& ids) {
  qkv::infer::KVCache cache(m.cache_options(1, static_cast<i64>(ids.size())));
  return m.forward_cached(Tensor::from_vector(ids, {1, static_cast<i64>(ids.size())}), {static_cast<i64>(ids.size())},
                          cache, true);
}

TEST(MoeDecoder, IdenticalExpertsAreTheDenseFeedForward) {
  const auto dense = qkv::models::load_decoder(qkv::testing::fixture_path("llama_family/llama"));
  const auto moe = as_mixture(*dense, 4, 2, 0, /*renormalize=*/true);
  const std::vector<i64> ids = ids_of(19, dense->spec().vocab_size, 1);
  const Tensor want = all_logits(*dense, ids), got = all_logits(*moe, ids);
  EXPECT_LE(qkv::max_abs_diff(got, want), 1e-4);
  // Without renormalisation the two weights sum to less than one: a different model.
  const auto unnormalised = as_mixture(*dense, 4, 2, 0, false);
  EXPECT_GT(qkv::max_abs_diff(all_logits(*unnormalised, ids), want), 1e-3);
  EXPECT_LT(moe->weight_bytes(), dense->weight_bytes() * 2);  // a token reads k = 2 of 4 experts
}

TEST(MoeDecoder, QuantizedExpertsOnBothActivationPaths) {
  // Q8_0 experts (views of a GGUF file's matrices), with float32 activations and with Q8 ones
  // (the products quantize the experts' gathered rows as a dense product quantizes its input).
  const auto dense = qkv::models::load_decoder(qkv::testing::fixture_path("llama_family/llama_q8_0.gguf"));
  ASSERT_EQ(dense->weights().layers[0].gate.w.type, qkv::kernels::QType::Q8_0);
  const auto moe = as_mixture(*dense, 3, 2, 0, true);
  const std::vector<i64> ids = ids_of(21, dense->spec().vocab_size, 3);
  EXPECT_LE(qkv::max_abs_diff(all_logits(*moe, ids), all_logits(*dense, ids)), 1e-4);
  dense->set_activations(qkv::kernels::QActivations::Q8);
  moe->set_activations(qkv::kernels::QActivations::Q8);
  // (a prompt's rows and a decode step's row: the prefill and the decode paths)
  EXPECT_LE(qkv::max_abs_diff(all_logits(*moe, ids), all_logits(*dense, ids)), 1e-4);
  qkv::infer::KVCache cd(dense->cache_options(1, 4)), cm(moe->cache_options(1, 4));
  for (i64 t = 0; t < 3; ++t) {
    const Tensor id = Tensor::from_vector(std::vector<i64>{ids[static_cast<std::size_t>(t)]}, {1, 1});
    EXPECT_LE(qkv::max_abs_diff(moe->forward_cached(id, {1}, cm), dense->forward_cached(id, {1}, cd)), 1e-4) << t;
  }
}

TEST(MoeDecoder, EachSequenceGetsItsBitsAloneOnAnyTeam) {
  const auto dense = qkv::models::load_decoder(qkv::testing::fixture_path("llama_family/llama"));
  const auto moe = as_mixture(*dense, 5, 2, 1, false);
  const i64 V = moe->spec().vocab_size;
  const std::vector<i64> a = ids_of(9, V, 2), b = ids_of(4, V, 5);
  const int threads = qkv::num_threads();
  std::vector<Tensor> runs;
  for (int t : {1, 2}) {
    qkv::set_num_threads(t);
    // Two sequences in one cache (each prompt in a call of its own rows: a prompt's bits may
    // depend on the rows beside it), then three decode steps together...
    qkv::infer::KVCache both(moe->cache_options(2, 16));
    std::vector<i64> ids(a);
    ids.resize(18, 0);
    moe->forward_cached(Tensor::from_vector(ids, {2, 9}), {9, 0}, both);
    std::fill(ids.begin(), ids.end(), 0);
    std::copy(b.begin(), b.end(), ids.begin() + 9);
    moe->forward_cached(Tensor::from_vector(ids, {2, 9}), {0, 4}, both);
    std::vector<Tensor> steps;
    for (i64 s = 0; s < 3; ++s)
      steps.push_back(moe->forward_cached(Tensor::from_vector(std::vector<i64>{(s * 5 + 1) % V, (s * 3 + 2) % V}, {2, 1}),
                                          {1, 1}, both));
    // ...and each sequence alone: the decode steps' logits bitwise the same.
    for (int which = 0; which < 2; ++which) {
      const std::vector<i64>& p = which == 0 ? a : b;
      qkv::infer::KVCache alone(moe->cache_options(1, 16));
      moe->forward_cached(Tensor::from_vector(p, {1, static_cast<i64>(p.size())}), {static_cast<i64>(p.size())}, alone);
      for (i64 s = 0; s < 3; ++s) {
        const i64 id = which == 0 ? (s * 5 + 1) % V : (s * 3 + 2) % V;
        const Tensor one = moe->forward_cached(Tensor::from_vector(std::vector<i64>{id}, {1, 1}), {1}, alone);
        EXPECT_EQ(qkv::max_abs_diff(one.select(0, 0), steps[static_cast<std::size_t>(s)].select(0, which)), 0.0)
            << t << " threads, sequence " << which << ", step " << s;
      }
    }
    runs.push_back(all_logits(*moe, a));
  }
  qkv::set_num_threads(threads);
  EXPECT_EQ(qkv::max_abs_diff(runs[0], runs[1]), 0.0) << "one thread and two differ";
  // Different experts: not the dense model.
  EXPECT_GT(qkv::max_abs_diff(runs[0], all_logits(*dense, a)), 1e-3);
}

TEST(MoeDecoder, SpecAndWeightsThatDisagreeAreRefused) {
  const auto dense = qkv::models::load_decoder(qkv::testing::fixture_path("llama_family/llama"));
  const auto moe = as_mixture(*dense, 4, 2, 0, true);
  auto spec = moe->spec();
  spec.moe.top_k = 5;  // more than the experts
  EXPECT_THROW(DecoderLM(spec, moe->weights()), qkv::ValueError);
  spec = moe->spec();
  spec.moe.experts = 3;  // the weights hold 4
  EXPECT_THROW(DecoderLM(spec, moe->weights()), qkv::FormatError);
  spec = moe->spec();
  spec.moe.expert_ff = 8;  // the matrices are intermediate_size wide
  EXPECT_THROW(DecoderLM(spec, moe->weights()), qkv::FormatError);
}

TEST(MoeDecoder, WrittenAsGgufOnlyWhenLlamaCppReadsTheSameModel) {
  // A mixture written as GGUF reads back as the same model (experts as 3-D tensors; the fixture
  // mixtures' round trip is test_arch_parity's). llama.cpp's llama architecture always
  // renormalises the experts' weights: a model that does not is refused, and no file is left.
  const auto dense = qkv::models::load_decoder(qkv::testing::fixture_path("llama_family/llama"));
  const std::string path = ::testing::TempDir() + "/qkv_moe_llama.gguf";
  const auto moe = as_mixture(*dense, 3, 2, 1, /*renormalize=*/true);
  qkv::models::save_decoder_gguf(*moe, path, {}, {}, "moe");
  const auto back = qkv::models::load_decoder(path);
  EXPECT_EQ(back->spec().moe.experts, 3);
  EXPECT_EQ(back->weights().layers[0].expert_gate.size(), 3u);
  const std::vector<i64> ids = ids_of(11, moe->spec().vocab_size, 4);
  EXPECT_LE(qkv::max_abs_diff(all_logits(*back, ids), all_logits(*moe, ids)), 1e-5);
  {  // llama.cpp's names and layouts: the router in F32, each kind of expert matrix one 3-D tensor
    const qkv::io::GGUFFile f = qkv::io::GGUFFile::open_header(path);
    const i64 C = moe->spec().hidden_size, F = moe->spec().moe.expert_ff;
    ASSERT_NE(f.find("blk.0.ffn_gate_inp.weight"), nullptr);
    EXPECT_EQ(f.find("blk.0.ffn_gate_inp.weight")->type, qkv::kernels::QType::F32);
    EXPECT_EQ(f.find("blk.1.ffn_gate_exps.weight")->dims, (std::vector<i64>{C, F, 3}));
    EXPECT_EQ(f.find("blk.1.ffn_down_exps.weight")->dims, (std::vector<i64>{F, C, 3}));
    EXPECT_EQ(f.find("blk.0.ffn_gate.weight"), nullptr);
    EXPECT_EQ(f.get_int("llama.expert_count"), 3);
    EXPECT_EQ(f.get_int("llama.expert_used_count"), 2);
  }
  std::filesystem::remove(path);
  const auto plain = as_mixture(*dense, 3, 2, 1, /*renormalize=*/false);
  try {
    qkv::models::save_decoder_gguf(*plain, path, {}, {}, "moe");
    ADD_FAILURE() << "no error";
  } catch (const qkv::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("does not renormalise"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  // Refused before anything is written: a file already at the path keeps its bytes.
  const std::string before = "a user's file\n";
  qkv::io::write_file_atomic(path, before, "test");
  EXPECT_THROW(qkv::models::save_decoder_gguf(*plain, path, {}, {}, "moe"), qkv::ValueError);
  EXPECT_EQ(qkv::io::read_file(path, "test"), before);
  // gpt-oss's clamp: llama.cpp's is fixed at 7 / 1.702, another limit is refused the same way.
  const auto oss = qkv::models::load_decoder(qkv::testing::fixture_path("moe/gpt_oss"));
  qkv::models::DecoderSpec spec = oss->spec();
  spec.moe.swiglu_limit = 5.f;
  const qkv::models::DecoderLM clamped(spec, oss->weights());
  try {
    qkv::models::save_decoder_gguf(clamped, path, {}, {}, "oss");
    ADD_FAILURE() << "no error";
  } catch (const qkv::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("clamp their SwiGLU at limit 5 with alpha 1.702, but llama.cpp's gpt-oss "
                                         "architecture uses 7 and 1.702"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(qkv::io::read_file(path, "test"), before);
  std::filesystem::remove(path);
}

}  // namespace
