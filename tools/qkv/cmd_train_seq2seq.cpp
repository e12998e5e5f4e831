// qkv train seq2seq: trains models::Seq2Seq on reverse / copy / sort of digit
// strings and reports greedy exact-sequence accuracy on held-out data.
#include "cmd_train_seq2seq.h"

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "interrupt.h"
#include "output.h"
#include "progress.h"
#include "qkv/core/parallel.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/models/seq2seq.h"
#include "qkv/train/distributed.h"
#include "qkv/train/seq2seq.h"
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

// A digest of the examples (for the data-parallel start-up check).
std::string data_digest(const models::Seq2SeqData& d) {
  std::uint64_t h = 0;
  for (const auto* set : {&d.train, &d.test})
    for (const models::Seq2SeqExample& e : *set) {
      h = io::digest64(e.input.data(), e.input.size() * sizeof(std::int64_t), h);
      h = io::digest64(e.target.data(), e.target.size() * sizeof(std::int64_t), h);
    }
  return std::to_string(h);
}

}  // namespace

int run_train_seq2seq(const Seq2SeqCliOptions& o, std::ostream& out_all, std::vector<std::string>* files_written) {
  // Data-parallel (train/distributed.h): rank 0 alone prints and writes; a check that fails
  // on any rank stops every rank at once, rank 0 reporting it (World::fail_together).
  train::World& w = train::world();
  std::ostream quiet(nullptr);
  std::ostream& out = w.root() ? out_all : quiet;
  w.fail_together(
      [&] {
        if (!w.root()) return;  // rank 0 alone reads --resume and writes --save
        if (!o.resume.empty()) check_input_file(o.resume, "train seq2seq: --resume", "a checkpoint file");
        if (!o.save.empty() && !(!o.resume.empty() && same_file(o.resume, o.save)))
          check_output_file(o.save, {.cmd = "train seq2seq", .flag = "--save", .overwrite = o.overwrite,
                                     .alternative = "--resume FILE --save FILE to continue the run it holds"});
      },
      "the checks before training");
  std::optional<io::Checkpoint> ckpt;
  if (!o.resume.empty()) ckpt = train::shared_checkpoint(o.resume);  // rank 0's, on every rank
  std::unique_ptr<train::Seq2SeqTrainer> tr;
  w.fail_together(
      [&] {
        if (o.resume.empty()) {
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
          const train::Seq2SeqTrainOptions to{
              .data = {.task = task, .min_len = o.min_len, .max_len = o.max_len, .train_size = o.train_size,
                       .test_size = o.test_size, .seed = o.seed},
              .epochs = o.epochs,
              .steps = o.steps,
              .batch = o.batch,
              .grad_accum = o.grad_accum * w.size(),  // --grad-accum is per rank
              .lr = o.lr,
              .warmup_steps = o.warmup,
              .target_acc = o.target_acc,
              .seed = o.seed};
          tr = std::make_unique<train::Seq2SeqTrainer>(mo, to);
        } else {
          tr = std::make_unique<train::Seq2SeqTrainer>(*ckpt, o.resume);
          if (tr->finished())
            throw ValueError("train seq2seq: " + o.resume + " holds a finished run (step " + std::to_string(tr->step()) +
                             " of " + std::to_string(tr->total_steps()) + "); there is nothing left to resume");
        }
        if (o.stop_after_epoch > 0 && o.stop_after_epoch <= tr->epochs_done())
          throw ValueError("train seq2seq: --stop-after-epoch " + std::to_string(o.stop_after_epoch) + ", but " +
                           o.resume + " is already at epoch " + std::to_string(tr->epochs_done()));
      },
      "the ranks to set up the run");
  ckpt.reset();
  if (o.resume.empty() && o.warmup >= tr->total_steps() && w.root())
    warn("--warmup " + std::to_string(o.warmup) + " is not shorter than the run (" + std::to_string(tr->total_steps()) +
         " steps): the learning rate never reaches --lr and never decays; give a shorter --warmup");
  if (o.stop_after_epoch > 0 && o.stop_after_epoch >= tr->total_epochs() && w.root())
    warn("--stop-after-epoch " + std::to_string(o.stop_after_epoch) + " is not before the end of the run (" +
         std::to_string(tr->total_epochs()) + " epochs): it has no effect");
  const models::Seq2SeqOptions& mo = tr->model_options();
  const train::Seq2SeqTrainOptions& to = tr->options();
  const std::string task = models::seq2seq_task_name(to.data.task);
  w.check_same({{"the model options", mo.to_json()},
                {"the training options", to.to_json()},
                {"the data (digest)", data_digest(tr->data())}},
               "the seq2seq run");

  if (!o.json) {
    out << "Seq2Seq (" << task << "): " << mo.num_encoder_layers << " encoder + " << mo.num_decoder_layers
        << " decoder layer(s), d_model " << mo.d_model << ", " << mo.num_heads << " heads, d_ff " << mo.d_ff
        << ", dropout " << general(mo.dropout) << "\n"
        << "data: " << to.data.train_size << " train / " << to.data.test_size << " held-out digit strings of length "
        << to.data.min_len << ".." << to.data.max_len << " (disjoint); AdamW lr " << general(to.lr) << " (warmup "
        << to.warmup_steps << ", cosine decay over " << tr->total_steps() << " steps), batch " << to.batch;
    if (to.grad_accum > 1) out << " x " << to.grad_accum << " accumulation";
    if (w.distributed()) out << " (" << w.size() << " ranks x " << to.grad_accum / w.size() << ")";
    out << ", seed " << to.seed << ", " << num_threads() << " thread(s)" << (w.distributed() ? " per rank" : "");
    if (!o.resume.empty())
      out << "\nresumed from " << o.resume << " at epoch " << tr->epochs_done() << " (step " << tr->step() << " of "
          << tr->total_steps() << ")";
    out << "\n\n";
  }

  // The checkpoint carries the latest held-out accuracy for readers of the file.
  auto save = [&](const std::string& path) {
    if (!w.root()) return;
    const train::World::Busy busy(w);  // the other ranks wait meanwhile
    std::map<std::string, std::string> meta;
    if (!tr->reports().empty()) meta["exact_acc"] = general(tr->reports().back().exact_acc, 6);
    tr->save(path, meta);
  };
  std::unique_ptr<ProgressBar> bar;
  const std::int64_t first_step = tr->step();
  train::Seq2SeqTrainCallbacks cb;
  cb.on_step = [&](std::int64_t step, std::int64_t total, double loss) {
    if (!w.root()) return;
    if (!bar) bar = std::make_unique<ProgressBar>("train", total - first_step, ProgressOptions{.enabled = o.progress});
    bar->update(step - first_step, "loss " + fixed(loss, 4));
  };
  cb.on_report = [&](const train::Seq2SeqReport& r) {
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
  cb.on_epoch_end = [&](std::int64_t epoch) {
    // The final state is saved below, once.
    if (!o.save.empty() && o.save_every > 0 && epoch % o.save_every == 0 && !tr->finished() &&
        epoch != o.stop_after_epoch)
      save(o.save);
  };
  bool finished = false;
  {
    TrainingInterrupt ctrl_c;  // Ctrl-C: finish the step, save it (below), print how to resume
    finished = tr->train(cb, o.stop_after_epoch);
    if (!o.save.empty()) {
      save(o.save);
      if (files_written && w.root()) files_written->push_back(o.save);
    }
  }
  if (!finished && TrainingInterrupt::requested()) {
    if (bar) bar->stop();
    out << "\ninterrupted at step " << tr->step() << " of " << tr->total_steps() << " (epoch "
        << tr->epochs_done() << " complete); "
        << (o.save.empty() ? "nothing was saved (give --save FILE to keep a run)\n"
                           : "saved " + o.save + "; continue with: qkv train seq2seq --resume " + shell_quote(o.save) +
                                 " --save " + shell_quote(o.save) + "\n");
    return kInterruptedExit;
  }
  if (bar) finished ? bar->finish() : bar->stop();
  if (tr->reports().empty()) throw Error("train seq2seq: the run made no evaluation");  // cannot happen: see train()
  const train::Seq2SeqReport& fin = tr->reports().back();
  if (!w.root()) return 0;  // the examples and the summary are rank 0's

  // A few held-out examples, decoded greedily.
  const auto& test = tr->data().test;
  std::vector<models::Seq2SeqExample> shown(test.begin(),
                                            test.begin() + std::min<std::int64_t>(o.examples, test.size()));
  std::vector<std::vector<std::int64_t>> pred;
  if (!shown.empty()) models::seq2seq_exact_accuracy(*tr->model(), shown, 500, &pred);

  if (o.json) {
    nlohmann::ordered_json ex = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < shown.size(); ++i)
      ex.push_back({{"input", shown[i].input}, {"output", pred[i]}, {"target", shown[i].target}});
    nlohmann::ordered_json j{{"event", "done"},          {"task", task},           {"epoch", fin.epoch},
                             {"step", fin.step},         {"total_steps", tr->total_steps()},
                             {"finished", finished},     {"loss", fin.loss},       {"train_acc", fin.train_acc},
                             {"val_acc", fin.exact_acc}, {"exact_acc", fin.exact_acc}, {"elapsed_s", fin.elapsed_s},
                             {"threads", num_threads()}, {"examples", ex}};
    if (!o.save.empty()) j["checkpoint"] = o.save;
    out << j.dump() << std::endl;
    return 0;
  }
  out << "\nheld-out exact-sequence accuracy: " << fixed(fin.exact_acc, 4) << " (" << test.size()
      << " sequences, greedy decoding) after " << tr->step() << " steps in " << format_duration(tr->elapsed_s())
      << "\n";
  if (!finished)
    out << "stopped after epoch " << tr->epochs_done() << " of " << tr->total_epochs() << " (step " << tr->step()
        << " of " << tr->total_steps() << ")"
        << (o.save.empty() ? "\n" : "; continue with: qkv train seq2seq --resume " + shell_quote(o.save) + " --save " + shell_quote(o.save) + "\n");
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
          "and padding targets ignored by the loss.\n\n"
          "Checkpoints (--save, --save-every) hold the model, the AdamW state, the RNG state, the data and the "
          "position in the run; --resume FILE continues that run exactly as an uninterrupted one would (same losses "
          "and weights to the last bit for the same --threads). The learning-rate schedule spans the whole run, so "
          "the checkpoint fixes every setting, --epochs and --steps included; to train in parts, give the full "
          "length and --stop-after-epoch K, then --resume.\n\n"
          "Examples:\n"
          "  qkv train seq2seq --task reverse --save reverse.safetensors\n"
          "  qkv train seq2seq --epochs 6 --stop-after-epoch 3 --save run.safetensors\n"
          "  qkv train seq2seq --resume run.safetensors --save run.safetensors");
      auto opt = std::make_shared<Seq2SeqCliOptions>();
      std::vector<CLI::Option*> fixed_by_ckpt;
      // The run's settings: fixed by the checkpoint when resuming.
      auto fixed = [&](CLI::Option* o) { fixed_by_ckpt.push_back(o->capture_default_str()); return o; };
      fixed(sub.add_option("--task", opt->task, "reverse | copy | sort"))->check(CLI::IsMember({"reverse", "copy", "sort"}));
      fixed(sub.add_option("--epochs", opt->epochs, "Passes over the training set"))->check(int_range(1, 100000));
      fixed(sub.add_option("--steps", opt->steps, "Total optimiser steps (overrides --epochs; 0: use --epochs)"))
          ->check(int_range(0, 10000000));
      fixed(sub.add_option("--batch", opt->batch, "Sequences per micro-batch (per rank under mpirun)"))
          ->check(int_range(1, 65536));
      fixed(sub.add_option("--grad-accum", opt->grad_accum, "Micro-batches per optimiser step (per rank under mpirun)"))
          ->check(int_range(1, 65536));
      fixed(sub.add_option("--lr", opt->lr, "Peak AdamW learning rate"))->check(real_above(0));
      fixed(sub.add_option("--warmup", opt->warmup, "Linear warmup steps (then cosine decay)"))
          ->check(int_range(0, 10000000));
      fixed(sub.add_option("--dropout", opt->dropout, "Dropout"))->check(real_range(0.0, 0.9));
      fixed(sub.add_option("--d-model", opt->d_model, "Model width"))->check(int_range(1, 4096));
      fixed(sub.add_option("--heads", opt->heads, "Attention heads"))->check(int_range(1, 256));
      fixed(sub.add_option("--layers", opt->layers, "Encoder layers (and as many decoder layers)"))
          ->check(int_range(1, 64));
      fixed(sub.add_option("--d-ff", opt->d_ff, "Feed-forward width"))->check(int_range(1, 65536));
      fixed(sub.add_option("--min-len", opt->min_len, "Shortest sequence"))->check(int_range(1, 1000));
      fixed(sub.add_option("--max-len", opt->max_len, "Longest sequence"))->check(int_range(1, 1000));
      fixed(sub.add_option("--train-size", opt->train_size, "Training sequences"))->check(int_range(1, 10000000));
      fixed(sub.add_option("--test-size", opt->test_size, "Held-out sequences"))->check(int_range(1, 1000000));
      fixed(sub.add_option("--target-acc", opt->target_acc, "Stop once held-out exact accuracy reaches this (0: off)"))
          ->check(real_range(0.0, 1.0));
      fixed(add_seed_option(sub, opt->seed, "Seed for data, initialisation and shuffling"));
      auto* save = sub.add_option("--save", opt->save,
                                  "Write a checkpoint (safetensors, model_type seq2seq) here at the end (atomically)")
                       ->type_name("FILE");
      add_overwrite_flag(sub, opt->overwrite, "the --save file");
      sub.add_option("--save-every", opt->save_every, "Also save every N epochs")
          ->check(int_range(1, 100000))
          ->needs(save);
      auto* resume = sub.add_option("--resume", opt->resume, "Continue the training run saved in this checkpoint")
                         ->check(input_file("a checkpoint file (qkv train seq2seq --save)"))
                         ->type_name("FILE");
      sub.add_option("--stop-after-epoch", opt->stop_after_epoch,
                     "Stop once this many epochs of the run are done (the schedule still spans the whole run); "
                     "continue later with --resume")
          ->check(int_range(1, 100000))
          ->needs(save);
      sub.add_option("--examples", opt->examples, "Example decodings printed at the end")
          ->check(int_range(0, 1000))
          ->capture_default_str();
      sub.add_flag("--json", opt->json, "One JSON object per evaluation, then a summary object");
      add_no_progress_flag(sub, opt->progress);
      for (CLI::Option* f : fixed_by_ckpt) f->excludes(resume);
      return [opt] { return run_train_seq2seq(*opt, std::cout); };
    }});

}  // namespace qkv::tool
