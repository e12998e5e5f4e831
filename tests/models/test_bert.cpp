// BERT (models/bert.h) and sentence embeddings (infer/embed.h): loading and its errors on small
// synthetic folders, then parity with transformers / sentence-transformers on the real
// all-MiniLM-L6-v2 (fixtures from tests/reference/make_bert_fixtures.py; needs `make models`).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "qkv/autograd/autograd.h"
#include "qkv/core/rng.h"
#include "qkv/infer/bert_runner.h"
#include "qkv/infer/embed.h"
#include "qkv/io/tensors.h"
#include "qkv/models/bert.h"
#include "testing/fixture.h"
#include "tokenize/bert_test_util.h"

using namespace qkv;
using qkv::testing::error_of;
using qkv::testing::TempDir;
using qkv::testing::write_file;

namespace {

const char* kTinyConfig = R"({"model_type": "bert", "hidden_act": "gelu", "vocab_size": 30, "hidden_size": 8,
  "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 16,
  "type_vocab_size": 2, "layer_norm_eps": 1e-12, "position_embedding_type": "absolute", "pad_token_id": 0})";

// A tiny random BERT written as a Hugging Face folder (names with the "bert." prefix, plus the
// pooler and position_ids a BertModel checkpoint carries).
std::shared_ptr<models::BertModel> write_tiny(const std::string& dir, const std::string& config = kTinyConfig) {
  manual_seed(7);
  auto m = std::make_shared<models::BertModel>(models::bert_config_from_json(kTinyConfig));
  std::vector<std::pair<std::string, Tensor>> t;
  for (const auto& [n, v] : m->named_parameters()) t.emplace_back("bert." + n, v.detach());
  t.emplace_back("bert.embeddings.position_ids", Tensor::arange(16, DType::I64).view({1, 16}));
  t.emplace_back("bert.pooler.dense.weight", Tensor::zeros({8, 8}));
  io::save_safetensors(dir + "/model.safetensors", t);
  write_file(dir + "/config.json", config);
  return m;
}

std::vector<std::pair<std::string, Tensor>> tiny_tensors(const models::BertModel& m) {
  std::vector<std::pair<std::string, Tensor>> t;
  for (const auto& [n, v] : m.named_parameters()) t.emplace_back(n, v.detach());
  return t;
}

double cosine(const float* a, const float* b, std::int64_t n) {
  double d = 0, na = 0, nb = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    d += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return d / std::sqrt(na * nb);
}

}  // namespace

TEST(BertConfig, UnsupportedValuesAreNamed) {
  auto msg = [](const std::string& json) {
    return error_of<Error>([&] { models::bert_config_from_json(json, "cfg.json"); });
  };
  EXPECT_NE(msg(R"({"hidden_act": "relu"})").find("cfg.json: unsupported hidden_act 'relu'"), std::string::npos);
  EXPECT_NE(msg(R"({"position_embedding_type": "relative_key"})").find("unsupported position_embedding_type 'relative_key'"),
            std::string::npos);
  EXPECT_NE(msg(R"({"model_type": "roberta"})").find("unsupported model_type 'roberta'"), std::string::npos);
  EXPECT_NE(msg(R"({"is_decoder": true})").find("unsupported is_decoder true"), std::string::npos);
  EXPECT_NE(msg(R"({"hidden_size": 10, "num_attention_heads": 3})").find("hidden_size 10 is not divisible by num_attention_heads 3"),
            std::string::npos);
  EXPECT_NE(msg(R"({"hidden_size": "big"})").find("'hidden_size' must be an integer, got \"big\""), std::string::npos);
  EXPECT_NE(msg(R"({"layer_norm_eps": 0})").find("'layer_norm_eps' must be > 0"), std::string::npos);
  EXPECT_NE(msg(R"({"vocab_size": 1000000000})").find("'vocab_size' 1000000000 is absurdly large"), std::string::npos);
  EXPECT_NE(msg("[1,2]").find("cfg.json: expected a JSON object"), std::string::npos);
  EXPECT_NE(msg("{").find("cfg.json: not valid JSON"), std::string::npos);
  const auto c = models::bert_config_from_json(kTinyConfig);
  EXPECT_EQ(c.hidden_size, 8);
  EXPECT_EQ(c.layer_norm_eps, 1e-12);
}

TEST(BertModel, LoadsHuggingFaceNamesWithOrWithoutPrefix) {
  TempDir d("bert-tiny");
  const auto ref = write_tiny(d.str());
  const auto m = models::BertModel::from_folder(d.str());
  autograd::NoGradGuard g;
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{2, 5, 9, 3, 2, 7, 0, 0}, {2, 4});
  const Tensor mask = Tensor::from_vector(std::vector<std::int64_t>{1, 1, 1, 1, 1, 1, 0, 0}, {2, 4});
  std::vector<Tensor> hs;
  const Tensor y = m->forward(ids, mask, &hs);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 8}));
  EXPECT_EQ(hs.size(), 3u);
  EXPECT_EQ(max_abs_diff(y, ref->forward(ids, mask)), 0.0);
  // Without the prefix.
  io::save_safetensors(d.file("model.safetensors"), tiny_tensors(*ref));
  EXPECT_EQ(max_abs_diff(models::BertModel::from_folder(d.str())->forward(ids, mask), y), 0.0);
}

TEST(BertModel, PaddedKeysDoNotChangeRealTokens) {
  TempDir d("bert-pad");
  const auto m = write_tiny(d.str());
  autograd::NoGradGuard g;
  const Tensor one = Tensor::from_vector(std::vector<std::int64_t>{2, 5, 3}, {1, 3});
  const Tensor padded = Tensor::from_vector(std::vector<std::int64_t>{2, 5, 3, 0, 0}, {1, 5});
  const Tensor mask = Tensor::from_vector(std::vector<std::int64_t>{1, 1, 1, 0, 0}, {1, 5});
  const Tensor a = m->forward(one), b = m->forward(padded, mask).narrow(1, 0, 3);
  EXPECT_LT(max_abs_diff(a, b), 1e-5);
  EXPECT_GT(max_abs_diff(a, m->forward(padded).narrow(1, 0, 3)), 1e-4);  // unmasked padding does change them
}

TEST(BertModel, EveryTensorMismatchIsListedInOneError) {
  TempDir d("bert-mismatch");
  const auto m = write_tiny(d.str());
  auto t = tiny_tensors(*m);
  std::erase_if(t, [](const auto& p) { return p.first == "encoder.layer.1.output.dense.bias"; });
  for (auto& [n, v] : t)
    if (n == "encoder.layer.0.attention.self.key.weight") v = Tensor::zeros({8, 4});
  t.emplace_back("encoder.layer.0.attention.self.rotary", Tensor::zeros({3}));
  io::save_safetensors(d.file("model.safetensors"), t);
  const std::string msg = error_of<ValueError>([&] { models::BertModel::from_folder(d.str()); });
  EXPECT_NE(msg.find("model.safetensors does not match"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing (1):\n    encoder.layer.1.output.dense.bias [8]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected (1):\n    encoder.layer.0.attention.self.rotary [3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("encoder.layer.0.attention.self.key.weight is [8,4], config.json needs [8,8]"), std::string::npos) << msg;
}

TEST(BertModel, ConfigSizesThatDisagreeWithTheTensors) {
  TempDir d("bert-sizes");
  std::string cfg = kTinyConfig;
  cfg.replace(cfg.find("\"intermediate_size\": 16"), 23, "\"intermediate_size\": 32");
  write_tiny(d.str(), cfg);
  const std::string msg = error_of<ValueError>([&] { models::BertModel::from_folder(d.str()); });
  EXPECT_NE(msg.find("encoder.layer.0.intermediate.dense.weight is [16,8], config.json needs [32,8]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("encoder.layer.1.output.dense.weight is [8,16], config.json needs [8,32]"), std::string::npos) << msg;
}

TEST(BertModel, MissingFilesAndBadIds) {
  TempDir d("bert-files");
  std::string msg = error_of<IOError>([&] { models::BertModel::from_folder(d.file("absent")); });
  EXPECT_NE(msg.find("absent does not exist"), std::string::npos) << msg;
  msg = error_of<IOError>([&] { models::BertModel::from_folder(d.str()); });
  EXPECT_NE(msg.find("config.json is missing"), std::string::npos) << msg;
  const auto m = write_tiny(d.str());
  std::filesystem::remove(d.file("model.safetensors"));
  msg = error_of<IOError>([&] { models::BertModel::from_folder(d.str()); });
  EXPECT_NE(msg.find("model.safetensors is missing"), std::string::npos) << msg;
  autograd::NoGradGuard g;
  msg = error_of<ValueError>([&] { m->forward(Tensor::zeros({1, 17}, DType::I64)); });
  EXPECT_NE(msg.find("sequence length 17 exceeds max_position_embeddings 16"), std::string::npos) << msg;
  msg = error_of<ShapeError>([&] { m->forward(Tensor::zeros({3}, DType::I64)); });
  EXPECT_NE(msg.find("ids must be int64 [B, T], got int64 [3]"), std::string::npos) << msg;
  error_of<Error>([&] { m->forward(Tensor::full({1, 2}, 30, DType::I64)); });  // id == vocab_size
}

TEST(SentenceEmbedder, BadFoldersAndTextFiles) {
  TempDir d("embed-bad");
  std::string msg = error_of<IOError>([&] { infer::SentenceEmbedder::from_folder(d.file("absent")); });
  EXPECT_NE(msg.find("absent does not exist"), std::string::npos) << msg;
  write_file(d.file("modules.json"), R"([{"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"}])");
  msg = error_of<IOError>([&] { infer::read_pooling_config(d.str()); });
  EXPECT_NE(msg.find("1_Pooling/config.json is missing"), std::string::npos) << msg;
  write_file(d.file("1_Pooling/config.json"), R"({"pooling_mode_max_tokens": true})");
  msg = error_of<ValueError>([&] { infer::read_pooling_config(d.str()); });
  EXPECT_NE(msg.find("unsupported pooling mode 'pooling_mode_max_tokens'"), std::string::npos) << msg;
  write_file(d.file("modules.json"), R"([{"type": "sentence_transformers.models.Dense", "path": "2_Dense"}])");
  msg = error_of<ValueError>([&] { infer::read_pooling_config(d.str()); });
  EXPECT_NE(msg.find("unsupported module type 'sentence_transformers.models.Dense'"), std::string::npos) << msg;

  write_file(d.file("text.txt"), "good line\nstill good\nbad \xc3\x28 here\n");
  msg = error_of<FormatError>([&] { infer::read_text_lines(d.file("text.txt")); });
  EXPECT_NE(msg.find("text.txt:3: not valid UTF-8 (byte 5 of the line)"), std::string::npos) << msg;
  write_file(d.file("empty.txt"), "");
  msg = error_of<FormatError>([&] { infer::read_text_lines(d.file("empty.txt")); });
  EXPECT_NE(msg.find("empty.txt: the file is empty"), std::string::npos) << msg;
  write_file(d.file("crlf.txt"), "a\r\n\r\nb");
  EXPECT_EQ(infer::read_text_lines(d.file("crlf.txt")), (std::vector<std::string>{"a", "", "b"}));
}

TEST(SentenceEmbedder, SyntheticFolderEndToEnd) {
  TempDir d("embed-tiny");
  write_tiny(d.str());
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 5; i < 30; ++i) vocab.append("w").append(std::to_string(i)).append("\n");  // (GCC 12 warns on a + chain: -Wrestrict false positive)
  write_file(d.file("vocab.txt"), vocab);
  write_file(d.file("tokenizer_config.json"), R"({"do_lower_case": true, "model_max_length": 16})");
  write_file(d.file("modules.json"), R"([{"type": "sentence_transformers.models.Transformer", "path": ""},
    {"type": "sentence_transformers.models.Pooling", "path": "1_Pooling"},
    {"type": "sentence_transformers.models.Normalize", "path": "2_Normalize"}])");
  write_file(d.file("1_Pooling/config.json"), R"({"word_embedding_dimension": 8, "pooling_mode_mean_tokens": true})");
  const auto e = infer::SentenceEmbedder::from_folder(d.str());
  const std::vector<std::string> texts = {"w5 w6 w7 w8 w9", "W5", "", "w9 w9"};
  const Tensor a = e.embed(texts, {.batch_size = 3});
  ASSERT_EQ(a.shape(), (Shape{4, 8}));
  // Each row equals the sentence embedded alone (padding and batch order change nothing beyond rounding).
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const Tensor alone = e.embed({texts[i]});
    EXPECT_LT(max_abs_diff(a.select(0, static_cast<std::int64_t>(i)), alone.select(0, 0)), 1e-6) << i;
  }
  EXPECT_EQ(e.embed({}).shape(), (Shape{0, 8}));
  std::string msg = error_of<ValueError>([&] { e.embed({"ok", "bad \xff"}); });
  EXPECT_NE(msg.find("text 1: wordpiece: text is not valid UTF-8"), std::string::npos) << msg;
  msg = error_of<ValueError>([&] { e.embed({"ok"}, {.batch_size = 0}); });
  EXPECT_NE(msg.find("batch_size must be >= 1, got 0"), std::string::npos) << msg;
  // A vocabulary that does not fit the model's vocab_size.
  write_file(d.file("vocab.txt"), vocab + "extra\n");
  msg = error_of<ValueError>([&] { infer::SentenceEmbedder::from_folder(d.str()); });
  EXPECT_NE(msg.find("the vocabulary has 31 tokens but config.json's vocab_size is 30"), std::string::npos) << msg;
  // A pooling dimension that does not fit hidden_size.
  write_file(d.file("vocab.txt"), vocab);
  write_file(d.file("1_Pooling/config.json"), R"({"word_embedding_dimension": 384, "pooling_mode_mean_tokens": true})");
  msg = error_of<ValueError>([&] { infer::SentenceEmbedder::from_folder(d.str()); });
  EXPECT_NE(msg.find("word_embedding_dimension 384 differs from config.json's hidden_size 8"), std::string::npos) << msg;
}

TEST(SentenceEmbedder, ConcurrentCallsOnOneModelEqualSerialOnes) {
  TempDir d("embed-threads");
  write_tiny(d.str());
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (int i = 5; i < 30; ++i) vocab.append("w").append(std::to_string(i)).append("\n");  // (GCC 12 warns on a + chain: -Wrestrict false positive)
  write_file(d.file("vocab.txt"), vocab);
  write_file(d.file("tokenizer_config.json"), R"({"model_max_length": 16})");
  const auto e = infer::SentenceEmbedder::from_folder(d.str());  // no modules.json: mean pooling, no normalisation
  EXPECT_FALSE(e.pooling().normalize);
  const std::vector<std::string> texts = {"w5 w6 w7", "w8", "w9 w10 w11 w12 w13", "", "w20 w21"};
  const Tensor serial = e.embed(texts, {.batch_size = 2});
  std::vector<Tensor> got(4);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < got.size(); ++t) pool.emplace_back([&, t] { got[t] = e.embed(texts, {.batch_size = 2}); });
  for (auto& th : pool) th.join();
  for (const auto& g : got) EXPECT_EQ(max_abs_diff(g, serial), 0.0);  // R5: same inputs, same result, bitwise
}

TEST(SentenceEmbedder, PoolingAndNormalisation) {
  const Tensor h = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 100, 100}, {1, 3, 2});
  const Tensor m = Tensor::from_vector(std::vector<std::int64_t>{1, 1, 0}, {1, 3});
  EXPECT_EQ(infer::pool(h, m, infer::Pooling::Mean).to_vector<float>(), (std::vector<float>{2, 3}));
  EXPECT_EQ(infer::pool(h, m, infer::Pooling::Cls).to_vector<float>(), (std::vector<float>{1, 2}));
  const auto n = infer::l2_normalize(Tensor::from_vector(std::vector<float>{3, 4, 0, 0}, {2, 2})).to_vector<float>();
  EXPECT_EQ(n, (std::vector<float>{0.6f, 0.8f, 0, 0}));  // a zero row stays zero, never NaN
}

// ---- the real model ----

TEST(BertParity, HiddenStatesPerLayerWithinR1) {
  if (!qkv::testing::require_minilm()) return;
  const auto m = models::BertModel::from_folder(qkv::testing::minilm_dir());
  const auto ref = qkv::testing::load_fixture("bert/hidden.safetensors");
  autograd::NoGradGuard g;
  for (int k = 0; k < 1; ++k) {  // one sentence of 14 tokens (the fixture stays small)
    const std::string s = std::to_string(k);
    const Tensor ids = ref.at("ids." + s);
    std::vector<Tensor> hs;
    m->forward(ids.view({1, ids.size(0)}), Tensor(), &hs);
    const Tensor want = ref.at("hidden." + s);  // F64 [L+1, T, C]
    const auto lp = ref.at("lp_err." + s).to_vector<double>();
    ASSERT_EQ(hs.size(), static_cast<std::size_t>(want.size(0)));
    // The same sentence through BertRunner (what SentenceEmbedder runs: packed, fused, unpadded).
    const infer::BertRunner runner(m);
    infer::BertRunner::Workspace ws;
    const std::vector<std::int64_t> row = ids.to_vector<std::int64_t>();
    std::vector<Tensor> rs;
    runner.forward({&row}, ws, &rs);
    ASSERT_EQ(rs.size(), hs.size());
    for (std::size_t l = 0; l < hs.size(); ++l) {
      const Tensor w = want.select(0, static_cast<std::int64_t>(l));
      const double err = max_abs_diff(hs[l].select(0, 0).to(DType::F64), w);
      const double err_runner = max_abs_diff(rs[l].to(DType::F64), w);
      const double bound = 2 * lp[l] + 1e-5;  // R1: c = 2, fp32 floor 1e-5
      EXPECT_LE(err, bound) << "sentence " << k << " layer " << l << " (0 = embeddings): max|qkv - float64 ref| " << err
                            << ", R1 bound " << bound;
      EXPECT_LE(err_runner, bound) << "BertRunner, sentence " << k << " layer " << l << ": max|qkv - float64 ref| "
                                   << err_runner << ", R1 bound " << bound;
    }
  }
}

TEST(BertParity, EmbeddingsMatchSentenceTransformers) {
  if (!qkv::testing::require_minilm()) return;
  const auto e = infer::SentenceEmbedder::from_folder(qkv::testing::minilm_dir());
  EXPECT_TRUE(e.pooling().normalize);
  const auto lines = infer::read_text_lines(qkv::testing::fixture_path("bert/sentences.txt"));
  const auto ref = qkv::testing::load_fixture("bert/embeddings.safetensors");
  const Tensor want = ref.at("embeddings");
  ASSERT_EQ(want.shape(), (Shape{static_cast<std::int64_t>(lines.size()), 384}));
  const Tensor got = e.embed(lines, {.batch_size = 32});
  ASSERT_EQ(got.shape(), want.shape());
  const float *g = got.data<float>(), *w = want.data<float>();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const double cos = cosine(g + i * 384, w + i * 384, 384);
    double diff = 0;
    for (int c = 0; c < 384; ++c) diff = std::max(diff, static_cast<double>(std::fabs(g[i * 384 + c] - w[i * 384 + c])));
    EXPECT_GE(cos, 0.99999) << "line " << i + 1 << " '" << lines[i] << "'";
    EXPECT_LE(diff, 1e-4) << "line " << i + 1 << " '" << lines[i] << "'";
  }
}

TEST(BertParity, BatchSizeDoesNotChangeEmbeddings) {
  if (!qkv::testing::require_minilm()) return;
  const auto e = infer::SentenceEmbedder::from_folder(qkv::testing::minilm_dir());
  const auto lines = infer::read_text_lines(qkv::testing::fixture_path("bert/sentences.txt"));
  const auto lp = qkv::testing::load_fixture("bert/embeddings.safetensors").at("lp_err").to_vector<double>();
  const Tensor one = e.embed(lines, {.batch_size = 1});
  const Tensor many = e.embed(lines, {.batch_size = 32});
  const std::int64_t C = e.dimension();
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const double err = max_abs_diff(one.select(0, static_cast<std::int64_t>(i)), many.select(0, static_cast<std::int64_t>(i)));
    EXPECT_LE(err, 2 * lp[i] + 1e-5) << "line " << i + 1 << " (R1 with float32's own error " << lp[i] << ", C " << C << ")";
    // Stronger than R1: no padding is computed, so a sentence gets the same bits in any batch.
    EXPECT_EQ(err, 0.0) << "line " << i + 1;
  }
}
