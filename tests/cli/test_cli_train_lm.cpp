// qkv train lm end to end: the JSON lines, the folder it writes (qkv generate loads it),
// --resume bitwise identical to an uninterrupted run, --init-only, and clear errors.
#include <gtest/gtest.h>

#include "cli_test_util.h"
#include "qkv/tokenize/bpe.h"

namespace qkv::cli_test {
namespace {

const std::string kFix = QKV_FIXTURE_DIR;
// A small run on the committed excerpt with the committed tiny tokenizer (a few seconds).
const std::string kRun = "train lm --text '" + kFix + "/text/kjv_genesis.txt' --tokenizer '" + kFix +
                         "/gpt2_tiny' --layers 2 --d-model 32 --heads 4 --context 32 --batch 4 --steps 12 "
                         "--warmup 3 --lr 3e-3 --min-lr 3e-4 --eval-every 4 --val-windows 4 --sample-tokens 8 "
                         "--prompt 'And God' --no-progress --threads 2";

TEST(CliTrainLM, JsonLinesFolderAndGenerate) {
  const fs::path dir = unique_temp("lm");
  const Result r = run(kRun + " --json --out '" + dir.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;  // evaluations at 4, 8, 12, then the summary
  for (int i = 0; i < 3; ++i) {
    const auto& j = lines[static_cast<std::size_t>(i)];
    EXPECT_EQ(j["event"], "eval");
    EXPECT_EQ(j["step"], 4 * (i + 1));
    for (const char* k : {"train_loss", "val_loss", "val_bpb", "tokens_per_s", "lr", "elapsed_s"})
      EXPECT_TRUE(j.contains(k) && j[k].is_number()) << k;
    EXPECT_TRUE(j["sample"].get<std::string>().rfind("And God", 0) == 0) << j["sample"];
  }
  EXPECT_LT(lines[2]["val_loss"].get<double>(), lines[0]["val_loss"].get<double>());
  const auto& done = lines.back();
  EXPECT_EQ(done["event"], "done");
  EXPECT_EQ(done["val_loss"], lines[2]["val_loss"]);
  EXPECT_EQ(done["out"], dir.string());
  EXPECT_EQ(done["finished"], true);
  for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt", "qkv_train_state.safetensors"})
    EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_TRUE(fs::exists(dir.string() + ".tokens"));
  const Result g = run("generate --model '" + dir.string() + "' --prompt 'And God' --max-new 8 --json");
  ASSERT_EQ(g.code, 0) << g.err;
  // The folder's sample at the last evaluation is the same greedy continuation.
  EXPECT_EQ("And God" + json_lines(g.out)[0]["text"].get<std::string>(), lines[2]["sample"].get<std::string>());
}

TEST(CliTrainLM, ResumeAndInitOnlyAreBitwiseIdentical) {
  const fs::path whole = unique_temp("lm_whole"), part = unique_temp("lm_part"), init = unique_temp("lm_init");
  ASSERT_EQ(run(kRun + " --out '" + whole.string() + "'").code, 0);
  const Result p1 = run(kRun + " --stop-after 6 --out '" + part.string() + "'");
  ASSERT_EQ(p1.code, 0) << p1.err;
  EXPECT_NE(p1.out.find("stopped at step 6 of 12"), std::string::npos) << p1.out;
  const std::string text = " --text '" + kFix + "/text/kjv_genesis.txt' --no-progress --threads 2";
  const Result p2 = run("train lm --resume --out '" + part.string() + "'" + text);
  ASSERT_EQ(p2.code, 0) << p2.err;
  EXPECT_NE(p2.out.find("resumed from"), std::string::npos);
  EXPECT_EQ(read_file(part / "model.safetensors"), read_file(whole / "model.safetensors"));
  EXPECT_EQ(read_file(part / "qkv_train_state.safetensors").size(),
            read_file(whole / "qkv_train_state.safetensors").size());

  ASSERT_EQ(run(kRun + " --init-only --out '" + init.string() + "'").code, 0);
  ASSERT_EQ(run("train lm --resume --out '" + init.string() + "'" + text).code, 0);
  EXPECT_EQ(read_file(init / "model.safetensors"), read_file(whole / "model.safetensors"));

  // A finished run cannot be resumed; the run's settings cannot be changed on resume.
  const Result fin = run("train lm --resume --out '" + whole.string() + "'" + text);
  EXPECT_EQ(fin.code, 1);
  EXPECT_NE(fin.err.find("finished run"), std::string::npos) << fin.err;
  const Result lr = run("train lm --resume --lr 1 --out '" + part.string() + "'" + text);
  EXPECT_NE(lr.code, 0);
  EXPECT_NE(lr.err.find("excludes"), std::string::npos) << lr.err;
}

TEST(CliTrainLM, VocabSizeTrainsTheTokenizerIntoTheFolder) {
  // --vocab-size learns a byte-level BPE on the texts (tokenize::train_byte_level_bpe_files, Hugging
  // Face's BpeTrainer rules) and writes it into the folder, which then loads as a whole.
  const fs::path dir = unique_temp("lm_vocab");
  const Result r = run("train lm --text '" + kFix + "/text/kjv_genesis.txt' --vocab-size 400 --layers 1 --d-model 16 "
                       "--heads 2 --context 16 --batch 2 --steps 2 --eval-every 0 --val-windows 2 --json --no-progress "
                       "--out '" + dir.string() + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto tok = tokenize::ByteLevelBPE::from_folder(dir.string());
  EXPECT_EQ(tok.vocab_size(), 400);
  const Result g = run("generate --model '" + dir.string() + "' --prompt 'In the' --max-new 4 --json");
  EXPECT_EQ(g.code, 0) << g.err;
}

TEST(CliTrainLM, ErrorsAreOneClearLine) {
  const fs::path dir = unique_temp("lm_err");
  const std::string tok = " --tokenizer '" + kFix + "/gpt2_tiny' --out '" + dir.string() + "' --no-progress";
  const Result missing = run("train lm --text /nonexistent/corpus.txt" + tok);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("/nonexistent/corpus.txt"), std::string::npos) << missing.err;
  const fs::path bad = unique_temp("lm_bad_utf8");
  { std::ofstream(bad) << "fine line\n" << std::string("\xc3\x28", 2) << "\n"; }
  const Result utf8 = run("train lm --text '" + bad.string() + "'" + tok);
  EXPECT_EQ(utf8.code, 1);
  EXPECT_NE(utf8.err.find(bad.filename().string()), std::string::npos) << utf8.err;
  const Result heads = run("train lm --text '" + kFix + "/text/kjv_genesis.txt' --d-model 30 --heads 4" + tok);
  EXPECT_EQ(heads.code, 1);
  EXPECT_NE(heads.err.find("not divisible"), std::string::npos) << heads.err;
  const Result ctx = run("train lm --text '" + kFix + "/text/kjv_genesis.txt' --context 20000 --batch 1 --layers 1 --d-model 32 --heads 4 --val-fraction 0.5" + tok);
  EXPECT_EQ(ctx.code, 1);
  EXPECT_NE(ctx.err.find("needs at least"), std::string::npos) << ctx.err;
  const Result none = run("train lm --text '" + kFix + "/text/kjv_genesis.txt' --out '" + dir.string() + "'");
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("--vocab-size"), std::string::npos) << none.err;
  const Result both = run("train lm --text '" + kFix + "/text/kjv_genesis.txt' --vocab-size 300" + tok);
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
  const fs::path fresh = unique_temp("lm_none");
  const Result noresume = run("train lm --resume --text '" + kFix + "/text/kjv_genesis.txt' --out '" + fresh.string() + "'");
  EXPECT_EQ(noresume.code, 1);
  EXPECT_NE(noresume.err.find("--out " + fresh.string() + ": no such folder"), std::string::npos) << noresume.err;
  fs::create_directories(fresh);
  const Result norun = run("train lm --resume --text '" + kFix + "/text/kjv_genesis.txt' --out '" + fresh.string() + "'");
  EXPECT_EQ(norun.code, 1);
  EXPECT_NE(norun.err.find(fresh.string() + " holds no training run (no qkv_train_state.safetensors)"), std::string::npos)
      << norun.err;
}

}  // namespace
}  // namespace qkv::cli_test
