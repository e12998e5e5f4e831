// SIGKILL while saving, for every trainer (classifier, seq2seq, language model;
// REFERENCES.md section 5 item 13, issue 14 item 6).
//
// Two ways to kill, each against a previous complete checkpoint:
//  - at every write point: a forked child restores the run at step N+1 and saves it
//    over the checkpoint of step N with a hook (io::set_write_point_hook) that raises
//    SIGKILL at its k-th point, for k = 1 .. all points of the save (temp file created,
//    header written, each tensor written, fsync, close, rename, directory fsync, for
//    every file of the save);
//  - after a delay: a child resumes from the checkpoint and trains to the end, saving
//    after every step; the parent SIGKILLs it after delays spread over the child's run.
// After each kill the checkpoint must load and be exactly one of the reference run's
// saves (the previous one before the commit point, the new one after it), and a run
// resumed from it must end bitwise where the uninterrupted run ends.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>

#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
#include "qkv/qkv.h"
#include "qkv/train/classify.h"
#include "qkv/train/lm.h"
#include "qkv/train/seq2seq.h"
#include "testing/checkpoint_compare.h"
#include "train/fault_util.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;
using namespace fault_test;
using testing::expect_same_checkpoint_tensors;

constexpr int kDelayedKills = 24;

std::int64_t step_of(const io::Checkpoint& c) { return static_cast<std::int64_t>(std::stoll(c.metadata.at("step"))); }

// What one trainer must provide to the two kill tests.
struct Harness {
  int total = 0;                                       // steps of the run
  std::function<std::string(int)> ref;                 // the reference save at step s
  std::function<void(const std::string&, const std::string&)> copy;  // a save from src to dst (replacing dst)
  std::function<void(int)> restore;                    // (child) restores the run saved at ref(s)
  std::function<void(const std::string&)> save;        // (child) saves the restored run there
  std::function<void(const std::string&)> train_saving;  // (child) resumes from there, saves after every step
  // Loads the save at `path` (must load), checks it is a reference save, resumes it to
  // the end and compares with the reference end. Returns its step.
  std::function<int(const std::string&)> check;
  std::string state_file;                              // the file whose rename commits a save
  std::string commit_point = "safetensors: renamed";   // the write point after which the new save is there
};

struct KillCounts {
  int points = 0, kills = 0, old_kept = 0, new_landed = 0;
};

// Kill at every write point of the save of step N+1 over the save of step N.
KillCounts kill_at_every_point(const Harness& h, const std::string& target, int N,
                               const std::function<void(int k, const std::vector<std::string>&)>& extra = {}) {
  KillCounts n;
  const std::string scratch = target + ".count";
  h.copy(h.ref(N), scratch);
  h.restore(N + 1);
  const std::vector<std::string> points = record_points([&] { h.save(scratch); });
  const int commit = last_point(points, h.commit_point);
  EXPECT_GT(commit, 0);
  n.points = static_cast<int>(points.size());
  for (int k = 1; k <= n.points + 1; ++k) {
    h.copy(h.ref(N), target);
    const bool killed = save_killed_at(k, [&] { h.restore(N + 1); }, [&] { h.save(target); });
    EXPECT_EQ(killed, k <= n.points) << "k " << k;
    n.kills += killed;
    EXPECT_LE(remove_temp_files(fs::is_directory(target) ? fs::path(target) : fs::path(target).parent_path()), 1);
    const int step = h.check(target);
    EXPECT_EQ(step, k >= commit ? N + 1 : N) << "killed at point " << k << " (" << (k <= n.points ? points[k - 1] : "none") << ")";
    (step == N ? n.old_kept : n.new_landed)++;
    if (extra) extra(k, points);
    if (::testing::Test::HasFailure()) break;
  }
  return n;
}

// Kill a resumed run that saves after every step, after delays spread over its run time.
KillCounts kill_after_delays(const Harness& h, const std::string& target, int start) {
  KillCounts n;
  h.copy(h.ref(start), target);
  const auto whole = run_killed_after(std::chrono::microseconds(-1), [&] { h.train_saving(target); });
  EXPECT_EQ(h.check(target), h.total);
  std::vector<int> seen(static_cast<std::size_t>(h.total + 1), 0);
  for (int i = 0; i < kDelayedKills; ++i) {
    h.copy(h.ref(start), target);
    run_killed_after(whole * i / kDelayedKills, [&] { h.train_saving(target); });
    ++n.kills;
    remove_temp_files(fs::is_directory(target) ? fs::path(target) : fs::path(target).parent_path());
    const int step = h.check(target);
    EXPECT_GE(step, start);
    if (step >= start && step <= h.total) ++seen[static_cast<std::size_t>(step)];
    if (::testing::Test::HasFailure()) break;
  }
  for (int s = start; s <= h.total; ++s) n.new_landed += seen[static_cast<std::size_t>(s)] > 0;  // distinct steps found
  return n;
}

void report(const char* what, const KillCounts& a, const KillCounts& b) {
  std::cout << "  " << what << ": " << a.points << " write points, " << a.kills << " kills at a point (" << a.old_kept
            << " kept the old save, " << a.new_landed << " the new); " << b.kills << " kills after a delay ("
            << b.new_landed << " distinct steps found)\n";
}

// Harness::check for a trainer whose save is one checkpoint file: the save at `path` must
// equal the reference save of its step, and resumed (`open` a trainer from it, train to the
// end, save) equal the reference end.
template <class Open>
std::function<int(const std::string&)> single_file_check(int total, std::function<std::string(int)> ref, Open open,
                                                         std::string dir) {
  auto end = std::make_shared<io::Checkpoint>(io::load_checkpoint(ref(total)));
  return [=](const std::string& p) {
    const io::Checkpoint c = io::load_checkpoint(p);
    const int s = static_cast<int>(step_of(c));
    expect_same_checkpoint_tensors(c, io::load_checkpoint(ref(s)));
    if (s < total) {
      auto t = open(p);
      t->train();
      t->save(dir + "/resumed.safetensors");
      expect_same_checkpoint_tensors(io::load_checkpoint(dir + "/resumed.safetensors"), *end);
    }
    return s;
  };
}

// ------------------------------------------------------------------ classifier

train::ClassifyRunOptions clf_run() {
  return {.model = {.vocab_size = 20, .d_model = 8, .num_heads = 2, .d_ff = 16, .num_layers = 1, .max_len = 8},
          .epochs = 8, .lr = 3e-3, .seed = 7, .train_size = 24, .val_size = 8, .eval_every = 4};
}

TEST(SaveKilled, ClassifierAtEveryWritePointAndAfterDelays) {
  set_num_threads(1);
  const std::string d = scratch_dir("clf");
  const auto ref = [&](int s) { return d + "/ref_" + std::to_string(s) + ".safetensors"; };
  const train::ClassifyRunOptions o = clf_run();
  {
    train::ClassifyTrainer t(o);
    t.save(ref(0));
    t.train({}, [&](std::int64_t e, double) { t.save(ref(static_cast<int>(e))); });
  }
  std::unique_ptr<train::ClassifyTrainer> restored;
  const auto open = [&](const std::string& p) {
    return std::make_unique<train::ClassifyTrainer>(io::load_checkpoint(p), p, o.epochs, o.eval_every);
  };
  Harness h;
  h.total = static_cast<int>(o.epochs);
  h.ref = ref;
  h.copy = [](const std::string& s, const std::string& t) { fs::copy_file(s, t, fs::copy_options::overwrite_existing); };
  h.restore = [&](int s) { restored = open(ref(s)); };
  h.save = [&](const std::string& p) { restored->save(p); };
  h.train_saving = [&](const std::string& p) {
    auto t = open(p);
    t->train({}, [&](std::int64_t, double) { t->save(p); });
  };
  h.check = single_file_check(h.total, ref, open, d);
  const KillCounts a = kill_at_every_point(h, d + "/run.safetensors", 3);
  const KillCounts b = kill_after_delays(h, d + "/run.safetensors", 0);
  report("classifier", a, b);
  restored.reset();
  fs::remove_all(d);
}

// ------------------------------------------------------------------ seq2seq

const models::Seq2SeqOptions kS2SModel{.d_model = 16, .num_heads = 2, .num_encoder_layers = 1,
                                       .num_decoder_layers = 1, .d_ff = 32, .dropout = 0.1, .max_positions = 8};
const train::Seq2SeqTrainOptions kS2SRun{
    .data = {.task = models::Seq2SeqTask::Reverse, .min_len = 1, .max_len = 4, .train_size = 64, .test_size = 8, .seed = 5},
    .epochs = 2, .batch = 16, .lr = 3e-3, .warmup_steps = 2, .evals_per_epoch = 1, .seed = 5};

TEST(SaveKilled, Seq2SeqAtEveryWritePointAndAfterDelays) {
  set_num_threads(1);
  const std::string d = scratch_dir("s2s");
  const auto ref = [&](int s) { return d + "/ref_" + std::to_string(s) + ".safetensors"; };
  int total = 0;
  {
    train::Seq2SeqTrainer t(kS2SModel, kS2SRun);
    total = static_cast<int>(t.total_steps());
    t.save(ref(0));
    train::Seq2SeqTrainCallbacks cb;
    cb.on_step = [&](std::int64_t s, std::int64_t, double) { t.save(ref(static_cast<int>(s))); };
    t.train(cb);
  }
  ASSERT_EQ(total, 8);
  std::unique_ptr<train::Seq2SeqTrainer> restored;
  const auto open = [](const std::string& p) { return std::make_unique<train::Seq2SeqTrainer>(io::load_checkpoint(p), p); };
  Harness h;
  h.total = total;
  h.ref = ref;
  h.copy = [](const std::string& s, const std::string& t) { fs::copy_file(s, t, fs::copy_options::overwrite_existing); };
  h.restore = [&](int s) { restored = open(ref(s)); };
  h.save = [&](const std::string& p) { restored->save(p); };
  h.train_saving = [&](const std::string& p) {
    auto t = open(p);
    train::Seq2SeqTrainCallbacks cb;
    cb.on_step = [&](std::int64_t, std::int64_t, double) { t->save(p); };
    t->train(cb);
  };
  h.check = single_file_check(total, ref, open, d);
  const KillCounts a = kill_at_every_point(h, d + "/run.safetensors", 3);
  const KillCounts b = kill_after_delays(h, d + "/run.safetensors", 0);
  report("seq2seq", a, b);
  restored.reset();
  fs::remove_all(d);
}

// ------------------------------------------------------------------ language model

models::GPT2Config lm_config(std::int64_t vocab) {
  models::GPT2Config c;
  c.vocab_size = vocab;
  c.n_positions = 16;
  c.n_embd = 16;
  c.n_layer = 1;
  c.n_head = 2;
  return c;
}

train::LMTrainOptions lm_run() {
  return {.steps = 6, .batch = 2, .context = 8, .grad_accum = 1, .lr = 3e-3, .warmup = 2, .min_lr = 3e-4,
          .weight_decay = 0.1, .grad_clip = 1.0, .eval_every = 3, .val_windows = 2, .seed = 5};
}

// The folder is written whole into a staging sibling and swapped into place
// (io::StagedFolder): the commit point is the exchange (or, on a file system without
// RENAME_EXCHANGE, the old version moved aside, after which recovery renames the complete
// new one into place). A kill anywhere leaves one save whole: the model files always
// belong to the state beside them.
void lm_folder_kills(bool exchange) {
  set_num_threads(1);
  io::set_folder_exchange_enabled(exchange);
  const std::string d = scratch_dir(exchange ? "lm" : "lm_renames");
  const auto bpe = tokenize::ByteLevelBPE::from_folder(std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny");
  const auto corpus = train::tokenize_corpus({std::string(QKV_FIXTURE_DIR) + "/text/kjv_genesis.txt"}, bpe, d + "/g.tokens");
  const auto ref = [&](int s) { return d + "/ref_" + std::to_string(s); };
  const std::string state = std::string("/") + train::LMTrainer::kStateFile;
  const models::GPT2Config cfg = lm_config(bpe.vocab_size());
  const train::LMTrainOptions o = lm_run();
  {
    train::LMTrainer t(cfg, o, corpus.tokens, bpe);
    t.save(ref(0));
    train::LoopCallbacks cb;
    cb.on_step = [&](std::int64_t s, std::int64_t, double) { t.save(ref(static_cast<int>(s))); };
    EXPECT_TRUE(t.train(cb));
  }
  const auto slurp = [](const std::string& p) { return io::read_file(p, "test"); };
  std::unique_ptr<train::LMTrainer> restored;
  Harness h;
  h.total = static_cast<int>(o.steps);
  h.ref = ref;
  h.commit_point = exchange ? "folder: exchanged" : "folder: old moved aside";
  h.copy = [](const std::string& s, const std::string& t) {
    fs::remove_all(t);
    fs::copy(s, t, fs::copy_options::recursive);
  };
  h.restore = [&](int s) { restored = train::LMTrainer::resume(ref(s), corpus.tokens, bpe); };
  h.save = [&](const std::string& p) { restored->save(p); };
  h.train_saving = [&](const std::string& p) {
    auto t = train::LMTrainer::resume(p, corpus.tokens, bpe);
    train::LoopCallbacks cb;
    cb.on_step = [&](std::int64_t, std::int64_t, double) { t->save(p); };
    t->train(cb);
  };
  const io::Checkpoint end = io::load_checkpoint(ref(h.total) + state);
  const std::string end_model = slurp(ref(h.total) + "/model.safetensors");
  int recovered = 0;
  h.check = [&](const std::string& p) {
    // A kill between the fallback's two renames leaves no folder until recovery puts the new one in.
    recovered += !io::recover_folder(p).empty();
    EXPECT_NO_THROW(models::load_gpt2(p)) << p << " does not load as a GPT-2 folder";
    const io::Checkpoint c = io::load_checkpoint(p + state);
    const int s = static_cast<int>(step_of(c));
    expect_same_checkpoint_tensors(c, io::load_checkpoint(ref(s) + state));
    // The model files are the state's own: the folder is one save, whole.
    EXPECT_EQ(slurp(p + "/model.safetensors"), slurp(ref(s) + "/model.safetensors")) << "step " << s;
    EXPECT_EQ(slurp(p + "/config.json"), slurp(ref(s) + "/config.json")) << "step " << s;
    EXPECT_EQ(train::LMTrainer::folder_digest(p), c.metadata.at("folder_digest"));
    auto t = train::LMTrainer::resume(p, corpus.tokens, bpe);
    if (s < h.total) {
      t->train();
      t->save(d + "/resumed");
      expect_same_checkpoint_tensors(io::load_checkpoint(d + "/resumed" + state), end);
      EXPECT_EQ(slurp(d + "/resumed/model.safetensors"), end_model);
    }
    return s;
  };
  const KillCounts a = kill_at_every_point(h, d + "/run", 2);
  const KillCounts b = exchange ? kill_after_delays(h, d + "/run", 0) : KillCounts{};
  report(exchange ? "language model" : "language model (two renames)", a, b);
  std::cout << "  language model: " << recovered << " kills left state that recover_folder() finished or cleaned\n";
  restored.reset();
  io::set_folder_exchange_enabled(true);
  fs::remove_all(d);
}

TEST(SaveKilled, LanguageModelFolderAtEveryWritePointAndAfterDelays) { lm_folder_kills(true); }
TEST(SaveKilled, LanguageModelFolderWithoutRenameExchange) { lm_folder_kills(false); }

}  // namespace
}  // namespace qkv
