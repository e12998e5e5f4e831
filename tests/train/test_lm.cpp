// Language-model training: token files, corpus tokenization and its cache, the batch
// formula, float64 gradients of the GPT-2 LM loss, and LMTrainer's folder (loads as a
// GPT-2, resumes bitwise).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "qkv/io/files.h"
#include "qkv/qkv.h"
#include "qkv/train/lm.h"
#include "testing/gradcheck.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
const std::string kFix = QKV_FIXTURE_DIR;

std::string temp_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "/qkv_lm_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const std::string& p) { return io::read_file(p, "test"); }

void write_text(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

tokenize::ByteLevelBPE tiny_bpe() { return tokenize::ByteLevelBPE::from_folder(kFix + "/gpt2_tiny"); }

TEST(TokenFile, RoundTripsAndRejectsDamage) {
  const std::string d = temp_dir("tokfile");
  const std::vector<std::int64_t> ids{0, 5, 65535, 17, 3};
  train::TokenFile::write(d + "/a.tokens", ids, 42, 99, 65536);
  const train::TokenFile t = train::TokenFile::open(d + "/a.tokens");
  ASSERT_EQ(t.size(), 5);
  for (std::int64_t i = 0; i < 5; ++i) EXPECT_EQ(t[i], ids[static_cast<std::size_t>(i)]);
  EXPECT_EQ(t.key(), 42u);
  EXPECT_EQ(t.text_bytes(), 99u);
  EXPECT_EQ(fs::file_size(d + "/a.tokens"), 64u + 5 * 2);
  // 32-bit ids above 65536.
  train::TokenFile::write(d + "/b.tokens", {70000, 1}, 1, 1, 100000);
  EXPECT_EQ(train::TokenFile::open(d + "/b.tokens")[0], 70000);

  const std::string good = slurp(d + "/a.tokens");
  auto expect_format_error = [&](const std::string& bytes, const std::string& needle) {
    write_text(d + "/bad.tokens", bytes);
    try {
      train::TokenFile::open(d + "/bad.tokens");
      ADD_FAILURE() << "no error for " << needle;
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_format_error(good.substr(0, 20), "shorter than its 64-byte header");
  expect_format_error(good.substr(0, good.size() - 1), "bytes after the header");
  std::string magic = good;
  magic[0] = 'X';
  expect_format_error(magic, "magic");
  std::string vocab = good;
  vocab[40] = 10;  // vocab_size 10, but ids up to 65535
  vocab[41] = 0;
  vocab[42] = 0;
  expect_format_error(vocab, "outside the vocabulary");
  EXPECT_THROW(train::TokenFile::open(d + "/missing.tokens"), IOError);
}

TEST(Corpus, TokenizesOnceAndReusesTheCache) {
  const std::string d = temp_dir("corpus");
  const auto bpe = tiny_bpe();
  write_text(d + "/a.txt", "In the beginning God created the heaven and the earth.\n");
  write_text(d + "/b.txt", "And the earth was without form, and void.\n<|endoftext|>");
  const auto first = train::tokenize_corpus({d + "/a.txt", d + "/b.txt"}, bpe, d + "/c.tokens");
  EXPECT_FALSE(first.reused);
  // Each file encoded as ordinary text, then <|endoftext|> after it.
  std::vector<std::int64_t> expect = bpe.encode_ordinary(slurp(d + "/a.txt"));
  expect.push_back(*bpe.eos_id());
  const auto b = bpe.encode_ordinary(slurp(d + "/b.txt"));
  expect.insert(expect.end(), b.begin(), b.end());
  expect.push_back(*bpe.eos_id());
  ASSERT_EQ(first.tokens.size(), static_cast<std::int64_t>(expect.size()));
  for (std::size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(first.tokens[static_cast<std::int64_t>(i)], expect[i]);
  EXPECT_TRUE(train::tokenize_corpus({d + "/a.txt", d + "/b.txt"}, bpe, d + "/c.tokens").reused);
  // Another text: a new key, the cache rebuilt.
  write_text(d + "/b.txt", "And the earth was without form.\n");
  const auto again = train::tokenize_corpus({d + "/a.txt", d + "/b.txt"}, bpe, d + "/c.tokens");
  EXPECT_FALSE(again.reused);
  EXPECT_NE(again.tokens.key(), first.tokens.key());
  // Errors name the file.
  write_text(d + "/bad.txt", std::string("ok\n\xff\xfe", 5));
  try {
    train::tokenize_corpus({d + "/bad.txt"}, bpe, d + "/bad.tokens");
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt"), std::string::npos) << e.what();
  }
  EXPECT_THROW(train::tokenize_corpus({d + "/none.txt"}, bpe, d + "/n.tokens"), IOError);
  write_text(d + "/empty.txt", "");
  EXPECT_THROW(train::tokenize_corpus({d + "/empty.txt"}, bpe, d + "/e.tokens"), ValueError);
}

models::GPT2Config small_config(std::int64_t vocab) {
  models::GPT2Config c;
  c.vocab_size = vocab;
  c.n_positions = 16;
  c.n_embd = 16;
  c.n_layer = 2;
  c.n_head = 2;
  return c;
}

TEST(LMTask, BatchesFollowTheDocumentedFormula) {
  const std::string d = temp_dir("batch");
  const auto bpe = tiny_bpe();
  const auto corpus = train::tokenize_corpus({kFix + "/text/kjv_genesis.txt"}, bpe, d + "/g.tokens");
  models::GPT2LMHeadModel m(small_config(bpe.vocab_size()));
  std::vector<std::int32_t> bytes(static_cast<std::size_t>(bpe.vocab_size()), 1);
  const train::LMTrainOptions o{.batch = 3, .context = 8, .grad_accum = 2, .seed = 77};
  train::LMTask task(m, corpus.tokens, bytes, o);
  const std::int64_t N = corpus.tokens.size(), n_train = task.train_tokens();
  EXPECT_EQ(N - n_train, static_cast<std::int64_t>(std::floor(N * 0.1)));
  const auto [x, y] = task.batch(5, 1);
  ASSERT_EQ(x.shape(), (Shape{3, 8}));
  const auto xs = x.to_vector<std::int64_t>(), ys = y.to_vector<std::int64_t>();
  for (std::int64_t b = 0; b < 3; ++b) {
    const auto start = static_cast<std::int64_t>(random_bits(77, static_cast<std::uint64_t>((5 * 2 + 1) * 3 + b)) %
                                                 static_cast<std::uint64_t>(n_train - 8));
    for (std::int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(xs[static_cast<std::size_t>(b * 8 + t)], corpus.tokens[start + t]);
      EXPECT_EQ(ys[static_cast<std::size_t>(b * 8 + t)], corpus.tokens[start + t + 1]);
    }
  }
  // Too small a corpus for the context: a clear error.
  const train::LMTrainOptions huge{.context = 16, .val_fraction = 0.99995};
  EXPECT_THROW(train::LMTask(m, corpus.tokens, bytes, huge), ValueError);
}

TEST(LMGradCheck, GPT2LanguageModelLossFloat64) {
  // The whole GPT-2 (embeddings, pre-norm blocks with causal attention and GELU tanh,
  // ln_f, tied head) under the LM loss: every parameter against central differences.
  models::GPT2Config c;
  c.vocab_size = 11;
  c.n_positions = 6;
  c.n_embd = 8;
  c.n_layer = 1;
  c.n_head = 2;
  models::GPT2LMHeadModel m(c);
  models::init_gpt2_weights(m, 3);
  {
    // Larger weights than GPT-2's 0.02 so every path carries a gradient well above the FD noise.
    autograd::NoGradGuard ng;
    Generator g(4);
    for (auto& [n, p] : m.named_parameters()) p.copy_(add(p, mul(Tensor::randn(p.shape(), &g), 0.3)));
  }
  m.to(DType::F64);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 4, 2, 9, 3, 3, 7, 0, 10, 5}, {2, 5});
  const Tensor tgt = Tensor::from_vector(std::vector<std::int64_t>{4, 2, 9, 3, 8, 7, 0, 10, 5, 1}, {2, 5});
  EXPECT_TRUE(testing::gradcheck_module(
      m, [&](const std::vector<Tensor>&) { return cross_entropy(m.forward(ids).reshape({10, 11}), tgt.reshape({10})); },
      {}));
}

train::LMTrainOptions tiny_run() {
  return {.steps = 6, .batch = 4, .context = 16, .grad_accum = 2, .lr = 3e-3, .warmup = 2, .min_lr = 3e-4,
          .weight_decay = 0.1, .grad_clip = 1.0, .eval_every = 3, .val_windows = 4, .seed = 5};
}

TEST(LMTrainer, ResumesBitwiseFromItsFolder) {
  const std::string d = temp_dir("resume");
  const auto bpe = tiny_bpe();
  const auto corpus = train::tokenize_corpus({kFix + "/text/kjv_genesis.txt"}, bpe, d + "/g.tokens");
  const models::GPT2Config cfg = small_config(bpe.vocab_size());

  train::LMTrainer whole(cfg, tiny_run(), corpus.tokens, bpe);
  whole.train();
  whole.save(d + "/whole");

  {
    train::LMTrainer part(cfg, tiny_run(), corpus.tokens, bpe);
    EXPECT_FALSE(part.train({}, 4));  // stops between two evaluations
    part.save(d + "/part");
  }
  auto resumed = train::LMTrainer::resume(d + "/part", corpus.tokens, bpe);
  EXPECT_EQ(resumed->loop().step(), 4);
  EXPECT_TRUE(resumed->train());
  resumed->save(d + "/part");
  EXPECT_EQ(slurp(d + "/part/model.safetensors"), slurp(d + "/whole/model.safetensors"));
  EXPECT_EQ(resumed->loop().reports().back().metrics, whole.loop().reports().back().metrics);
  EXPECT_EQ(resumed->loop().reports().back().train_loss, whole.loop().reports().back().train_loss);

  // The folder is a GPT-2 folder: load_gpt2 gives the trained model's logits.
  const auto loaded = models::load_gpt2(d + "/whole");
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 2, 3, 4, 5}, {1, 5});
  whole.model().eval();
  // (Its Conv1D weights are read in place in their [in, out] layout: equal to float rounding.)
  EXPECT_LE(qkv::max_abs_diff(loaded->forward(ids), whole.model().forward(ids)), 1e-5);

  // Another corpus: resume refuses, naming the state file.
  write_text(d + "/other.txt", "Another text entirely, long enough to hold a few windows of sixteen tokens. " +
                                   std::string(2000, 'a'));
  const auto other = train::tokenize_corpus({d + "/other.txt"}, bpe, d + "/o.tokens");
  try {
    train::LMTrainer::resume(d + "/part", other.tokens, bpe);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("another corpus"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(train::LMTrainer::kStateFile), std::string::npos) << e.what();
  }
}

TEST(LMTrainer, LossFallsOnTheExcerpt) {
  const std::string d = temp_dir("learn");
  const auto bpe = tiny_bpe();
  const auto corpus = train::tokenize_corpus({kFix + "/text/kjv_genesis.txt"}, bpe, d + "/g.tokens");
  train::LMTrainOptions o = tiny_run();
  o.steps = 40;
  o.eval_every = 40;
  o.grad_accum = 1;
  o.batch = 8;
  o.lr = 1e-2;
  o.min_lr = 1e-3;
  train::LMTrainer t(small_config(bpe.vocab_size()), o, corpus.tokens, bpe);
  const double before = train::metric(t.task().evaluate(0), "val_loss");
  t.train();
  const double after = train::metric(t.loop().reports().back().metrics, "val_loss");
  EXPECT_NEAR(before, std::log(static_cast<double>(bpe.vocab_size())), 0.3);  // ~uniform at init
  EXPECT_LT(after, before - 0.6) << "before " << before << " after " << after;
}

}  // namespace
}  // namespace qkv
