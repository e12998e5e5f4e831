// qkv train lm: a GPT-2 trained on text files; the result is a Hugging Face GPT-2 folder.
#include "cmd_train_lm.h"

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "model_dir.h"
#include "progress.h"
#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/generate.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/tokenize/bpe_train.h"
#include "qkv/train/distributed.h"
#include "train_tasks.h"

namespace qkv::tool {
namespace {

namespace fs = std::filesystem;
using i64 = std::int64_t;

std::string strip_slash(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The tokenizer of the run, written into DIR (vocab.json, merges.txt) so the folder is complete.
tokenize::ByteLevelBPE obtain_tokenizer(const TrainLMCliOptions& o, std::ostream& log) {
  if (o.resume) return *load_tokenizer(o.out, true, "train lm --resume");
  fs::create_directories(o.out);
  if (!o.tokenizer.empty()) {
    auto bpe = *load_tokenizer(o.tokenizer, true, "train lm --tokenizer");
    if (fs::weakly_canonical(o.tokenizer) != fs::weakly_canonical(o.out))
      for (const char* f : {"vocab.json", "merges.txt"})
        io::write_file_atomic(o.out + "/" + f, io::read_file(o.tokenizer + "/" + f, "train lm"), "train lm");
    return bpe;
  }
  if (o.vocab_size <= 0) throw ValueError("train lm: give --tokenizer DIR (vocab.json + merges.txt) or --vocab-size N");
  // A byte-level BPE learnt on the texts, as Hugging Face tokenizers' BpeTrainer learns it.
  const auto t0 = std::chrono::steady_clock::now();
  const tokenize::BpeTrainResult r = tokenize::train_byte_level_bpe_files(
      o.texts, {.vocab_size = o.vocab_size, .min_frequency = o.min_frequency});
  tokenize::save_bpe(r, o.out);
  if (!o.json)
    log << "tokenizer: byte-level BPE of " << r.vocab.size() << " tokens (" << r.merges.size() << " merges) learnt from "
        << r.text_bytes << " bytes in "
        << format_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) << "\n";
  return tokenize::ByteLevelBPE::from_folder(o.out);
}

// Data-parallel: rank 0 obtains the tokenizer (and writes it into DIR); every other rank
// gets its files' contents from rank 0.
tokenize::ByteLevelBPE shared_tokenizer(const TrainLMCliOptions& o, std::ostream& log, train::World& w) {
  if (!w.distributed()) return obtain_tokenizer(o, log);
  std::string files;
  if (w.root()) {
    const train::World::Busy busy(w);
    obtain_tokenizer(o, log);
    const std::string vocab = io::read_file(o.out + "/vocab.json", "train lm");
    files = std::to_string(vocab.size()) + "\n" + vocab + io::read_file(o.out + "/merges.txt", "train lm");
  }
  w.broadcast(files, "rank 0's tokenizer");
  const std::size_t nl = files.find('\n');
  const std::size_t n = nl == std::string::npos ? 0 : std::stoull(files.substr(0, nl));
  if (nl == std::string::npos || n > files.size() - nl - 1)
    throw train::DistributedError("train lm: a malformed tokenizer from rank 0", false);
  return tokenize::ByteLevelBPE::parse(files.substr(nl + 1, n), files.substr(nl + 1 + n),
                                       "rank 0's " + o.out + "/vocab.json", "rank 0's " + o.out + "/merges.txt");
}

// Data-parallel: rank 0 tokenizes the texts into the cache DIR.tokens; the other ranks read
// their own texts and reuse that cache when it holds them (one machine, or a shared disk),
// else keep their tokens in memory. The start-up check compares every rank's corpus key.
train::CorpusTokens shared_corpus(const TrainLMCliOptions& o, const tokenize::ByteLevelBPE& bpe,
                                  const std::string& cache, train::World& w) {
  if (!w.distributed()) return train::tokenize_corpus(o.texts, bpe, cache);
  std::optional<train::CorpusTokens> c;
  if (w.root()) {
    const train::World::Busy busy(w);
    c = train::tokenize_corpus(o.texts, bpe, cache);
  }
  w.barrier("rank 0 to tokenize the corpus");
  if (!w.root()) {
    const train::World::Busy busy(w);
    c = train::tokenize_corpus(o.texts, bpe, cache, /*write_cache=*/false);
  }
  return std::move(*c);
}

std::string sample_text(const models::GPT2LMHeadModel& model, const tokenize::ByteLevelBPE& bpe,
                        const std::vector<i64>& prompt, i64 n) {
  const i64 room = model.config().n_positions - static_cast<i64>(prompt.size());
  if (room < 1 || prompt.empty()) return "";
  const auto res = infer::generate(model, {prompt}, {.max_new_tokens = std::min(n, room)});
  std::vector<i64> all = prompt;
  all.insert(all.end(), res[0].new_ids.begin(), res[0].new_ids.end());
  return bpe.decode(all);
}

}  // namespace

int run_train_lm(const TrainLMCliOptions& o, std::ostream& out_all) {
  if (o.out.empty()) throw ValueError("train lm: --out DIR is required");
  if (o.texts.empty()) throw ValueError("train lm: --text FILE... is required");
  // Data-parallel (train/distributed.h): rank 0 alone prints and writes.
  train::World& w = train::world();
  std::ostream quiet(nullptr);
  std::ostream& out = w.root() ? out_all : quiet;
  const std::string dir = strip_slash(o.out);
  const tokenize::ByteLevelBPE bpe = shared_tokenizer(o, out, w);
  const train::CorpusTokens corpus = shared_corpus(o, bpe, dir + ".tokens", w);
  const train::TokenFile& tokens = corpus.tokens;

  std::unique_ptr<train::LMTrainer> tr;
  if (o.resume && w.distributed()) {
    // Every rank resumes from rank 0's state file; rank 0 then repairs DIR if a save was
    // cut short.
    const std::string path = dir + "/" + train::LMTrainer::kStateFile;
    const io::Checkpoint state = train::shared_checkpoint(path);
    tr = train::LMTrainer::resume_from(state, path, tokens, bpe);
    if (w.root()) tr->restore_folder(dir, state);
  } else if (o.resume) {
    tr = train::LMTrainer::resume(dir, tokens, bpe);
  }
  if (o.resume) {
    if (tr->loop().finished())
      throw ValueError("train lm: " + dir + " holds a finished run (step " + std::to_string(tr->loop().step()) +
                       " of " + std::to_string(tr->loop().total_steps()) + "); there is nothing left to resume");
  } else {
    if (o.d_model % o.heads != 0)
      throw ValueError("train lm: --d-model " + std::to_string(o.d_model) + " is not divisible by --heads " +
                       std::to_string(o.heads));
    models::GPT2Config cfg;
    cfg.vocab_size = bpe.vocab_size();
    cfg.n_positions = o.train.context;
    cfg.n_embd = o.d_model;
    cfg.n_layer = o.layers;
    cfg.n_head = o.heads;
    cfg.activation_function = "gelu_new";
    cfg.dropout = o.dropout;
    if (const auto eos = bpe.eos_id()) cfg.bos_token_id = cfg.eos_token_id = *eos;
    train::LMTrainOptions to = o.train;
    to.grad_accum *= w.size();  // --grad-accum is per rank; the run's step has N times as many micro-batches
    tr = std::make_unique<train::LMTrainer>(cfg, to, tokens, bpe);
  }
  w.check_same({{"the corpus (digest of the texts and tokenizer)", std::to_string(tokens.key())},
                {"the corpus's token count", std::to_string(tokens.size())},
                {"the model config", models::gpt2_config_to_json(tr->model().config())},
                {"the training options", tr->options().to_json()}},
               "the language-model run");
  if (o.init_only) {
    if (w.root()) tr->save(dir);
    if (o.json)
      out << nlohmann::ordered_json{{"event", "init"}, {"step", 0}, {"out", dir}}.dump() << std::endl;
    else
      out << "wrote the initial model (step 0) to " << dir << "; train it with: qkv train lm --resume --out " << dir
          << " --text ...\n";
    return 0;
  }
  if (o.stop_after > 0 && o.stop_after <= tr->loop().step())
    throw ValueError("train lm: --stop-after " + std::to_string(o.stop_after) + ", but the run is already at step " +
                     std::to_string(tr->loop().step()));
  const train::LMTrainOptions& to = tr->options();
  const models::GPT2Config& cfg = tr->model().config();
  const i64 first_step = tr->loop().step();

  // The sample's prompt: --prompt, else the first 4 tokens of the held-out text.
  std::vector<i64> prompt;
  if (!o.prompt.empty()) prompt = bpe.encode_ordinary(o.prompt);
  else
    for (i64 i = 0; i < 4; ++i) prompt.push_back(tokens[tr->task().train_tokens() + i]);

  if (!o.json) {
    out << "GPT-2 " << cfg.n_layer << " layers, d_model " << cfg.n_embd << ", " << cfg.n_head << " heads, context "
        << cfg.n_positions << ", vocab " << cfg.vocab_size << " (" << general(tr->model().num_parameters() / 1e6, 3)
        << "M parameters)\n"
        << "corpus: " << tokens.text_bytes() << " bytes -> " << tokens.size() << " tokens ("
        << (corpus.reused ? "cached in " + tokens.path() : "tokenized in " + format_duration(corpus.seconds)) << "); "
        << tr->task().train_tokens() << " train / " << tr->task().val_tokens() << " held out\n"
        << "AdamW lr " << general(to.lr) << " (warmup " << to.warmup << ", cosine to " << general(to.min_lr) << " over "
        << to.steps << " steps), batch " << to.batch << " x " << to.context << " tokens x " << to.grad_accum
        << " accumulation";
    if (w.distributed()) out << " (" << w.size() << " ranks x " << to.grad_accum / w.size() << ")";
    out << ", weight decay " << general(to.weight_decay) << ", clip " << general(to.grad_clip) << ", seed " << to.seed
        << ", " << num_threads() << " thread(s)" << (w.distributed() ? " per rank" : "");
    if (o.resume) out << "\nresumed from " << dir << " at step " << first_step;
    out << "\n\n";
  }

  std::unique_ptr<ProgressBar> bar;
  train::LoopCallbacks cb;
  cb.on_step = [&](i64 step, i64 total, double loss) {
    if (!w.root()) return;
    if (!bar) bar = std::make_unique<ProgressBar>("train", total - first_step, ProgressOptions{.enabled = o.progress && !o.json});
    bar->update(step - first_step, "loss " + fixed(loss, 4));
  };
  cb.on_report = [&](const train::Report& r) {
    if (!w.root()) return;
    const std::string sample = sample_text(tr->model(), bpe, prompt, o.sample_tokens);
    tr->save(dir);
    if (o.json) {
      nlohmann::ordered_json j{{"event", "eval"},
                               {"step", r.step},
                               {"total_steps", r.total_steps},
                               {"train_loss", r.train_loss},
                               {"val_loss", train::metric(r.metrics, "val_loss")},
                               {"val_bpb", train::metric(r.metrics, "val_bpb")},
                               {"lr", r.lr},
                               {"tokens_per_s", r.items_per_s},
                               {"elapsed_s", r.elapsed_s},
                               {"skipped_steps", r.skipped_steps},
                               {"sample", sample}};
      if (w.distributed()) {
        j["ranks"] = w.size();
        j["wait_s"] = r.wait_s;  // rank 0 blocked on the others since the previous evaluation
      }
      out << j.dump() << std::endl;
    } else {
      if (bar && bar->is_tty()) std::cerr << "\r\033[K";
      out << "step " << r.step << "/" << r.total_steps << " | train " << fixed(r.train_loss, 4) << " | val "
          << fixed(train::metric(r.metrics, "val_loss"), 4) << " nats/token, "
          << fixed(train::metric(r.metrics, "val_bpb"), 4) << " bits/byte | " << fixed(r.items_per_s, 0)
          << " tokens/s | " << format_duration(r.elapsed_s) << "\n  sample: " << sample << std::endl;
    }
  };
  const bool finished = tr->train(cb, o.stop_after);
  if (bar) bar->finish();
  if (!finished && w.root()) tr->save(dir);  // stopped between evaluations (--stop-after)
  const train::Report* last = tr->loop().reports().empty() ? nullptr : &tr->loop().reports().back();
  const double secs = tr->loop().elapsed_s();
  if (o.json) {
    nlohmann::ordered_json j{{"event", "done"}, {"step", tr->loop().step()}, {"total_steps", tr->loop().total_steps()},
                             {"finished", finished}};
    if (last) {
      j["val_loss"] = train::metric(last->metrics, "val_loss");
      j["val_bpb"] = train::metric(last->metrics, "val_bpb");
      j["train_loss"] = last->train_loss;
    }
    j["elapsed_s"] = secs;
    j["threads"] = num_threads();
    if (w.distributed()) {
      j["ranks"] = w.size();
      j["wait_s"] = tr->loop().wait_s();
      j["bytes_sent_per_step"] = tr->loop().bytes_sent_per_step();
    }
    j["out"] = dir;
    out << j.dump() << std::endl;
    return 0;
  }
  out << "\n";
  if (last)
    out << "val loss " << fixed(train::metric(last->metrics, "val_loss"), 4) << " nats/token ("
        << fixed(train::metric(last->metrics, "val_bpb"), 4) << " bits/byte) after " << tr->loop().step()
        << " steps in " << format_duration(secs) << "\n";
  if (!finished)
    out << "stopped at step " << tr->loop().step() << " of " << tr->loop().total_steps()
        << "; continue with: qkv train lm --resume --out " << dir << " --text ...\n";
  out << "wrote " << dir << " (config.json, model.safetensors, vocab.json, merges.txt, " << train::LMTrainer::kStateFile
      << "); try: qkv generate --model " << dir << " \"" << (o.prompt.empty() ? "And God said" : o.prompt) << "\"\n";
  return 0;
}

QKV_TRAIN_TASK(lm, {
    .name = "lm",
    .summary = "GPT-2 language model on text files (writes a Hugging Face GPT-2 folder)",
    .order = 30,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Trains a GPT-2 (pre-norm decoder blocks, learned positions, tied LM head) on the text files: they are "
          "tokenized once into DIR.tokens (reused while the texts and tokenizer are unchanged), the last "
          "--val-fraction of the tokens is held out, and training windows of --context tokens are drawn at random "
          "from the rest. AdamW (betas 0.9/0.95, weight decay on matrices only) with linear warmup and cosine decay, "
          "gradient clipping and accumulation. Every --eval-every steps: validation loss (nats per token and bits "
          "per byte), a greedy sample through the KV cache, and a save of DIR.\n\n"
          "DIR is a Hugging Face GPT-2 folder (config.json, model.safetensors, vocab.json, merges.txt) that "
          "`qkv generate --model DIR` and transformers' GPT2LMHeadModel.from_pretrained(DIR) load, plus "
          "qkv_train_state.safetensors (optimizer, step, RNG): --resume continues the run bitwise identically to "
          "an uninterrupted one with the same --threads.\n\n"
          "Example:\n"
          "  qkv train lm --text data/kjv.txt --vocab-size 4096 --steps 600 --out runs/kjv\n"
          "  qkv generate --model runs/kjv \"And God said\"");
      auto opt = std::make_shared<TrainLMCliOptions>();
      std::vector<CLI::Option*> fixed_by_run;
      auto fixed = [&](CLI::Option* o) {
        fixed_by_run.push_back(o->capture_default_str());
        return o;
      };
      train::LMTrainOptions& t = opt->train;
      sub.add_option("--text", opt->texts, "Text files (UTF-8) to train on")->required()->expected(1, -1);
      sub.add_option("--out", opt->out, "Output folder (a Hugging Face GPT-2 folder)")->required();
      auto* tok = fixed(sub.add_option("--tokenizer", opt->tokenizer, "Folder with vocab.json + merges.txt to use"));
      auto* vs = fixed(sub.add_option("--vocab-size", opt->vocab_size, "Train a byte-level BPE of this size on the texts"))
                     ->check(int_range(257, 1 << 20));
      tok->excludes(vs);
      fixed(sub.add_option("--min-frequency", opt->min_frequency, "BPE trainer: minimum pair frequency"))
          ->check(int_range(0, 1000000000));
      fixed(sub.add_option("--layers", opt->layers, "Transformer blocks"))->check(int_range(1, 256));
      fixed(sub.add_option("--d-model", opt->d_model, "Model width"))->check(int_range(1, 16384));
      fixed(sub.add_option("--heads", opt->heads, "Attention heads"))->check(int_range(1, 1024));
      fixed(sub.add_option("--dropout", opt->dropout, "Dropout (embeddings, attention, residual)"))->check(CLI::Range(0.0, 0.9));
      fixed(sub.add_option("--context", t.context, "Tokens per training window (= n_positions)"))->check(int_range(1, 65536));
      fixed(sub.add_option("--batch", t.batch, "Windows per micro-batch"))->check(int_range(1, 65536));
      fixed(sub.add_option("--grad-accum", t.grad_accum, "Micro-batches per optimizer step"))->check(int_range(1, 65536));
      fixed(sub.add_option("--steps", t.steps, "Optimizer steps"))->check(int_range(1, 100000000));
      fixed(sub.add_option("--lr", t.lr, "Peak learning rate"))->check(CLI::PositiveNumber);
      fixed(sub.add_option("--warmup", t.warmup, "Linear warmup steps"))->check(int_range(0, 100000000));
      fixed(sub.add_option("--min-lr", t.min_lr, "Learning rate at the end of the cosine"))->check(CLI::NonNegativeNumber);
      fixed(sub.add_option("--weight-decay", t.weight_decay, "AdamW weight decay (matrices only)"))->check(CLI::NonNegativeNumber);
      fixed(sub.add_option("--grad-clip", t.grad_clip, "Clip the global gradient norm (0: off)"))->check(CLI::NonNegativeNumber);
      fixed(sub.add_option("--eval-every", t.eval_every, "Evaluate, sample and save every N steps (0: at the end)"))
          ->check(int_range(0, 100000000));
      fixed(sub.add_option("--val-fraction", t.val_fraction, "Fraction of the tokens held out"))->check(CLI::Range(1e-6, 0.9));
      fixed(sub.add_option("--val-windows", t.val_windows, "Held-out windows per evaluation"))->check(int_range(1, 1000000));
      fixed(sub.add_option("--seed", t.seed, "Seed of the initial weights and the batches"));
      fixed(sub.add_flag("--skip-nonfinite", t.skip_nonfinite, "Skip a step whose loss or gradient is not finite (default: stop with an error)"));
      auto* resume = sub.add_flag("--resume", opt->resume, "Continue the run saved in --out (its settings are fixed)");
      sub.add_option("--stop-after", opt->stop_after, "Stop once this many steps are done (continue with --resume)")
          ->check(int_range(1, 100000000));
      sub.add_flag("--init-only", opt->init_only,
                   "Write the initial model and run state (step 0) to --out and stop; --resume trains it")
          ->excludes(resume);
      sub.add_option("--prompt", opt->prompt, "Prompt of the samples (default: the first 4 held-out tokens)");
      sub.add_option("--sample-tokens", opt->sample_tokens, "Tokens per sample")->check(int_range(1, 4096))->capture_default_str();
      sub.add_flag("--json", opt->json, "One JSON object per evaluation, then a summary object");
      sub.add_flag("!--no-progress", opt->progress, "Do not show the progress bar on stderr");
      for (CLI::Option* f : fixed_by_run) f->excludes(resume);
      return [opt] { return run_train_lm(*opt, std::cout); };
    }});

}  // namespace qkv::tool
