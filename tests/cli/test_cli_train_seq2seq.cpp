// `qkv train seq2seq` end to end: a small run that learns, checkpoints that
// resume bitwise (the whole run vs. the first half stopped with
// --stop-after-epoch and the rest resumed in another process), and the
// errors of --resume.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "testing/checkpoint_compare.h"
#include "cli/cli_test_util.h"
#include "qkv/io/checkpoint.h"

namespace qkv::cli_test {
namespace {

// 63 steps per epoch, 6 epochs: about 1.5 s on one thread, and it learns
// (held-out exact accuracy ~0.96 at the end). Dropout is on so the RNG state matters.
const std::string kRun =
    "train seq2seq --threads 1 --no-progress --json --examples 0 --d-model 32 --heads 4 --layers 1 --d-ff 64 "
    "--max-len 4 --train-size 2000 --test-size 100 --batch 32 --warmup 20 --dropout 0.1 --lr 3e-3 --epochs 6 ";

using qkv::testing::bitwise_equal;
using qkv::testing::expect_same_checkpoint_tensors;

TEST(CliTrainSeq2Seq, ResumeIsBitwiseIdenticalToAnUninterruptedRun) {
  const fs::path dir = unique_temp("s2s_resume");
  fs::create_directories(dir);
  const std::string full_ckpt = (dir / "full.st").string(), half_ckpt = (dir / "half.st").string(),
                    resumed_ckpt = (dir / "resumed.st").string();
  const Result full = run(kRun + "--save '" + full_ckpt + "'");
  ASSERT_EQ(full.code, 0) << full.err;
  const Result half = run(kRun + "--stop-after-epoch 3 --save '" + half_ckpt + "'");
  ASSERT_EQ(half.code, 0) << half.err;
  const Result rest = run("train seq2seq --threads 1 --no-progress --json --examples 0 --resume '" + half_ckpt +
                          "' --save '" + resumed_ckpt + "'");
  ASSERT_EQ(rest.code, 0) << rest.err;

  const auto a = json_events(full.out, "eval"), b1 = json_events(half.out, "eval"), b2 = json_events(rest.out, "eval");
  ASSERT_EQ(a.size(), 6u) << full.out;
  ASSERT_EQ(b1.size(), 3u) << half.out;
  ASSERT_EQ(b2.size(), 3u) << rest.out;
  for (std::size_t e = 0; e < 6; ++e) {
    const auto& b = e < 3 ? b1[e] : b2[e - 3];
    SCOPED_TRACE("epoch " + std::to_string(e + 1));
    EXPECT_EQ(b["epoch"], a[e]["epoch"]);
    EXPECT_EQ(b["step"], a[e]["step"]);
    // JSON doubles round-trip: equal text means equal bits.
    EXPECT_EQ(b["loss"].dump(), a[e]["loss"].dump());
    EXPECT_EQ(b["lr"].dump(), a[e]["lr"].dump());
    EXPECT_EQ(b["exact_acc"], a[e]["exact_acc"]);
    EXPECT_EQ(b["train_acc"], a[e]["train_acc"]);
  }
  EXPECT_GE(a.back()["exact_acc"].get<double>(), 0.8) << "the small run should learn the task";
  EXPECT_LT(a.back()["loss"].get<double>(), a.front()["loss"].get<double>());
  const auto half_done = json_events(half.out, "done"), rest_done = json_events(rest.out, "done");
  ASSERT_EQ(half_done.size(), 1u);
  ASSERT_EQ(rest_done.size(), 1u);
  EXPECT_EQ(half_done[0]["finished"], false);
  EXPECT_EQ(rest_done[0]["finished"], true);

  const io::Checkpoint x = io::load_checkpoint(full_ckpt), y = io::load_checkpoint(resumed_ckpt);
  expect_same_checkpoint_tensors(x, y);
  EXPECT_GT(x.rng_offset, 0u) << "dropout drew from the generator";
  for (const char* k : {"step", "epoch", "finished", "shuffle_rng_offset", "train_config"})
    EXPECT_EQ(x.metadata.at(k), y.metadata.at(k)) << k;
  EXPECT_EQ(x.metadata.at("epoch"), "6");
  const io::Checkpoint h = io::load_checkpoint(half_ckpt);
  EXPECT_EQ(h.metadata.at("epoch"), "3");
  EXPECT_EQ(h.metadata.at("finished"), "false");

  // The resumed model is the one `qkv heatmap` reads.
  const Result hm = run("heatmap --checkpoint '" + resumed_ckpt + "' --input '1 2 3' --out '" +
                        (dir / "heatmap").string() + "'");
  EXPECT_EQ(hm.code, 0) << hm.err;
  fs::remove_all(dir);
}

// --save-every writes checkpoints along the way; resuming the one from the
// middle of the run (kept by stopping there) ends where the whole run ends.
TEST(CliTrainSeq2Seq, SaveEveryAndResumeInTwoParts) {
  const fs::path dir = unique_temp("s2s_every");
  fs::create_directories(dir);
  const std::string ckpt = (dir / "run.st").string();
  const std::string small = "train seq2seq --threads 1 --no-progress --json --examples 0 --d-model 16 --heads 2 "
                            "--layers 1 --d-ff 32 --max-len 4 --train-size 256 --test-size 40 --batch 32 --warmup 8 "
                            "--dropout 0.1 --epochs 4 ";
  const Result whole = run(small);
  ASSERT_EQ(whole.code, 0) << whole.err;
  // Part 1: epochs 1-2 (a periodic save at epoch 1, the final one at 2); parts 2 and 3: one epoch each.
  const Result p1 = run(small + "--save-every 1 --stop-after-epoch 2 --save '" + ckpt + "'");
  ASSERT_EQ(p1.code, 0) << p1.err;
  const std::string resume = "train seq2seq --threads 1 --no-progress --json --examples 0 --resume '" + ckpt + "' ";
  const Result p2 = run(resume + "--stop-after-epoch 3 --save '" + ckpt + "'");
  ASSERT_EQ(p2.code, 0) << p2.err;
  const Result p3 = run(resume + "--save '" + ckpt + "'");
  ASSERT_EQ(p3.code, 0) << p3.err;
  const auto w = json_events(whole.out, "eval");
  std::vector<nlohmann::json> parts;
  for (const Result* p : {&p1, &p2, &p3})
    for (const auto& j : json_events(p->out, "eval")) parts.push_back(j);
  ASSERT_EQ(w.size(), 4u);
  ASSERT_EQ(parts.size(), 4u);
  for (std::size_t e = 0; e < 4; ++e) EXPECT_EQ(parts[e]["loss"].dump(), w[e]["loss"].dump()) << "epoch " << e + 1;

  // The run is finished now: resuming it again is an error naming the file.
  const Result again = run(resume);
  EXPECT_EQ(again.code, 1);
  EXPECT_EQ(count_lines(again.err), 1) << again.err;
  EXPECT_NE(again.err.find("finished run"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find(ckpt), std::string::npos) << again.err;
  fs::remove_all(dir);
}

TEST(CliTrainSeq2Seq, ResumeErrorsGiveOneClearLine) {
  const fs::path dir = unique_temp("s2s_errors");
  fs::create_directories(dir);
  const std::string ckpt = (dir / "half.st").string(), clf = (dir / "clf.st").string();
  ASSERT_EQ(run("train seq2seq --no-progress --examples 0 --d-model 16 --heads 2 --layers 1 --d-ff 32 --max-len 3 "
                "--train-size 64 --test-size 10 --batch 32 --epochs 2 --stop-after-epoch 1 --save '" + ckpt + "'")
                .code,
            0);
  ASSERT_EQ(run("train classify --no-progress --epochs 2 --save '" + clf + "'").code, 0);
  struct Case {
    std::string args, says;
    int code;
  };
  const std::vector<Case> cases = {
      // The checkpoint fixes the run: its settings cannot be given again.
      {"train seq2seq --resume '" + ckpt + "' --epochs 4", "--epochs excludes --resume", 2},
      {"train seq2seq --resume '" + ckpt + "' --lr 1e-2", "--lr excludes --resume", 2},
      {"train seq2seq --stop-after-epoch 1", "--stop-after-epoch requires --save", 2},
      {"train seq2seq --resume '" + ckpt + "' --stop-after-epoch 1 --save '" + ckpt + "'", "already at epoch 1", 1},
      {"train seq2seq --resume /nonexistent/run.safetensors", "/nonexistent/run.safetensors", 2},
      {"train seq2seq --resume '" + clf + "'", "'classifier' model, not a seq2seq training run", 1},
      {"train classify --resume '" + ckpt + "'", "not a 'qkv train classify' checkpoint", 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    const Result r = run(c.args);
    EXPECT_EQ(r.code, c.code) << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
  const Result help = run("train seq2seq --help");
  EXPECT_EQ(help.code, 0);
  for (const char* opt : {"--resume", "--save-every", "--stop-after-epoch"})
    EXPECT_NE(help.out.find(opt), std::string::npos) << opt;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::cli_test
