// Damaged checkpoints (REFERENCES.md section 5 item 12, issue 14 item 6): a checkpoint
// truncated at any byte, or with any bit of it flipped, is a qkv::Error naming the
// file -- never a crash, never garbage weights, never a silent success.
//
// Checkpoints (io::save_checkpoint: classifier, seq2seq, the language model's state
// file) carry a checksum over the metadata and every tensor, so a flipped data byte is
// caught too. model.safetensors of a GPT-2 folder is a plain Hugging Face file without
// one: truncations and header flips are errors there, a flipped data byte cannot be
// detected by its loader (the state file's folder_digest catches it on resume).
//
// Sizes (bytes counted below, printed by each test):
//  - classifier (d_model 8, one layer): truncated at EVERY byte, EVERY bit of every header
//    byte flipped, one bit (i mod 8) of EVERY data byte flipped;
//  - seq2seq and LM state: truncated at every header byte and every 61st data byte,
//    every bit of every header byte flipped, one bit of every 29th data byte flipped
//    (sampled so that make test stays fast: every bit everywhere took 70-95 s per file);
//  - through the CLI (qkv train classify --resume): 40 truncations, 48 header flips and
//    16 data flips spread over the file, each one line on stderr and exit code 1.
// Under the sanitizers (make test-asan sets QKV_TEST_REDUCED) each load is ~10x slower, so the
// library tests sample five times sparser: every 5th header byte (truncated there, every bit
// flipped) and every 5th data position of the plan above (the seq2seq test took 290 s).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <iostream>
#include <fstream>

#include "cli/cli_test_util.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/qkv.h"
#include "qkv/train/classify.h"
#include "qkv/train/lm.h"
#include "qkv/train/seq2seq.h"
#include "testing/sanitizers.h"
#include "train/fault_util.h"

namespace qkv {
namespace {

namespace fs = std::filesystem;

void write_bytes(const std::string& p, std::string_view b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

std::size_t header_end(const std::string& b) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
  return static_cast<std::size_t>(8 + n);
}

struct Plan {
  std::size_t header_stride = 1;         // truncate at / flip every bit of every k-th header byte
  std::size_t truncate_data_stride = 1;  // truncate at every k-th data byte
  bool flip_every_data_bit = false;      // else one bit of every data_flip_stride-th data byte
  std::size_t data_flip_stride = 1;
  bool data_flips_detectable = true;     // false: a plain safetensors file (no checksum)
};

// The plan as given, or five times sparser under QKV_TEST_REDUCED (see the top of the file).
Plan sized(Plan p) {
  if (qkv::testing::reduced_size()) {
    p.header_stride *= 5;
    p.truncate_data_stride *= 5;
    p.data_flip_stride *= 5;
  }
  return p;
}

struct Counts {
  int truncations = 0, header_flips = 0, data_flips = 0, errors = 0, undetected_data_flips = 0,
      harmless_header_flips = 0;
};

// Writes each damaged version of `good` to `path` and calls load(path), which must
// throw a qkv::Error whose message names the file. load returns a fingerprint of what
// it loaded: for a file without a checksum (plan.data_flips_detectable false) a header
// flip may load only if the fingerprint is unchanged (e.g. a flip inside the "pt" of
// {"format":"pt"}, which no reader looks at); with a checksum nothing damaged may load.
Counts damage(const std::string& good, const std::string& path, const Plan& plan,
              const std::function<std::string(const std::string&)>& load) {
  Counts n;
  write_bytes(path, good);
  const std::string good_fp = load(path);
  const std::size_t h = header_end(good);
  EXPECT_LT(h, good.size());
  const std::string name = fs::path(path).filename().string();
  auto expect_error = [&](const std::string& what) {
    try {
      load(path);
      ADD_FAILURE() << what << ": loaded without an error";
      return false;
    } catch (const Error& e) {
      ++n.errors;
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << what << ": " << e.what();
      return true;
    }
  };
  for (std::size_t len = 0; len < good.size(); len += len < h ? plan.header_stride : plan.truncate_data_stride) {
    write_bytes(path, std::string_view(good).substr(0, len));
    ++n.truncations;
    expect_error("truncated to " + std::to_string(len) + " bytes");
    if (::testing::Test::HasFailure()) return n;
  }
  std::string bad = good;
  for (std::size_t i = 0; i < good.size(); ++i) {
    const bool header = i < h;
    if (header && i % plan.header_stride != 0) continue;
    if (!header && !plan.flip_every_data_bit && (i - h) % plan.data_flip_stride != 0) continue;
    for (int bit = 0; bit < 8; ++bit) {
      if (!header && !plan.flip_every_data_bit && bit != static_cast<int>(i % 8)) continue;
      bad[i] = static_cast<char>(good[i] ^ (1 << bit));
      write_bytes(path, bad);
      const std::string what = "bit " + std::to_string(bit) + " of byte " + std::to_string(i) + " flipped";
      if (header) {
        ++n.header_flips;
        if (plan.data_flips_detectable) {
          expect_error(what);
        } else {
          try {
            if (load(path) == good_fp)
              ++n.harmless_header_flips;
            else
              ADD_FAILURE() << what << ": loaded different numbers without an error";
          } catch (const Error&) {
            ++n.errors;
          }
        }
      } else {
        ++n.data_flips;
        if (plan.data_flips_detectable) {
          expect_error(what);
        } else {
          try {
            load(path);
            ++n.undetected_data_flips;
          } catch (const Error&) {
            ++n.errors;  // e.g. a BOOL byte out of range
          }
        }
      }
      bad[i] = good[i];
      if (::testing::Test::HasFailure()) return n;
    }
  }
  write_bytes(path, good);
  EXPECT_NO_THROW(load(path)) << "the undamaged file must load";
  return n;
}

void report(const std::string& what, std::size_t size, std::size_t header, const Counts& n) {
  std::cout << "  " << what << " (" << size << " bytes, header " << header << "): " << n.truncations
            << " truncations, " << n.header_flips << " header bit flips, " << n.data_flips << " data bit flips -> "
            << n.errors << " errors";
  if (n.undetected_data_flips) std::cout << ", " << n.undetected_data_flips << " data flips undetectable (no checksum)";
  if (n.harmless_header_flips)
    std::cout << ", " << n.harmless_header_flips << " header flips loaded the same numbers (bytes no reader checks)";
  std::cout << "\n";
}

train::ClassifyRunOptions clf_run() {
  return {.model = {.vocab_size = 20, .d_model = 8, .num_heads = 2, .d_ff = 16, .num_layers = 1, .max_len = 8},
          .epochs = 3, .lr = 3e-3, .seed = 7, .train_size = 12, .val_size = 4, .eval_every = 3};
}

std::string classifier_checkpoint(const std::string& path) {
  train::ClassifyTrainer t(clf_run());
  t.train();
  t.save(path);
  return io::read_file(path, "test");
}

TEST(CheckpointDamage, ClassifierEveryTruncationEveryHeaderBitAndEveryDataByte) {
  const std::string d = fault_test::scratch_dir("damage_clf");
  const std::string good = classifier_checkpoint(d + "/good.safetensors");
  const Counts n = damage(good, d + "/clf.safetensors", sized({.data_flip_stride = 1}), [](const std::string& p) {
    const io::Checkpoint c = io::load_checkpoint(p);
    train::ClassifyTrainer t(c, p, 5, 5);  // the trainer accepts what the loader accepts
    return std::string();
  });
  const std::size_t k = sized({}).header_stride;  // 1, or 5 under QKV_TEST_REDUCED
  const std::size_t h = header_end(good), data = good.size() - h;
  EXPECT_EQ(n.truncations, static_cast<int>((good.size() + k - 1) / k));  // both strides are k here
  EXPECT_EQ(n.header_flips, static_cast<int>(8 * ((h + k - 1) / k)));
  EXPECT_EQ(n.data_flips, static_cast<int>((data + k - 1) / k));
  report("classifier checkpoint", good.size(), header_end(good), n);
  fs::remove_all(d);
}

TEST(CheckpointDamage, Seq2SeqHeaderEveryByteDataSampled) {
  const std::string d = fault_test::scratch_dir("damage_s2s");
  const models::Seq2SeqOptions m{.d_model = 8, .num_heads = 2, .num_encoder_layers = 1, .num_decoder_layers = 1,
                                 .d_ff = 16, .dropout = 0.1, .max_positions = 8};
  const train::Seq2SeqTrainOptions o{
      .data = {.task = models::Seq2SeqTask::Reverse, .min_len = 1, .max_len = 4, .train_size = 16, .test_size = 4, .seed = 5},
      .epochs = 1, .batch = 8, .lr = 3e-3, .warmup_steps = 1, .evals_per_epoch = 1, .seed = 5};
  {
    train::Seq2SeqTrainer t(m, o);
    t.train();
    t.save(d + "/good.safetensors");
  }
  const std::string good = io::read_file(d + "/good.safetensors", "test");
  const Counts n = damage(good, d + "/s2s.safetensors", sized({.truncate_data_stride = 61, .data_flip_stride = 29}),
                          [](const std::string& p) {
                            train::Seq2SeqTrainer t(io::load_checkpoint(p), p);
                            return std::string();
                          });
  report("seq2seq checkpoint", good.size(), header_end(good), n);
  fs::remove_all(d);
}

TEST(CheckpointDamage, LanguageModelStateAndModelFile) {
  const std::string d = fault_test::scratch_dir("damage_lm");
  const auto bpe = tokenize::ByteLevelBPE::from_folder(std::string(QKV_FIXTURE_DIR) + "/gpt2_tiny");
  const auto corpus = train::tokenize_corpus({std::string(QKV_FIXTURE_DIR) + "/text/kjv_genesis.txt"}, bpe, d + "/g.tokens");
  models::GPT2Config cfg;
  cfg.vocab_size = bpe.vocab_size();
  cfg.n_positions = 8;
  cfg.n_embd = 8;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  const train::LMTrainOptions o{.steps = 2, .batch = 2, .context = 8, .eval_every = 0, .val_windows = 1, .seed = 5};
  {
    train::LMTrainer t(cfg, o, corpus.tokens, bpe);
    EXPECT_FALSE(t.train({}, 1));
    t.save(d + "/run");
  }
  const std::string state = d + "/run/" + train::LMTrainer::kStateFile;
  const std::string good = io::read_file(state, "test");
  const Counts n = damage(good, state, sized({.truncate_data_stride = 61, .data_flip_stride = 29}), [&](const std::string&) {
    train::LMTrainer::resume(d + "/run", corpus.tokens, bpe);
    return std::string();
  });
  report("language-model state file", good.size(), header_end(good), n);

  // model.safetensors: no checksum of its own (a Hugging Face file).
  const std::string model = d + "/run/model.safetensors";
  const std::string good_model = io::read_file(model, "test");
  const Counts mn = damage(good_model, model, sized({.truncate_data_stride = 61, .data_flip_stride = 29, .data_flips_detectable = false}),
                           [](const std::string& p) {
                             std::string fp;  // every tensor's bytes, by name
                             for (const auto& [name, t] : models::load_gpt2(fs::path(p).parent_path().string())->state_dict()) {
                               const Tensor c = t.contiguous();
                               fp += name + ":" + std::to_string(io::digest64(c.raw_data(), static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype()))) + ";";
                             }
                             return fp;
                           });
  report("language-model model.safetensors", good_model.size(), header_end(good_model), mn);
  // ... but a resume notices a model file that is not the state's and writes the state's back.
  std::string flipped = good_model;
  flipped[flipped.size() - 3] ^= 0x10;
  write_bytes(model, flipped);
  EXPECT_NE(train::LMTrainer::folder_digest(d + "/run"), io::load_checkpoint(state).metadata.at("folder_digest"));
  train::LMTrainer::resume(d + "/run", corpus.tokens, bpe);
  EXPECT_EQ(io::read_file(model, "test"), good_model);
  fs::remove_all(d);
}

// The same damage through the command line: qkv train classify --resume FILE.
TEST(CheckpointDamage, TrainClassifyResumeRejectsDamagedFiles) {
  const std::string d = fault_test::scratch_dir("damage_cli");
  const std::string good = classifier_checkpoint(d + "/good.safetensors");
  const std::size_t h = header_end(good);
  const std::string p = d + "/ckpt.safetensors";
  auto resume = [&] { return cli_test::run("train classify --resume '" + p + "' --epochs 4 --threads 1"); };
  write_bytes(p, good);
  const cli_test::Result ok = resume();
  ASSERT_EQ(ok.code, 0) << ok.err;
  int runs = 0;
  auto expect_rejected = [&](const std::string& what) {
    ++runs;
    const cli_test::Result r = resume();
    EXPECT_EQ(r.code, 1) << what << ": " << r.err;
    EXPECT_EQ(r.signal, 0) << what;
    EXPECT_EQ(cli_test::count_lines(r.err), 1) << what << ": " << r.err;
    EXPECT_NE(r.err.find("ckpt.safetensors"), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(r.out.find("checkpoint:"), std::string::npos) << what;
  };
  for (int i = 0; i < 40; ++i) {
    const std::size_t len = good.size() * static_cast<std::size_t>(i) / 40;
    write_bytes(p, std::string_view(good).substr(0, len));
    expect_rejected("truncated to " + std::to_string(len));
  }
  for (int i = 0; i < 64; ++i) {
    const bool header = i < 48;
    const std::size_t at = header ? h * static_cast<std::size_t>(i) / 48 + 1 : h + (good.size() - h) * static_cast<std::size_t>(i - 48) / 16;
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ (1 << (i % 8)));
    write_bytes(p, bad);
    expect_rejected("bit " + std::to_string(i % 8) + " of byte " + std::to_string(at) + " flipped");
    if (::testing::Test::HasFailure()) break;
  }
  std::cout << "  qkv train classify --resume: " << runs << " damaged files, each one error line and exit code 1\n";
  fs::remove_all(d);
}

}  // namespace
}  // namespace qkv
