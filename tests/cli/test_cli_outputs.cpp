// Outputs of the writing commands (issue 25 item 1): a failed or interrupted run never touches
// what is already there. Every failing case leaves the output folder bitwise as it was (or
// absent, with nothing beside it); an output that holds something else is refused unless
// --overwrite; Ctrl-C finishes the step, saves it and prints a resume command that works; a
// second Ctrl-C quits at once; SIGINT and SIGKILL at random points leave nothing or a
// loadable folder that resumes bitwise to where the uninterrupted run ends.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <regex>
#include <thread>
#include <tuple>

#include "cli_test_util.h"
#include "qkv/io/checkpoint.h"
#include "qkv/models/gpt2.h"
#include "qkv/tokenize/bpe.h"

namespace qkv::cli_test {
namespace {

using Tree = std::map<std::string, std::string>;  // relative path -> bytes ("/" for a folder)

// Everything under dir, bytes included (empty if dir is missing).
Tree snapshot(const fs::path& dir) {
  Tree t;
  if (!fs::exists(dir)) return t;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    t[fs::relative(e.path(), dir).string()] = e.is_directory() ? "/" : read_file(e.path());
  return t;
}

fs::path scratch(const std::string& name) {
  const fs::path d = unique_temp(name);
  fs::create_directories(d);
  return d;
}

const std::string kText = fixture("text/kjv_genesis.txt");

// A small run (about a second): a 512-token BPE learnt on the excerpt, one layer.
std::string lm_run(const fs::path& out, int steps = 20, int eval_every = 10) {
  return "train lm --text '" + kText + "' --vocab-size 512 --layers 1 --d-model 32 --heads 4 --context 32 --batch 4 "
         "--steps " + std::to_string(steps) + " --eval-every " + std::to_string(eval_every) +
         " --val-windows 2 --sample-tokens 4 --no-progress --threads 1 --out '" + out.string() + "'";
}

void expect_error(const Result& r, const std::vector<std::string>& parts, const std::string& what) {
  EXPECT_EQ(r.code, 1) << what << ": " << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << what << ": " << r.err;
  for (const std::string& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << what << ": no '" << p << "' in " << r.err;
}

TEST(CliOutputs, AFailedRunNeverTouchesATrainedModel) {
  // The report: a second run into v1 that fails (here: every way it can) used to
  // rewrite v1's vocab.json and merges.txt, so v1 generated with the wrong tokenizer.
  const fs::path base = scratch("outputs_v1"), v1 = base / "v1";
  const Result first = run(lm_run(v1));
  ASSERT_EQ(first.code, 0) << first.err;
  const Tree before = snapshot(base);  // v1 and v1.tokens, bitwise
  ASSERT_TRUE(before.count("v1/vocab.json") && before.count("v1.tokens"));
  const fs::path other = unique_temp("outputs_other.txt");
  { std::ofstream(other) << read_file(kText).substr(0, 30000); }
  const std::string again = "train lm --text '" + kText + "' --out '" + v1.string() + "' --no-progress";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {" --vocab-size 300 --d-model 30 --heads 4", {"--d-model 30 is not divisible by --heads 4"}},
      {" --vocab-size 300", {"--out " + v1.string() + " already holds config.json", "--overwrite", "--resume"}},
      {" --vocab-size 300 --lr inf", {"--lr"}},
      {" --resume", {"finished run (step 20 of 20)"}},
      {" --resume --text '" + other.string() + "'", {"another corpus"}},
      {" --tokenizer '" + kText + "'", {"--tokenizer " + kText + " is a file, expected a tokenizer folder"}},
  };
  for (const auto& [args, parts] : cases) {
    const Result r = run(again + args);
    EXPECT_NE(r.code, 0) << args;
    for (const std::string& p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(snapshot(base), before) << "qkv " << again << args << " changed the folder";
  }
  const Result dir_text = run("train lm --text '" + base.string() + "' --vocab-size 300 --out '" + v1.string() + "'");
  expect_error(dir_text, {"--text " + base.string() + " is a directory, expected a text file"}, "a folder as --text");
  EXPECT_EQ(snapshot(base), before);
  EXPECT_EQ(tokenize::ByteLevelBPE::from_folder(v1.string()).vocab_size(), 512);
}

TEST(CliOutputs, AFailedFirstRunLeavesNoFolder) {
  const fs::path base = scratch("outputs_first"), out = base / "run";
  const fs::path bad = base / "bad.txt";
  { std::ofstream(bad) << "fine line\n" << std::string("\xc3\x28", 2) << "\n"; }
  const std::string tiny = " --tokenizer '" + fixture("gpt2_tiny") + "' --out '" + out.string() + "' --no-progress";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train lm --text '" + bad.string() + "'" + tiny, "bad.txt"},
      {"train lm --text '" + kText + "' --context 20000 --batch 1 --layers 1 --d-model 32 --heads 4 --val-fraction 0.5" + tiny, "needs at least"},
      {"train lm --text '" + kText + "' --batch 65536 --context 4096 --d-model 1024" + tiny, "of memory"},
      {"train lm --text /nonexistent/corpus.txt" + tiny, "/nonexistent/corpus.txt: no such file"},
      {"tokenize train --text '" + bad.string() + "' --vocab-size 300 --out '" + out.string() + "'", "bad.txt"},
      {"convert --model '" + base.string() + "' --out '" + out.string() + "'", "config.json"},
      {"heatmap --checkpoint '" + kText + "' --input '1 2' --out '" + out.string() + "'", "kjv_genesis.txt"},
  };
  const Tree empty = snapshot(base);
  for (const auto& [args, part] : cases) {
    const Result r = run(args);
    EXPECT_EQ(r.code, 1) << args << ": " << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(snapshot(base), empty) << "qkv " << args << " left files behind";
  }
}

TEST(CliOutputs, OverwriteReplacesTheFolderAndResumeKeepsTheUsersFiles) {
  const fs::path base = scratch("outputs_overwrite"), v1 = base / "v1";
  ASSERT_EQ(run(lm_run(v1, 20) + " --stop-after 10").code, 0);
  { std::ofstream(v1 / "NOTES.txt") << "my notes\n"; }
  const Result resumed = run("train lm --resume --text '" + kText + "' --out '" + v1.string() + "' --no-progress --threads 1");
  ASSERT_EQ(resumed.code, 0) << resumed.err;
  EXPECT_EQ(read_file(v1 / "NOTES.txt"), "my notes\n");  // a save replaces the folder but keeps the user's files
  const Result fresh = run("train lm --text '" + kText + "' --vocab-size 300 --layers 1 --d-model 16 --heads 2 "
                           "--context 16 --batch 2 --steps 2 --eval-every 0 --val-windows 2 --no-progress --overwrite "
                           "--out '" + v1.string() + "'");
  ASSERT_EQ(fresh.code, 0) << fresh.err;
  EXPECT_FALSE(fs::exists(v1 / "NOTES.txt"));  // --overwrite replaces the folder as a whole
  EXPECT_EQ(tokenize::ByteLevelBPE::from_folder(v1.string()).vocab_size(), 300);
  EXPECT_EQ(models::load_gpt2(v1.string())->config().vocab_size, 300);
  const Result both = run("train lm --resume --overwrite --text '" + kText + "' --out '" + v1.string() + "'");
  EXPECT_NE(both.code, 0);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
}

TEST(CliOutputs, EveryWritingCommandRefusesAnOutputThatHoldsSomethingElse) {
  const fs::path base = scratch("outputs_taken"), taken = base / "taken", file = base / "taken.bin";
  fs::create_directories(taken);
  { std::ofstream(taken / "mine.txt") << "keep me\n"; }
  { std::ofstream(file) << "keep me too\n"; }
  const fs::path clf = base / "clf.safetensors";
  ASSERT_EQ(run("train classify --epochs 2 --no-progress --save '" + clf.string() + "'").code, 0);
  const Tree before = snapshot(base);
  const std::string T = "'" + taken.string() + "'", F = "'" + file.string() + "'";
  const std::string holds = "--out " + taken.string() + " already holds mine.txt; give --overwrite";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"tokenize train --text '" + kText + "' --vocab-size 300 --out " + T, {"tokenize train: " + holds}},
      {"convert --model '" + fixture("gpt2_tiny") + "' --out " + T, {"convert: " + holds}},
      {"heatmap --checkpoint '" + clf.string() + "' --input '3 7 1' --out " + T, {"heatmap: " + holds}},
      {lm_run(taken), {"train lm: " + holds, "--resume"}},
      {"demo --out " + T, {"demo: --out " + taken.string() + " holds files the demo does not write (mine.txt)"}},
      {"embed --model '" + fixture("bert") + "' --out " + F + " hello", {"embed: --out " + file.string() + " already exists; give --overwrite"}},
      {"train classify --epochs 2 --save " + F, {"train classify: --save " + file.string() + " already exists"}},
      {"train seq2seq --epochs 1 --save " + F, {"train seq2seq: --save " + file.string() + " already exists"}},
      // A file where a folder is written, and the reverse.
      {"tokenize train --text '" + kText + "' --vocab-size 300 --out " + F,
       {"--out " + file.string() + " is a file, expected a folder"}},
      {"embed --model '" + fixture("bert") + "' --out " + T + " hello", {"--out " + taken.string() + " is a folder, expected a file"}},
      {"train classify --epochs 2 --save " + T, {"--save " + taken.string() + " is a folder, expected a file"}},
  };
  for (const auto& [args, parts] : cases) {
    const Result r = run(args);
    expect_error(r, parts, args);
    EXPECT_EQ(snapshot(base), before) << "qkv " << args << " changed what was there";
  }
  // With --overwrite the folder is replaced whole: the user's file is gone, the new files are there.
  const Result ok = run("tokenize train --text '" + kText + "' --vocab-size 300 --overwrite --out " + T);
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(snapshot(taken).size(), 2u);
  EXPECT_TRUE(fs::exists(taken / "vocab.json"));
}

TEST(CliOutputs, TrainingSizesAreCheckedBeforeAnythingIsAllocated) {
  // Under a 2 GB address-space cap a command that started allocating what it should refuse
  // dies instead of printing its message.
  const fs::path base = scratch("outputs_sizes");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"train lm --text '" + kText + "' --tokenizer '" + fixture("gpt2_tiny") +
           "' --batch 65536 --context 4096 --d-model 1024 --out '" + (base / "lm").string() + "'",
       "train lm (6 layers, d_model 1024, vocab 1000; batch 65536 x context 4096 tokens): needs"},
      {"train classify --train-size 10000000 --d-model 4096 --d-ff 65536 --save '" + (base / "c.st").string() + "'",
       "train classify (10000000 training sequences, full batch"},
      {"train seq2seq --train-size 10000000 --test-size 1000000 --max-len 1000 --save '" + (base / "s.st").string() + "'",
       "train seq2seq (10000000 + 1000000 sequences of up to 1000 digits"},
  };
  for (const auto& [args, part] : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    const Result r = run(args, memory_cap(2000000));
    expect_error(r, {part, "of memory, but only"}, args);
    EXPECT_TRUE(snapshot(base).empty()) << args;
    std::cout << "  " << args.substr(0, args.find(" --")) << ": refused in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s\n";
  }
}

// ------------------------------------------------------------------ signals

// The uninterrupted run the interrupted ones must resume to, bitwise, and its run time.
struct Reference {
  std::string model;
  std::chrono::microseconds time{};
};

constexpr int kSteps = 300, kEvalEvery = 10;

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    const fs::path d = scratch("outputs_ref") / "run";
    const auto t0 = std::chrono::steady_clock::now();
    const Result res = run(lm_run(d, kSteps, kEvalEvery));
    r.time = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
    EXPECT_EQ(res.code, 0) << res.err;
    r.model = read_file(d / "model.safetensors");
    return r;
  }();
  return ref;
}

// A folder a killed or interrupted run left: it loads (model, tokenizer, state) and, resumed
// until the end, gives the uninterrupted run's model bitwise. Returns the step it held.
std::int64_t check_resumable(const fs::path& dir, const std::string& resume_args) {
  EXPECT_NO_THROW(models::load_gpt2(dir.string())) << dir;
  EXPECT_NO_THROW(tokenize::ByteLevelBPE::from_folder(dir.string())) << dir;
  const io::Checkpoint c = io::load_checkpoint((dir / "qkv_train_state.safetensors").string());
  const std::int64_t step = std::stoll(c.metadata.at("step"));
  if (step < kSteps) {
    const Result r = run(resume_args + " --no-progress --threads 1");
    EXPECT_EQ(r.code, 0) << resume_args << ": " << r.err;
  }
  EXPECT_EQ(read_file(dir / "model.safetensors"), reference().model) << "resumed from step " << step;
  // Nothing of a killed writer is left beside the folder once the resume ran.
  for (const auto& e : fs::directory_iterator(dir.parent_path())) {
    const std::string n = e.path().filename().string();
    EXPECT_TRUE(n == dir.filename().string() || n == dir.filename().string() + ".tokens") << "left behind: " << n;
  }
  return step;
}

TEST(CliOutputs, CtrlCFinishesTheStepSavesItAndPrintsAResumeCommandThatWorks) {
  const Reference& ref = reference();
  int interrupted = 0, before_training = 0, finished = 0;
  for (int i = 1; i <= 6; ++i) {
    const fs::path dir = scratch("outputs_int") / "run";
    const Spawned p = spawn(lm_run(dir, kSteps, kEvalEvery));
    std::this_thread::sleep_for(ref.time * i / 7);
    ::kill(p.pid, SIGINT);
    const Result r = wait_for(p);
    if (r.signal == SIGINT || r.out.find("interrupted before training began; nothing was written") != std::string::npos) {
      ++before_training;  // before the handler was installed (the default action) or before training
      EXPECT_TRUE(r.signal == SIGINT || r.code == 130) << r.err;
      EXPECT_TRUE(fs::is_empty(dir.parent_path())) << "a run stopped before training left files";
      continue;
    }
    if (r.code == 0) {
      ++finished;
      continue;
    }
    ++interrupted;
    ASSERT_EQ(r.code, 130) << r.err;
    EXPECT_NE(r.err.find("interrupted; stopping once the current step is done"), std::string::npos) << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex("interrupted at step ([0-9]+) of 300; continue with: qkv (.*)\n")))
        << r.out;
    // The printed command, run as printed, continues the run to the uninterrupted run's end.
    const std::int64_t step = check_resumable(dir, m[2].str());
    EXPECT_EQ(step, std::stoll(m[1].str()));
  }
  std::cout << "  Ctrl-C: " << interrupted << " runs interrupted and resumed bitwise, " << before_training
            << " stopped before training (no folder), " << finished << " had finished\n";
  EXPECT_GT(interrupted, 0);
}

TEST(CliOutputs, ASecondCtrlCQuitsAtOnceKeepingTheLastCompleteSave) {
  // The second Ctrl-C comes at once, during the step, or while the command saves and exits
  // (after the training loop's handler is gone): 130 every time, never death by the signal.
  for (const int gap_ms : {2, 20, 60, 150}) {
    SCOPED_TRACE("second Ctrl-C after " + std::to_string(gap_ms) + " ms");
    const fs::path dir = scratch("outputs_int2") / "run";
    const Spawned p = spawn(lm_run(dir, 100000, kEvalEvery));
    for (int i = 0; i < 3000 && !fs::exists(dir / "qkv_train_state.safetensors"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_TRUE(fs::exists(dir / "qkv_train_state.safetensors"));
    ::kill(p.pid, SIGINT);
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
    ::kill(p.pid, SIGINT);
    const Result r = wait_for(p);
    EXPECT_EQ(r.code, 130) << "signal " << r.signal << "\n" << r.err;
    EXPECT_NO_THROW(models::load_gpt2(dir.string()));
    EXPECT_NO_THROW(io::load_checkpoint((dir / "qkv_train_state.safetensors").string()));
  }
}

// The classifier and seq2seq runs: Ctrl-C finishes the step, saves the checkpoint (a file,
// renamed into place) and prints the command that continues it.
TEST(CliOutputs, CtrlCSavesTheClassifierAndSeq2SeqRunsToo) {
  const fs::path base = scratch("outputs_int_small");
  const std::vector<std::tuple<std::string, std::string, std::string>> runs = {
      {"train classify --epochs 10000000 --log-every 1000000 --no-progress --threads 1 --save '" +
           (base / "clf.st").string() + "'",
       "interrupted at epoch ([0-9]+) of 10000000; saved .*; continue with: qkv (train classify --resume .* --epochs "
       "10000000 --save .*)\n",
       (base / "clf.st").string()},
      {"train seq2seq --epochs 100000 --train-size 64 --test-size 8 --batch 8 --d-model 16 --heads 2 --d-ff 32 "
       "--layers 1 --no-progress --threads 1 --save '" + (base / "s2s.st").string() + "'",
       "interrupted at step ([0-9]+) of 800000 \\(epoch [0-9]+ complete\\); saved .*; continue with: qkv "
       "(train seq2seq --resume .* --save .*)\n",
       (base / "s2s.st").string()},
  };
  for (const auto& [args, pattern, file] : runs) {
    const Spawned p = spawn(args);
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    ::kill(p.pid, SIGINT);
    const Result r = wait_for(p);
    ASSERT_EQ(r.code, 130) << args << ": " << r.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(pattern))) << r.out;
    const io::Checkpoint c = io::load_checkpoint(file);
    EXPECT_EQ(c.metadata.at("step"), m[1].str());
    // The printed command continues the run: interrupted again at once, it saves a later step.
    const Spawned q = spawn(m[2].str() + " --no-progress --threads 1");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(q.pid, SIGINT);
    const Result again = wait_for(q);
    EXPECT_EQ(again.code, 130) << again.err;
    EXPECT_GT(std::stoll(io::load_checkpoint(file).metadata.at("step")), std::stoll(m[1].str()));
  }
}

TEST(CliOutputs, SigkillAtRandomPointsLeavesNothingOrALoadableFolder) {
  const Reference& ref = reference();
  int nothing = 0, loadable = 0;
  for (int i = 0; i < 8; ++i) {
    const fs::path dir = scratch("outputs_kill") / "run";
    const Spawned p = spawn(lm_run(dir, kSteps, kEvalEvery));
    std::this_thread::sleep_for(ref.time * (2 * i + 1) / 16);
    ::kill(p.pid, SIGKILL);
    wait_for(p);
    if (!fs::exists(dir)) {
      ++nothing;
      continue;
    }
    ++loadable;
    check_resumable(dir, "train lm --resume --text '" + kText + "' --out '" + dir.string() + "'");
  }
  std::cout << "  SIGKILL: " << nothing << " kills left no folder, " << loadable << " a folder that resumed bitwise\n";
  EXPECT_GT(loadable, 0);
}

}  // namespace
}  // namespace qkv::cli_test
