// Data-parallel training, the parts that need no MPI job (the ranks themselves are tested
// by test_distributed_mpi under mpirun): one process is rank 0 of 1 and every collective
// is a no-op; the start-up check's comparison and its messages; what a rank other than 0
// reads instead of files (tokenizer and checkpoint contents, tokens kept in memory); the
// trainers' micro-batches (seq2seq and classifier steps of K micro-batches).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <cstdlib>
#include <fstream>

#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/qkv.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/train/classify.h"
#include "qkv/train/distributed.h"
#include "qkv/train/lm.h"
#include "qkv/train/seq2seq.h"
#include "testing/checkpoint_compare.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using train::Fields;

std::string scratch(const std::string& name) {
  const fs::path d = fs::path(::testing::TempDir()) / ("qkv_dist_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

TEST(Distributed, OneProcessIsRankZeroOfOneAndCollectivesAreNoOps) {
  train::World& w = train::start_distributed({.collective_timeout_s = 5});  // not launched by mpirun
  EXPECT_EQ(w.size(), 1);
  EXPECT_EQ(w.rank(), 0);
  EXPECT_TRUE(w.root());
  EXPECT_FALSE(w.distributed());
  EXPECT_EQ(w.comm(), nullptr);
  EXPECT_EQ(w.bucket_bytes(), 1 << 20);  // the default: max(1 MiB, ranks x 256 KiB)
  std::string bytes = "abc";
  w.broadcast(bytes, "x");
  EXPECT_EQ(bytes, "abc");
  EXPECT_EQ(w.allgather("mine", "x"), std::vector<std::string>{"mine"});
  w.barrier("x");
  w.check_same({{"a", "1"}}, "x");
  { const train::World::Busy busy(w); }
  train::stop_distributed();
  EXPECT_EQ(&train::world(), &w);
  try {
    train::start_distributed({.collective_timeout_s = 0});
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "distributed: the collective timeout must be > 0 seconds, got 0.000000");
  }
}

// A qkv built without MPI, started by mpirun as one of several ranks, refuses to run.
TEST(Distributed, WithoutMpiAJobOfSeveralRanksIsRefused) {
  if (train::built_with_mpi()) GTEST_SKIP() << "built with MPI: the refusal is the build without it";
  ::setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  try {
    train::start_distributed();
    ADD_FAILURE() << "no error";
  } catch (const train::DistributedError& e) {
    EXPECT_NE(std::string(e.what()).find("this qkv was built without MPI, so it cannot be one rank of an mpirun job"),
              std::string::npos)
        << e.what();
  }
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST(Distributed, DisagreementNamesTheFieldTheValuesAndTheRank) {
  const Fields r0{{"option --lr", "0.001"}, {"the corpus", "12"}};
  EXPECT_EQ(train::describe_disagreement({r0, r0, r0}), "");
  EXPECT_EQ(train::describe_disagreement({r0}), "");
  EXPECT_EQ(train::describe_disagreement({r0, r0, {{"option --lr", "0.002"}, {"the corpus", "12"}}}),
            "option --lr is '0.002' on rank 2 but '0.001' on rank 0");
  EXPECT_EQ(train::describe_disagreement({r0, {{"option --lr", "0.001"}}}),
            "the corpus is '12' on rank 0 but not given on rank 1");
  EXPECT_EQ(train::describe_disagreement({r0, {{"option --lr", "0.001"}, {"the corpus", "12"}, {"option --json", "true"}}}),
            "option --json is 'true' on rank 1 but not given on rank 0");
  const std::string longer(300, 'x');
  const std::string m = train::describe_disagreement({{{"k", longer}}, {{"k", "y"}}});
  EXPECT_LT(m.size(), 200u) << m;
  EXPECT_NE(m.find("..."), std::string::npos);
}

TEST(Distributed, JsonFieldsAndWeightsDigest) {
  const Fields f = train::json_fields(R"({"lr":0.001,"batch":16,"name":"a"})", "option ");
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[0], (std::pair<std::string, std::string>{"option lr", "0.001"}));
  EXPECT_EQ(f[1].second, "16");
  EXPECT_EQ(f[2].second, "\"a\"");

  nn::Linear a({.in_features = 3, .out_features = 2}), b({.in_features = 3, .out_features = 2});
  b.weight.copy_(a.weight);
  b.bias.copy_(a.bias);
  EXPECT_EQ(train::weights_digest(a), train::weights_digest(b));
  EXPECT_EQ(train::weights_digest(a).size(), 16u);
  b.weight.data<float>()[5] = std::nextafter(b.weight.data<float>()[5], 1.0f);
  EXPECT_NE(train::weights_digest(a), train::weights_digest(b));
}

// What a rank other than 0 uses instead of reading rank 0's files: their bytes.
TEST(Distributed, RanksReadCheckpointsTokenizersAndTokensFromBytes) {
  const std::string d = scratch("bytes");
  nn::Linear m({.in_features = 3, .out_features = 2});
  io::save_checkpoint(d + "/c.safetensors", {.model = &m, .model_type = "linear", .metadata = {{"k", "v"}}});
  const std::string bytes = io::read_file(d + "/c.safetensors", "test");
  const io::Checkpoint a = io::load_checkpoint(d + "/c.safetensors");
  const io::Checkpoint b = io::load_checkpoint_bytes({bytes.begin(), bytes.end()}, "rank 0's c.safetensors");
  testing::expect_same_checkpoint_tensors(a, b);
  EXPECT_EQ(a.metadata, b.metadata);
  testing::expect_same_checkpoint_tensors(a, train::shared_checkpoint(d + "/c.safetensors"));  // one process
  std::string damaged = bytes;
  damaged[damaged.size() - 1] ^= 1;
  try {
    io::load_checkpoint_bytes({damaged.begin(), damaged.end()}, "rank 0's c.safetensors");
    FAIL() << "no error";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0's c.safetensors"), std::string::npos) << e.what();
  }

  const std::string tok = std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny";
  {
    const auto bpe = tokenize::ByteLevelBPE::from_folder(tok);
    const auto same = tokenize::ByteLevelBPE::parse(io::read_file(tok + "/vocab.json", "t"),
                                                   io::read_file(tok + "/merges.txt", "t"), "v", "m");
    EXPECT_EQ(bpe.encode("Hello world, hello!"), same.encode("Hello world, hello!"));
  }
  EXPECT_THROW(tokenize::ByteLevelBPE::parse("{not json", "", "rank 0's vocab.json", "m"), FormatError);

  const std::vector<std::int64_t> ids{1, 5, 2, 7, 0};
  const train::TokenFile t = train::TokenFile::from_bytes(train::TokenFile::encode(ids, 42, 9, 8), "mem");
  ASSERT_EQ(t.size(), 5);
  EXPECT_EQ(t[3], 7);
  EXPECT_EQ(t.key(), 42u);
  std::string bad = train::TokenFile::encode(ids, 42, 9, 8);
  bad[64 + 2] = 9;  // id 9 >= vocab 8
  EXPECT_THROW(train::TokenFile::from_bytes(bad, "mem"), FormatError);
  EXPECT_THROW(train::TokenFile::from_bytes("short", "mem"), FormatError);
}

TEST(Distributed, TokenizingWithoutWritingKeepsTheTokensInMemory) {
  const std::string d = scratch("tokens");
  {
    std::ofstream(d + "/a.txt") << "In the beginning God created the heaven and the earth.";
  }
  tokenize::ByteLevelBPE bpe = [&] {
    const std::string tok = std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny";
    return tokenize::ByteLevelBPE::from_folder(tok);
  }();
  const auto mem = train::tokenize_corpus({d + "/a.txt"}, bpe, d + "/a.tokens", d + "/a.tokens.tmp", /*write_cache=*/false);
  EXPECT_FALSE(fs::exists(d + "/a.tokens"));
  EXPECT_FALSE(fs::exists(d + "/a.tokens.tmp"));
  EXPECT_FALSE(mem.reused);
  const auto file = train::tokenize_corpus({d + "/a.txt"}, bpe, d + "/a.tokens");
  ASSERT_EQ(mem.tokens.size(), file.tokens.size());
  for (std::int64_t i = 0; i < mem.tokens.size(); ++i) EXPECT_EQ(mem.tokens[i], file.tokens[i]);
  EXPECT_EQ(mem.tokens.key(), file.tokens.key());
  EXPECT_TRUE(train::tokenize_corpus({d + "/a.txt"}, bpe, d + "/a.tokens", "", false).reused);  // the cache, read only
}

// A seq2seq step of K micro-batches: the step takes batch x K examples, each micro-batch
// its share; a last step with fewer than K examples is left out of the epoch.
TEST(Distributed, Seq2SeqStepsOfSeveralMicroBatches) {
  const models::Seq2SeqOptions mo{.d_model = 16, .num_heads = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                                  .d_ff = 16, .max_positions = 16};
  auto opts = [](std::int64_t n, std::int64_t batch, std::int64_t K) {
    return train::Seq2SeqTrainOptions{.data = {.min_len = 2, .max_len = 5, .train_size = n, .test_size = 4, .seed = 3},
                                      .epochs = 1, .batch = batch, .grad_accum = K, .warmup_steps = 1};
  };
  EXPECT_EQ(train::Seq2SeqTrainer(mo, opts(10, 3, 1)).steps_per_epoch(), 4);
  EXPECT_EQ(train::Seq2SeqTrainer(mo, opts(10, 3, 2)).steps_per_epoch(), 2);  // 6 + 4 (2 + 2)
  EXPECT_EQ(train::Seq2SeqTrainer(mo, opts(13, 3, 4)).steps_per_epoch(), 1);  // 12, then 1 < 4 left out
  try {
    train::Seq2SeqTrainer(mo, opts(3, 3, 4));
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("smaller than the micro-batches of one step (4)"), std::string::npos)
        << e.what();
  }
  // The option round-trips, and runs saved before it existed read as 1.
  EXPECT_EQ(train::Seq2SeqTrainOptions::from_json(opts(10, 3, 2).to_json()).grad_accum, 2);
  EXPECT_EQ(train::Seq2SeqTrainOptions::from_json(R"({"batch": 3})").grad_accum, 1);
  // Two micro-batches of 4 sequences equal one batch of 8 when every sequence has the same
  // length (the mean of equal-size means): the first step's loss within float rounding.
  // (The weights after it are not compared: AdamW's first update is about lr x sign(g), so a
  // rounding-level difference in a near-zero gradient moves a weight by up to 2 lr.)
  auto first_loss = [&](std::int64_t batch, std::int64_t K) {
    train::Seq2SeqTrainOptions o = opts(16, batch, K);
    o.data.min_len = o.data.max_len = 4;
    o.steps = 1;
    train::Seq2SeqTrainer t(mo, o);
    double loss = 0;
    t.train({.on_step = [&](std::int64_t, std::int64_t, double l) { loss = l; }});
    return loss;
  };
  EXPECT_NEAR(first_loss(8, 1), first_loss(4, 2), 1e-6);
}

TEST(Distributed, ClassifierEpochsOfSeveralMicroBatches) {
  const train::ClassifyRunOptions base{.model = {.d_model = 8, .num_heads = 2, .d_ff = 8, .num_layers = 1, .dropout = 0.0},
                                       .epochs = 3, .train_size = 40, .val_size = 10, .eval_every = 3};
  train::ClassifyRunOptions two = base;
  two.grad_accum = 2;
  train::ClassifyTrainer a(base), b(two);
  std::vector<double> la, lb;
  a.train({}, [&](std::int64_t, double l) { la.push_back(l); });
  b.train({}, [&](std::int64_t, double l) { lb.push_back(l); });
  ASSERT_EQ(la.size(), 3u);
  ASSERT_EQ(lb.size(), 3u);
  EXPECT_NEAR(la[0], lb[0], 1e-6);  // the mean of two equal halves' means is the whole mean
  // Later epochs drift by what Adam makes of rounding-level gradient differences (~lr).
  const auto pa = a.model().parameters(), pb = b.model().parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_LT(max_abs_diff(pa[i], pb[i]), 3 * 2e-3) << i;
  // Saved and resumed: the checkpoint keeps it.
  const std::string d = scratch("clf");
  b.save(d + "/c.safetensors");
  const train::ClassifyTrainer r(io::load_checkpoint(d + "/c.safetensors"), d + "/c.safetensors", 5, 1);
  EXPECT_EQ(r.options().grad_accum, 2);
  train::ClassifyRunOptions bad = base;
  bad.grad_accum = 41;
  try {
    train::ClassifyTrainer t(bad);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("must be in [1, the 40 training sequences], got 41"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace qkv
