// qkv train lm: a GPT-2 trained on text files; the result is a Hugging Face GPT-2 folder.
#include "cmd_train_lm.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "interrupt.h"
#include "model_dir.h"
#include "output.h"
#include "progress.h"
#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/generate.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
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

// The run's tokenizer and the bytes of its files (written into every save of the folder).
struct RunTokenizer {
  std::shared_ptr<const tokenize::Tokenizer> bpe;
  std::map<std::string, std::string> files;  // vocab.json, merges.txt
};

RunTokenizer read_tokenizer(const std::string& dir, const char* why) {
  RunTokenizer t;
  t.bpe = load_tokenizer(dir, true, why);
  for (const char* f : {"vocab.json", "merges.txt"}) t.files[f] = io::read_file(dir + "/" + f, "train lm");
  return t;
}

// A byte-level BPE learnt on the texts, as Hugging Face tokenizers' BpeTrainer learns it. Its
// files go into the run's folder at the first save; they are read back here from a private
// scratch folder (removed at once), never from --out.
RunTokenizer train_tokenizer(const TrainLMCliOptions& o, std::ostream& log) {
  const auto t0 = std::chrono::steady_clock::now();
  const tokenize::BpeTrainResult r = tokenize::train_byte_level_bpe_files(
      o.texts, {.vocab_size = o.vocab_size, .min_frequency = o.min_frequency});
  RunTokenizer t;
  t.files["vocab.json"] = tokenize::bpe_vocab_json(r);
  t.files["merges.txt"] = tokenize::bpe_merges_txt(r);
  std::string scratch = (fs::temp_directory_path() / "qkv-bpe-XXXXXX").string();
  if (!::mkdtemp(scratch.data()))
    throw IOError("train lm: cannot create a scratch folder in '" + fs::temp_directory_path().string() +
                  "': " + std::strerror(errno));
  struct Remove {
    std::string dir;
    ~Remove() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove{scratch};
  for (const auto& [name, bytes] : t.files) io::write_file_atomic(scratch + "/" + name, bytes, "train lm");
  t.bpe = tokenize::load_tokenizer(scratch);
  if (!o.json)
    log << "tokenizer: byte-level BPE of " << r.vocab.size() << " tokens (" << r.merges.size() << " merges) learnt from "
        << r.text_bytes << " bytes in "
        << format_duration(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()) << "\n";
  return t;
}

// The model of a new run (the tokenizer's vocabulary decides vocab_size).
models::GPT2Config new_run_config(const TrainLMCliOptions& o, std::int64_t vocab_size) {
  models::GPT2Config cfg;
  cfg.vocab_size = vocab_size;
  cfg.n_positions = o.train.context;
  cfg.n_embd = o.d_model;
  cfg.n_layer = o.layers;
  cfg.n_head = o.heads;
  cfg.activation_function = "gelu_new";
  cfg.dropout = o.dropout;
  return cfg;
}

// Bytes of the texts (the corpus is held in memory while it is tokenized).
std::uint64_t text_bytes(const std::vector<std::string>& texts) {
  std::uint64_t n = 0;
  for (const std::string& t : texts) {
    std::error_code ec;
    n += fs::file_size(t, ec);
  }
  return n;
}

// "qkv train lm --resume --out DIR --text FILE..." for this run.
std::string resume_command(const TrainLMCliOptions& o, const std::string& dir) {
  return "qkv train lm --resume --out " + shell_quote(dir) + " --text " + shell_join(o.texts);
}

// The run's tokenizer: `tok` as read before (--tokenizer, --resume), else learnt now on the
// texts. Data-parallel: rank 0 obtains it and sends the bytes of its files to the other
// ranks (--out holds nothing before the first save, and they need not see rank 0's disk).
void obtain_tokenizer(RunTokenizer& tok, const TrainLMCliOptions& o, std::ostream& log, train::World& w) {
  if (!w.distributed()) {
    if (!tok.bpe) tok = train_tokenizer(o, log);
    return;
  }
  std::string files;
  if (w.root()) {
    const train::World::Busy busy(w);
    if (!tok.bpe) tok = train_tokenizer(o, log);
    const std::string& vocab = tok.files.at("vocab.json");
    files = std::to_string(vocab.size()) + "\n" + vocab + tok.files.at("merges.txt");
  }
  w.broadcast(files, "rank 0's tokenizer");
  if (w.root()) return;
  const std::size_t nl = files.find('\n');
  const std::size_t n = nl == std::string::npos ? 0 : std::stoull(files.substr(0, nl));
  if (nl == std::string::npos || n > files.size() - nl - 1)
    throw train::DistributedError("train lm: a malformed tokenizer from rank 0", false);
  tok.bpe = tokenize::tokenizer_from_bpe_files(files.substr(nl + 1, n), files.substr(nl + 1 + n), "rank 0's vocab.json",
                                               "rank 0's merges.txt");
}

// The corpus's tokens; a new cache is written to `write_path` (renamed to `cache` at the
// first save). Data-parallel: rank 0 does that; every other rank reuses `cache` when it
// holds its texts (one machine, or a shared disk), else keeps its tokens in memory and
// writes nothing. The start-up check compares every rank's corpus key.
train::CorpusTokens tokenize_texts(const TrainLMCliOptions& o, const tokenize::Tokenizer& bpe,
                                   const std::string& cache, const std::string& write_path, train::World& w) {
  const train::World::Busy busy(w);  // the ranks tokenize side by side
  if (w.root()) return train::tokenize_corpus(o.texts, bpe, cache, write_path);
  return train::tokenize_corpus(o.texts, bpe, cache, "", /*write_cache=*/false);
}

std::string sample_text(const models::GPT2LMHeadModel& model, const tokenize::Tokenizer& bpe,
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
  // Data-parallel (train/distributed.h): rank 0 alone prints and writes; a check that fails
  // on any rank stops every rank at once, rank 0 reporting it (World::fail_together).
  train::World& w = train::world();
  std::ostream quiet(nullptr);
  std::ostream& out = w.root() ? out_all : quiet;
  const std::string dir = strip_slash(o.out);

  // ---- every option, input and size, before anything is trained or written ----
  const auto check_options = [&] {
    if (o.out.empty()) throw ValueError("train lm: --out DIR is required");
    if (o.texts.empty()) throw ValueError("train lm: --text FILE... is required");
    if (o.resume && o.overwrite) throw ValueError("train lm: --resume continues the run in --out; --overwrite would replace it (give one)");
    if (!o.resume) {
      if (o.tokenizer.empty() && o.vocab_size <= 0)
        throw ValueError("train lm: give --tokenizer DIR (vocab.json + merges.txt) or --vocab-size N");
      if (o.d_model % o.heads != 0)
        throw ValueError("train lm: --d-model " + std::to_string(o.d_model) + " is not divisible by --heads " +
                         std::to_string(o.heads));
      o.train.validate();
    }
  };
  if (!w.distributed()) check_options();
  // Ctrl-C from here on: before training nothing is written (the command returns 130);
  // during training the step in progress is finished and saved.
  TrainingInterrupt ctrl_c;
  RunTokenizer tok;
  w.fail_together(
      [&] {
        if (w.distributed()) check_options();
        for (const std::string& t : o.texts) check_input_file(t, "train lm: --text");  // each rank reads its own
        if (!w.root()) return;  // rank 0 alone reads the tokenizer and the run, and writes DIR
        if (!o.tokenizer.empty())
          check_input_folder(o.tokenizer, "train lm: --tokenizer", "a tokenizer folder (vocab.json + merges.txt)");
        io::remove_stale_temp_files(dir + ".tokens");
        if (o.resume) {
          io::recover_folder(dir);
          check_input_folder(dir, "train lm --resume: --out", "the folder of a training run");
          if (!fs::exists(fs::path(dir) / train::LMTrainer::kStateFile))
            throw IOError("train lm --resume: " + dir + " holds no training run (no " +
                          std::string(train::LMTrainer::kStateFile) + "); start one without --resume");
        } else {
          check_output_folder(dir, {.cmd = "train lm", .overwrite = o.overwrite,
                                    .alternative = "--resume to continue the run it holds"});
        }
        if (o.resume) tok = read_tokenizer(dir, "to resume the run (train lm --resume)");
        else if (!o.tokenizer.empty()) tok = read_tokenizer(o.tokenizer, "by train lm --tokenizer");
        const std::uint64_t corpus_bytes = 4 * text_bytes(o.texts);  // the texts and their ids while tokenizing
        if (!o.resume) {  // a resumed run checks its own sizes when its state is read
          models::GPT2Config cfg = new_run_config(o, tok.bpe ? tok.bpe->vocab_size() : o.vocab_size);
          models::check_gpt2_config(cfg);
          train::check_lm_training_memory(cfg, o.train, corpus_bytes);
        }
      },
      "the checks before training");
  obtain_tokenizer(tok, o, out, w);
  const tokenize::Tokenizer& bpe = *tok.bpe;

  // ---- the corpus; a new token cache goes beside --out once the run has a folder ----
  const std::string cache = dir + ".tokens";
  const std::string cache_tmp = w.root() ? cache + ".tmp." + std::to_string(::getpid()) + ".0" : "";
  struct DropTemp {
    std::string path;
    ~DropTemp() {
      if (!path.empty()) ::unlink(path.c_str());  // a no-op once renamed into place
    }
  } drop{cache_tmp};
  const train::CorpusTokens corpus = tokenize_texts(o, bpe, cache, cache_tmp, w);
  const train::TokenFile& tokens = corpus.tokens;

  std::unique_ptr<train::LMTrainer> tr;
  std::optional<io::Checkpoint> state;
  const std::string state_path = dir + "/" + train::LMTrainer::kStateFile;
  if (o.resume) state = train::shared_checkpoint(state_path);  // rank 0's, on every rank
  w.fail_together(
      [&] {
        if (o.resume) {
          tr = train::LMTrainer::resume_from(*state, state_path, tokens, bpe);
          if (tr->loop().finished())
            throw ValueError("train lm: " + dir + " holds a finished run (step " + std::to_string(tr->loop().step()) +
                             " of " + std::to_string(tr->loop().total_steps()) + "); there is nothing left to resume");
        } else {
          models::GPT2Config cfg = new_run_config(o, bpe.vocab_size());
          if (const auto eos = bpe.eos_id()) cfg.bos_token_id = cfg.eos_token_id = *eos;
          train::LMTrainOptions to = o.train;
          to.grad_accum *= w.size();  // --grad-accum is per rank; the run's step has N times as many micro-batches
          tr = std::make_unique<train::LMTrainer>(cfg, to, tokens, bpe);
        }
        if (o.stop_after > 0 && o.stop_after <= tr->loop().step())
          throw ValueError("train lm: --stop-after " + std::to_string(o.stop_after) +
                           ", but the run is already at step " + std::to_string(tr->loop().step()));
      },
      "the ranks to set up the run");
  if (state && w.root()) {
    const train::World::Busy busy(w);
    tr->restore_folder(dir, *state);  // DIR's model files a save ahead of its state (a save cut short)
  }
  state.reset();
  w.check_same({{"the corpus (digest of the texts and tokenizer)", std::to_string(tokens.key())},
                {"the corpus's token count", std::to_string(tokens.size())},
                {"the model config", models::gpt2_config_to_json(tr->model().config())},
                {"the training options", tr->options().to_json()}},
               "the language-model run");
  if (train::stop_requested_by_any_rank("before training")) {
    out << "interrupted before training began; nothing was written\n";
    return kInterruptedExit;
  }
  // Settings that cannot do what they say: a warning each (the run goes on).
  const train::LMTrainOptions& run_o = tr->options();
  if (run_o.warmup >= run_o.steps && !o.resume && w.root())
    warn("--warmup " + std::to_string(run_o.warmup) + " is not shorter than the run (--steps " +
         std::to_string(run_o.steps) + "): the learning rate never reaches --lr " + general(run_o.lr) +
         " and never decays; give a shorter --warmup");
  if (o.stop_after >= tr->loop().total_steps() && w.root())
    warn("--stop-after " + std::to_string(o.stop_after) + " is not before the end of the run (" +
         std::to_string(tr->loop().total_steps()) + " steps): it has no effect");
  tr->set_folder_files(tok.files);
  // Every save replaces DIR as a whole; the first of an --overwrite run drops what DIR held.
  // Rank 0 alone saves.
  bool replace_all = !o.resume && o.overwrite;
  std::int64_t saved_step = -1;
  auto save = [&] {
    if (!w.root()) return;
    const train::World::Busy busy(w);  // the other ranks wait meanwhile
    tr->save(dir, !replace_all);
    replace_all = false;
    saved_step = tr->loop().step();
    if (!corpus.reused && ::rename(cache_tmp.c_str(), cache.c_str()) == 0) drop.path.clear();
  };
  if (o.init_only) {
    save();
    if (o.json)
      out << nlohmann::ordered_json{{"event", "init"}, {"step", 0}, {"out", dir}}.dump() << std::endl;
    else
      out << "wrote the initial model (step 0) to " << dir << "; train it with: " << resume_command(o, dir) << "\n";
    return 0;
  }
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
    save();
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
  bool finished = false;
  finished = tr->train(cb, o.stop_after);
  if (saved_step != tr->loop().step()) save();  // stopped between evaluations (--stop-after, Ctrl-C)
  if (bar) finished ? bar->finish() : bar->stop();
  const bool interrupted = TrainingInterrupt::requested() && !finished;  // on every rank alike (Loop::run)
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
    if (!finished) j["resume"] = resume_command(o, dir);
    if (interrupted) j["interrupted"] = true;
    out << j.dump() << std::endl;
    return interrupted ? kInterruptedExit : 0;
  }
  out << "\n";
  if (last)
    out << "val loss " << fixed(train::metric(last->metrics, "val_loss"), 4) << " nats/token ("
        << fixed(train::metric(last->metrics, "val_bpb"), 4) << " bits/byte) after " << tr->loop().step()
        << " steps in " << format_duration(secs) << "\n";
  if (!finished)
    out << (interrupted ? "interrupted" : "stopped") << " at step " << tr->loop().step() << " of "
        << tr->loop().total_steps() << "; continue with: " << resume_command(o, dir) << "\n";
  out << "wrote " << dir << " (config.json, model.safetensors, vocab.json, merges.txt, " << train::LMTrainer::kStateFile
      << "); try: qkv generate --model " << shell_quote(dir) << " "
      << shell_quote(o.prompt.empty() ? "And God said" : o.prompt) << "\n";
  return interrupted ? kInterruptedExit : 0;
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
          "Every option, input and size (the memory the run needs included) is checked before anything is trained "
          "or written. Nothing is written before the first save, and each save replaces DIR as a whole (the files "
          "are written into a temporary DIR.tmp-* beside it and swapped into place), so a failed or killed run "
          "leaves DIR as the last complete save, or no DIR at all. A DIR that already holds files is refused unless "
          "--overwrite (replace it) or --resume (continue its run). Ctrl-C finishes the current step, saves it and "
          "prints the command that resumes it (exit status 130); a second Ctrl-C quits at once, keeping the last "
          "complete save.\n\n"
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
      sub.add_option("--text", opt->texts, "Text files (UTF-8) to train on")->type_name("FILE")->required()->expected(1, -1);
      sub.add_option("--out", opt->out, "Output folder (a Hugging Face GPT-2 folder)")->type_name("DIR")->required();
      auto* tok = fixed(sub.add_option("--tokenizer", opt->tokenizer, "Folder with vocab.json + merges.txt to use"))
                      ->type_name("DIR");
      auto* vs = sub.add_option("--vocab-size", opt->vocab_size, "Train a byte-level BPE of this size on the texts")
                     ->check(int_range(257, 1 << 20));
      fixed_by_run.push_back(vs);
      tok->excludes(vs);
      fixed(sub.add_option("--min-frequency", opt->min_frequency, "BPE trainer: minimum pair frequency"))
          ->check(int_range(0, 1000000000));
      fixed(sub.add_option("--layers", opt->layers, "Transformer blocks"))->check(int_range(1, 256));
      fixed(sub.add_option("--d-model", opt->d_model, "Model width"))->check(int_range(1, 16384));
      fixed(sub.add_option("--heads", opt->heads, "Attention heads"))->check(int_range(1, 1024));
      fixed(sub.add_option("--dropout", opt->dropout, "Dropout (embeddings, attention, residual)"))->check(real_range(0.0, 0.9));
      fixed(sub.add_option("--context", t.context, "Tokens per training window (= n_positions)"))->check(int_range(1, 65536));
      fixed(sub.add_option("--batch", t.batch, "Windows per micro-batch"))->check(int_range(1, 65536));
      fixed(sub.add_option("--grad-accum", t.grad_accum, "Micro-batches per optimizer step"))->check(int_range(1, 65536));
      fixed(sub.add_option("--steps", t.steps, "Optimizer steps"))->check(int_range(1, 100000000));
      fixed(sub.add_option("--lr", t.lr, "Peak learning rate"))->check(real_above(0));
      fixed(sub.add_option("--warmup", t.warmup, "Linear warmup steps"))->check(int_range(0, 100000000));
      fixed(sub.add_option("--min-lr", t.min_lr, "Learning rate at the end of the cosine"))->check(real_at_least(0));
      fixed(sub.add_option("--weight-decay", t.weight_decay, "AdamW weight decay (matrices only)"))->check(real_at_least(0));
      fixed(sub.add_option("--grad-clip", t.grad_clip, "Clip the global gradient norm (0: off)"))->check(real_at_least(0));
      fixed(sub.add_option("--eval-every", t.eval_every, "Evaluate, sample and save every N steps (0: at the end)"))
          ->check(int_range(0, 100000000));
      fixed(sub.add_option("--val-fraction", t.val_fraction, "Fraction of the tokens held out"))->check(real_range(1e-6, 0.9));
      fixed(sub.add_option("--val-windows", t.val_windows, "Held-out windows per evaluation"))->check(int_range(1, 1000000));
      fixed(add_seed_option(sub, t.seed, "Seed of the initial weights and the batches"));
      fixed(sub.add_flag("--skip-nonfinite", t.skip_nonfinite, "Skip a step whose loss or gradient is not finite (default: stop with an error)"));
      auto* resume = sub.add_flag("--resume", opt->resume, "Continue the run saved in --out (its settings are fixed)");
      add_overwrite_flag(sub, opt->overwrite, "--out")->excludes(resume);
      sub.add_option("--stop-after", opt->stop_after, "Stop once this many steps are done (continue with --resume)")
          ->check(int_range(1, 100000000));
      sub.add_flag("--init-only", opt->init_only,
                   "Write the initial model and run state (step 0) to --out and stop; --resume trains it")
          ->excludes(resume);
      sub.add_option("--prompt", opt->prompt, "Prompt of the samples (default: the first 4 held-out tokens)");
      sub.add_option("--sample-tokens", opt->sample_tokens, "Tokens per sample")->check(int_range(1, 4096))->capture_default_str();
      sub.add_flag("--json", opt->json, "One JSON object per evaluation, then a summary object");
      add_no_progress_flag(sub, opt->progress);
      for (CLI::Option* f : fixed_by_run) f->excludes(resume);
      return [opt] { return run_train_lm(*opt, std::cout); };
    }});

}  // namespace qkv::tool
