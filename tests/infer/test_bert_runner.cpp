// BertRunner (infer/bert_runner.h), the unpadded fused BERT forward, against the module path
// (models::BertModel::forward, the test reference): every layer's hidden states within R1 of the
// module path run in float64, on a random small BERT with awkward sizes and on all-MiniLM-L6-v2;
// a sequence's results bitwise the same in any batch and for 1 or 2 threads; bad ids and
// lengths named before any work; the fallback when the ISA changes after packing.
//
// R1 (REFERENCES.md): |runner - ref64| <= 2 |module32 - ref64| + 1e-5 per layer, where module32
// is the same module path in float32 (the error any float32 implementation makes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/infer/bert_runner.h"
#include "qkv/kernels/cpu.h"
#include "qkv/models/bert.h"
#include "testing/fixture.h"
#include "testing/guards.h"
#include "tokenize/bert_test_util.h"

using namespace qkv;

namespace {

using Ids = std::vector<std::int64_t>;

// A BERT with odd sizes (head dim 7, F not a multiple of any vector width) and every parameter
// random, LayerNorm weights and biases included.
std::shared_ptr<models::BertModel> random_bert() {
  manual_seed(11);
  const auto cfg = models::bert_config_from_json(
      R"({"model_type": "bert", "hidden_act": "gelu", "vocab_size": 53, "hidden_size": 21,
          "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 45,
          "max_position_embeddings": 300, "type_vocab_size": 2, "layer_norm_eps": 1e-12})");
  auto m = std::make_shared<models::BertModel>(cfg);
  autograd::NoGradGuard g;
  Generator gen(5);
  for (auto& [name, p] : m->named_parameters()) {
    const Tensor r = Tensor::randn(p.shape(), &gen);
    const bool norm = name.find("LayerNorm.weight") != std::string::npos;
    float* d = p.data<float>();
    const float* s = r.data<float>();
    for (std::int64_t i = 0; i < p.numel(); ++i) d[i] = norm ? 1.f + 0.2f * s[i] : 0.3f * s[i];
  }
  m->eval();
  return m;
}

Ids random_ids(std::int64_t n, std::int64_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Ids ids(static_cast<std::size_t>(n));
  for (auto& v : ids) v = static_cast<std::int64_t>(rng() % static_cast<std::uint32_t>(vocab));
  return ids;
}

double max_diff(const float* a, const double* b, std::int64_t n) {
  double m = 0;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

// Per layer: runner's hidden states of `ids` (run inside a batch with `others`) within R1 of the
// module path in float64.
void expect_within_r1(const infer::BertRunner& runner, const std::shared_ptr<models::BertModel>& m32, const Ids& ids,
                      const std::vector<Ids>& others, const std::string& what) {
  autograd::NoGradGuard g;
  infer::BertRunner::Workspace ws;
  std::vector<const Ids*> batch;
  for (const auto& o : others) batch.push_back(&o);
  batch.push_back(&ids);
  std::vector<Tensor> hs;
  runner.forward(batch, ws, &hs);
  std::int64_t off = 0;
  for (const auto& o : others) off += static_cast<std::int64_t>(o.size());

  const auto T = static_cast<std::int64_t>(ids.size());
  const Tensor idt = Tensor::from_vector(ids, {1, T});
  std::vector<Tensor> h32, h64;
  m32->forward(idt, Tensor(), &h32);
  auto m64 = std::make_shared<models::BertModel>(m32->config());
  const nn::NamedTensors named = m32->named_parameters();
  m64->load_state_dict(nn::StateDict(named.begin(), named.end()), true);
  m64->to(DType::F64);
  m64->eval();
  m64->forward(idt, Tensor(), &h64);
  ASSERT_EQ(hs.size(), h64.size());
  const std::int64_t C = m32->config().hidden_size;
  for (std::size_t l = 0; l < hs.size(); ++l) {
    const Tensor ref = h64[l].contiguous();
    const Tensor lp = h32[l].contiguous();
    const double* r = ref.data<double>();
    const double err_lp = max_diff(lp.data<float>(), r, T * C);
    const double err = max_diff(hs[l].data<float>() + off * C, r, T * C);
    const double bound = 2 * err_lp + 1e-5;
    EXPECT_LE(err, bound) << what << ", layer " << l << " (0 = embeddings): max|runner - float64| " << err
                          << ", module path in float32 " << err_lp;
  }
}

TEST(BertRunner, RandomBertEveryLayerWithinR1OfTheModulePath) {
  const auto m = random_bert();
  const infer::BertRunner runner(m);
  qkv::testing::ThreadsGuard tg;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (std::int64_t len : {1, 2, 5, 17, 64, 97, 257, 300}) {
      const Ids ids = random_ids(len, 53, static_cast<std::uint32_t>(len));
      expect_within_r1(runner, m, ids, {random_ids(3, 53, 1), random_ids(40, 53, 2)},
                       "length " + std::to_string(len) + ", " + std::to_string(threads) + " threads");
    }
  }
}

TEST(BertRunner, MiniLMEveryLayerWithinR1OfTheModulePath) {
  if (!qkv::testing::require_minilm()) return;
  const auto m = models::BertModel::from_folder(qkv::testing::minilm_dir());
  const infer::BertRunner runner(m);
  for (std::int64_t len : {2, 13, 40, 256}) {
    Ids ids = random_ids(len, 30522, static_cast<std::uint32_t>(len) + 100);
    ids.front() = 101;
    ids.back() = 102;
    expect_within_r1(runner, m, ids, {random_ids(30, 30522, 3)}, "MiniLM length " + std::to_string(len));
  }
}

TEST(BertRunner, ASequenceGetsTheSameBitsInAnyBatchAndForAnyThreadCount) {
  const auto m = random_bert();
  const infer::BertRunner runner(m);
  qkv::testing::ThreadsGuard tg;
  std::vector<Ids> seqs;
  for (std::int64_t len : {5, 1, 300, 17, 0, 64, 2, 129, 33})
    seqs.push_back(random_ids(len, 53, static_cast<std::uint32_t>(len) * 7 + 1));
  const std::int64_t C = m->config().hidden_size;
  set_num_threads(1);
  std::vector<std::vector<float>> alone;
  for (const auto& s : seqs) {
    infer::BertRunner::Workspace ws;
    const float* h = runner.forward({&s}, ws);
    alone.emplace_back(h, h + static_cast<std::int64_t>(s.size()) * C);
  }
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    infer::BertRunner::Workspace ws;  // reused across batches of different sizes
    for (std::size_t first = 0; first < seqs.size(); first += 2) {
      std::vector<const Ids*> batch;
      for (std::size_t i = first; i < seqs.size(); ++i) batch.push_back(&seqs[i]);
      const float* h = runner.forward(batch, ws);
      for (std::size_t i = first; i < seqs.size(); ++i) {
        const auto n = static_cast<std::int64_t>(seqs[i].size()) * C;
        // (n == 0: an empty sequence's data() may be null, which memcmp must not get, even for 0 bytes)
        ASSERT_EQ(0, n == 0 ? 0 : std::memcmp(h, alone[i].data(), sizeof(float) * static_cast<std::size_t>(n)))
            << "sequence " << i << " (length " << seqs[i].size() << ") in a batch from " << first << ", " << threads
            << " threads";
        h += n;
      }
    }
  }
}

TEST(BertRunner, BadIdsAndLengthsAreNamedBeforeAnyWork) {
  const auto m = random_bert();
  const infer::BertRunner runner(m);
  infer::BertRunner::Workspace ws;
  const Ids ok = {1, 2, 3}, bad = {1, 53, 2}, neg = {-1}, long_seq(301, 4);
  std::string msg = qkv::testing::error_of<IndexError>([&] { runner.forward({&ok, &bad}, ws); });
  EXPECT_NE(msg.find("token id 53 at position 1 of sequence 1 is outside the vocabulary [0, 53)"), std::string::npos)
      << msg;
  msg = qkv::testing::error_of<IndexError>([&] { runner.forward({&neg}, ws); });
  EXPECT_NE(msg.find("token id -1 at position 0 of sequence 0"), std::string::npos) << msg;
  msg = qkv::testing::error_of<ValueError>([&] { runner.forward({&ok, &long_seq}, ws); });
  EXPECT_NE(msg.find("sequence 1 has 301 tokens, more than max_position_embeddings 300"), std::string::npos) << msg;
  // A model whose parameters are not float32 is named at construction.
  auto m64 = random_bert();
  m64->to(DType::F64);
  msg = qkv::testing::error_of<ValueError>([&] { infer::BertRunner r64(m64); });
  EXPECT_NE(msg.find("BertRunner: the model's parameters must be contiguous float32 (got float64 " +
                     m64->word_embeddings->weight.shape_str() + ")"),
            std::string::npos)
      << msg;
  // Nothing at all, or only empty sequences: no rows, no error.
  const Ids empty;
  runner.forward({}, ws);
  runner.forward({&empty, &empty}, ws);
}

TEST(BertRunner, AnotherIsaAfterPackingFallsBackToTheUnpackedWeights) {
  if (kernels::detected_isa() == kernels::Isa::Scalar) GTEST_SKIP() << "one ISA only";
  qkv::testing::IsaGuard ig;
  const auto m = random_bert();
  const infer::BertRunner runner(m);  // packed for the detected ISA
  kernels::set_isa(kernels::Isa::Scalar);
  const Ids ids = random_ids(40, 53, 9);
  expect_within_r1(runner, m, ids, {}, "packed for " + std::string(kernels::isa_name(kernels::detected_isa())) +
                                   ", run on scalar");
}

}  // namespace
