// qkv train seq2seq: trains models::Seq2Seq on reverse / copy / sort of digit
// strings and reports greedy exact-sequence accuracy on held-out data.
#include "cmd_train_seq2seq.h"

#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "progress.h"
#include "qkv/core/parallel.h"
#include "qkv/io/checkpoint.h"
#include "qkv/models/seq2seq.h"
#include "train_tasks.h"

namespace qkv::tool {
namespace {

std::string digits_str(const std::vector<std::int64_t>& d) {
  std::string s;
  for (std::int64_t v : d) {
    if (!s.empty()) s += ' ';
    s += v >= 0 ? std::to_string(v) : std::string("…");  // -1: no <eos> produced
  }
  return s.empty() ? "(empty)" : s;
}

}  // namespace

int run_train_seq2seq(const Seq2SeqCliOptions& o, std::ostream& out, std::vector<std::string>* files_written) {
  const models::Seq2SeqTask task = models::parse_seq2seq_task(o.task);
  if (o.d_model % o.heads != 0)
    throw ValueError("train seq2seq: --d-model " + std::to_string(o.d_model) + " is not divisible by --heads " +
                     std::to_string(o.heads));
  const models::Seq2SeqOptions mo{.d_model = o.d_model,
                                  .num_heads = o.heads,
                                  .num_encoder_layers = o.layers,
                                  .num_decoder_layers = o.layers,
                                  .d_ff = o.d_ff,
                                  .dropout = o.dropout,
                                  .max_positions = std::max<std::int64_t>(32, o.max_len + 1)};
  const models::Seq2SeqTrainOptions to{
      .data = {.task = task, .min_len = o.min_len, .max_len = o.max_len, .train_size = o.train_size,
               .test_size = o.test_size, .seed = o.seed},
      .epochs = o.epochs,
      .steps = o.steps,
      .batch = o.batch,
      .lr = o.lr,
      .warmup_steps = o.warmup,
      .target_acc = o.target_acc,
      .seed = o.seed};

  if (!o.json) {
    out << "Seq2Seq (" << o.task << "): " << o.layers << " encoder + " << o.layers << " decoder layer(s), d_model "
        << o.d_model << ", " << o.heads << " heads, d_ff " << o.d_ff << ", dropout " << general(o.dropout) << "\n"
        << "data: " << o.train_size << " train / " << o.test_size << " held-out digit strings of length " << o.min_len
        << ".." << o.max_len << " (disjoint); AdamW lr " << general(o.lr) << " (warmup " << o.warmup
        << ", cosine decay), batch " << o.batch << ", seed " << o.seed << ", " << num_threads() << " thread(s)\n\n";
  }

  std::unique_ptr<ProgressBar> bar;
  std::int64_t last_step = 0;
  models::Seq2SeqTrainCallbacks cb;
  cb.on_step = [&](std::int64_t step, std::int64_t total, double loss) {
    if (!bar) bar = std::make_unique<ProgressBar>("train", total, ProgressOptions{.enabled = o.progress});
    bar->update(step, "loss " + fixed(loss, 4));
    last_step = step;
  };
  cb.on_report = [&](const models::Seq2SeqReport& r) {
    if (o.json) {
      nlohmann::ordered_json j{{"event", "eval"},         {"epoch", r.epoch},         {"step", r.step},
                               {"loss", r.loss},           {"train_acc", r.train_acc}, {"val_acc", r.exact_acc},
                               {"exact_acc", r.exact_acc}, {"lr", r.lr},               {"elapsed_s", r.elapsed_s}};
      out << j.dump() << std::endl;
    } else {
      out << "epoch " << r.epoch << " | step " << r.step << " | loss " << fixed(r.loss, 4) << " | train exact "
          << fixed(r.train_acc, 3) << " | held-out exact " << fixed(r.exact_acc, 3) << " | "
          << format_duration(r.elapsed_s) << std::endl;
    }
  };
  models::Seq2SeqTrainResult res = models::train_seq2seq(mo, to, cb);
  if (bar) bar->finish();
  const models::Seq2SeqReport& fin = res.reports.back();

  if (!o.save.empty()) {
    io::SaveCheckpointArgs a;
    a.model = res.model.get();
    a.model_type = "seq2seq";
    a.config_json = mo.to_json();
    a.metadata = {{"task", o.task},
                  {"min_len", std::to_string(o.min_len)},
                  {"max_len", std::to_string(o.max_len)},
                  {"seed", std::to_string(o.seed)},
                  {"steps", std::to_string(res.steps)},
                  {"exact_acc", general(fin.exact_acc, 6)}};
    io::save_checkpoint(o.save, a);
    if (files_written) files_written->push_back(o.save);
  }

  // A few held-out examples, decoded greedily.
  std::vector<models::Seq2SeqExample> shown(
      res.data.test.begin(), res.data.test.begin() + std::min<std::int64_t>(o.examples, res.data.test.size()));
  std::vector<std::vector<std::int64_t>> pred;
  if (!shown.empty()) models::seq2seq_exact_accuracy(*res.model, shown, 500, &pred);

  if (o.json) {
    nlohmann::ordered_json ex = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < shown.size(); ++i)
      ex.push_back({{"input", shown[i].input}, {"output", pred[i]}, {"target", shown[i].target}});
    nlohmann::ordered_json j{{"event", "done"},          {"task", o.task},         {"epoch", fin.epoch},
                             {"step", fin.step},         {"loss", fin.loss},       {"train_acc", fin.train_acc},
                             {"val_acc", fin.exact_acc}, {"exact_acc", fin.exact_acc}, {"elapsed_s", fin.elapsed_s},
                             {"threads", num_threads()}, {"examples", ex}};
    if (!o.save.empty()) j["checkpoint"] = o.save;
    out << j.dump() << std::endl;
    return 0;
  }
  out << "\nheld-out exact-sequence accuracy: " << fixed(fin.exact_acc, 4) << " (" << res.data.test.size()
      << " sequences, greedy decoding) after " << res.steps << " steps in " << format_duration(fin.elapsed_s) << "\n";
  if (!shown.empty()) {
    out << "examples (input -> output, target):\n";
    for (std::size_t i = 0; i < shown.size(); ++i)
      out << "  " << digits_str(shown[i].input) << "  ->  " << digits_str(pred[i]) << "   (target "
          << digits_str(shown[i].target) << ") " << (pred[i] == shown[i].target ? "ok" : "WRONG") << "\n";
  }
  if (!o.save.empty()) out << "wrote " << o.save << "\n";
  return 0;
}

QKV_TRAIN_TASK(seq2seq, {
    .name = "seq2seq",
    .summary = "Encoder-decoder with cross-attention on reverse / copy / sort of digit strings",
    .order = 20,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Trains an encoder-decoder Transformer (decoder blocks with causal self-attention and cross-attention "
          "over the encoder's memory) with teacher forcing on digit strings of length --min-len..--max-len, and "
          "reports the exact-sequence accuracy of greedy decoding on a held-out set that shares no sequence with "
          "the training set. Source: digits <eos>; target: <bos> digits -> digits <eos>. Padding keys are masked "
          "and padding targets ignored by the loss.\n"
          "Example: qkv train seq2seq --task reverse --save reverse.safetensors");
      auto opt = std::make_shared<Seq2SeqCliOptions>();
      sub.add_option("--task", opt->task, "reverse | copy | sort")
          ->check(CLI::IsMember({"reverse", "copy", "sort"}))
          ->capture_default_str();
      sub.add_option("--epochs", opt->epochs, "Passes over the training set")
          ->check(int_range(1, 100000))
          ->capture_default_str();
      sub.add_option("--steps", opt->steps, "Total optimiser steps (overrides --epochs; 0: use --epochs)")
          ->check(int_range(0, 10000000))
          ->capture_default_str();
      sub.add_option("--batch", opt->batch, "Sequences per step")->check(int_range(1, 65536))->capture_default_str();
      sub.add_option("--lr", opt->lr, "Peak AdamW learning rate")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
      sub.add_option("--warmup", opt->warmup, "Linear warmup steps (then cosine decay)")
          ->check(int_range(0, 10000000))
          ->capture_default_str();
      sub.add_option("--dropout", opt->dropout, "Dropout")->check(CLI::Range(0.0, 0.9))->capture_default_str();
      sub.add_option("--d-model", opt->d_model, "Model width")->check(int_range(1, 4096))->capture_default_str();
      sub.add_option("--heads", opt->heads, "Attention heads")->check(int_range(1, 256))->capture_default_str();
      sub.add_option("--layers", opt->layers, "Encoder layers (and as many decoder layers)")
          ->check(int_range(1, 64))
          ->capture_default_str();
      sub.add_option("--d-ff", opt->d_ff, "Feed-forward width")->check(int_range(1, 65536))->capture_default_str();
      sub.add_option("--min-len", opt->min_len, "Shortest sequence")->check(int_range(1, 1000))->capture_default_str();
      sub.add_option("--max-len", opt->max_len, "Longest sequence")->check(int_range(1, 1000))->capture_default_str();
      sub.add_option("--train-size", opt->train_size, "Training sequences")
          ->check(int_range(1, 10000000))
          ->capture_default_str();
      sub.add_option("--test-size", opt->test_size, "Held-out sequences")
          ->check(int_range(1, 1000000))
          ->capture_default_str();
      sub.add_option("--target-acc", opt->target_acc, "Stop once held-out exact accuracy reaches this (0: off)")
          ->check(CLI::Range(0.0, 1.0))
          ->capture_default_str();
      sub.add_option("--seed", opt->seed, "Seed for data, initialisation and shuffling")->capture_default_str();
      sub.add_option("--save", opt->save, "Write a checkpoint (safetensors, model_type seq2seq) at the end");
      sub.add_option("--examples", opt->examples, "Example decodings printed at the end")
          ->check(int_range(0, 1000))
          ->capture_default_str();
      sub.add_flag("--json", opt->json, "One JSON object per evaluation, then a summary object");
      sub.add_flag("!--no-progress", opt->progress, "Do not show the progress bar on stderr");
      return [opt] { return run_train_seq2seq(*opt, std::cout); };
    }});

}  // namespace qkv::tool
