// Language-model training on a text corpus (qkv train lm): the corpus tokenized
// once into a memory-mapped token file, random training windows from the head of
// it, a fixed validation set from its tail, GPT-2 trained through train::Loop,
// and the result written as a Hugging Face GPT-2 folder.
//
// Tokens of the corpus: every text file encoded with encode_ordinary (a literal
// "<|endoftext|>" in a text is ordinary text), each file followed by <|endoftext|>
// when the vocabulary has it. Split: the last max(T + 1, floor(N * val_fraction))
// tokens are held out.
//
// Batches (a pure function of the seed and the step, so a resumed run draws the same):
//   micro-batch k of optimiser step s, row b, starts at
//     random_bits(seed, ((s * K + k) * B + b)) % (N_train - T)        (qkv/core/rng.h)
//   ids     = tokens[start .. start + T)       I64 [B, T]
//   targets = tokens[start + 1 .. start + T]   I64 [B, T]
//   loss    = cross_entropy(logits [B*T, V], targets [B*T])   (mean nats per token)
// Validation: windows of T + 1 tokens at stride T from the start of the held-out tail,
// at most val_windows of them; val_loss = mean nats per target token, val_bpb = the
// summed nats / ln 2 / the UTF-8 bytes of those target tokens.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/memory.h"
#include "qkv/io/checkpoint.h"
#include "qkv/models/gpt2.h"
#include "qkv/tokenize/tokenizer.h"
#include "qkv/train/loop.h"

namespace qkv::train {

// A read-only, memory-mapped file of token ids (16 or 32 bits each).
//   header (64 bytes, little-endian): "QKVTOK01", u64 key, u64 count, u32 width (2 | 4),
//                                    u32 0, u64 text_bytes, u64 vocab_size, 16 zero bytes
//   then count ids of `width` bytes.
class TokenFile {
 public:
  // Maps `path`. IOError if it cannot be opened; FormatError naming it if the header is
  // malformed, the size disagrees with it, or an id is >= vocab_size.
  static TokenFile open(const std::string& path);
  // Writes ids atomically (width 2 when vocab_size <= 65536, else 4).
  static void write(const std::string& path, const std::vector<std::int64_t>& ids, std::uint64_t key,
                    std::uint64_t text_bytes, std::uint64_t vocab_size);
  // The bytes write() puts in the file, and a token file held in memory from such bytes
  // (checked as open() checks a file; `name` stands for it in messages).
  static std::string encode(const std::vector<std::int64_t>& ids, std::uint64_t key, std::uint64_t text_bytes,
                            std::uint64_t vocab_size);
  static TokenFile from_bytes(std::string bytes, const std::string& name);

  std::int64_t size() const { return count_; }
  std::int64_t operator[](std::int64_t i) const {
    return width_ == 2 ? static_cast<const std::uint16_t*>(data_)[i] : static_cast<const std::uint32_t*>(data_)[i];
  }
  std::uint64_t key() const { return key_; }
  std::uint64_t text_bytes() const { return text_bytes_; }
  std::uint64_t vocab_size() const { return vocab_; }
  const std::string& path() const { return path_; }

 private:
  static TokenFile from_mapping(std::shared_ptr<void> map, std::uint64_t size, const std::string& path);
  std::shared_ptr<void> map_;  // the whole mapping or buffer (released with the last copy)
  const void* data_ = nullptr;
  std::int64_t count_ = 0;
  int width_ = 2;
  std::uint64_t key_ = 0, text_bytes_ = 0, vocab_ = 0;
  std::string path_;
};

// FNV-1a 64 over the texts' bytes (each preceded by its length) and the tokenizer's
// vocabulary (each token's bytes): equal keys mean the same corpus, tokenized alike.
std::uint64_t corpus_key(const std::vector<std::string>& texts, const tokenize::Tokenizer& bpe);

struct CorpusTokens {
  TokenFile tokens;
  bool reused = false;  // the cache file was already there with the same key
  double seconds = 0;   // tokenizing (0 when reused)
};
// Reads the text files (IOError naming a missing one; ValueError naming the file and
// byte offset of invalid UTF-8, or an empty corpus), tokenizes them as described at
// the top, and caches the ids in `cache_path`; a cache with the same key is reused.
// A new cache is written to `write_path` when given (the caller renames it to
// cache_path once its run has a folder: qkv train lm writes nothing before its first save).
// write_cache = false (a data-parallel rank other than 0, which writes nothing): a
// matching cache is still reused, else the ids are kept in memory only.
CorpusTokens tokenize_corpus(const std::vector<std::string>& files, const tokenize::Tokenizer& bpe,
                             const std::string& cache_path, const std::string& write_path = "",
                             bool write_cache = true);

struct LMTrainOptions {
  std::int64_t steps = 1000;      // optimiser steps
  std::int64_t batch = 16;        // B: windows per micro-batch
  std::int64_t context = 256;     // T
  std::int64_t grad_accum = 1;    // K: micro-batches per step, over all data-parallel ranks
  double lr = 1e-3;               // peak (AdamW, betas 0.9 / 0.95, eps 1e-8)
  std::int64_t warmup = 100;
  double min_lr = 1e-4;           // cosine floor
  double weight_decay = 0.1;      // on weights of rank >= 2 only
  double grad_clip = 1.0;         // <= 0: none
  std::int64_t eval_every = 100;  // 0: at the end only
  double val_fraction = 0.1;
  std::int64_t val_windows = 64;
  std::uint64_t seed = 0;         // weights (init_gpt2_weights) and batches
  bool skip_nonfinite = false;    // skip a non-finite step instead of stopping

  // Flat JSON object with the fields above; from_json: missing fields keep defaults,
  // unknown fields / wrong types / invalid values are a ValueError naming them.
  std::string to_json() const;
  static LMTrainOptions from_json(const std::string& json);
  void validate() const;
  bool operator==(const LMTrainOptions&) const = default;
};

// The memory a run of this model with these options needs at its peak, for the check
// before anything is built: the parameters four times over (weights, gradients, AdamW's
// two moments) and, per token of a micro-batch (B x T), what the forward keeps for the
// backward: about 10 n_embd + 2 n_inner floats per layer, 8 n_embd for the embeddings and
// the final norm, and 3 x vocab for the logits, their log-softmax and its gradient
// (measured here at 0.75-0.95 of this for 2-8 layers, n_embd 128-512).
MemoryEstimate lm_training_memory(const models::GPT2Config& c, const LMTrainOptions& o);
// lm_training_memory(c, o) checked against the memory available: ResourceError naming the
// sizes and what to lower ("train lm (6 layers, d_model 1024, vocab 4096; batch 64 x
// context 4096 tokens): needs ..."), before anything is allocated.
void check_lm_training_memory(const models::GPT2Config& c, const LMTrainOptions& o, std::uint64_t extra_bytes = 0);

// The language-model loss: cross_entropy(model.forward(ids) as [B*T, V], targets as [B*T]),
// mean nats per token. ids, targets I64 [B, T].
Tensor lm_loss(const models::GPT2LMHeadModel& model, const Tensor& ids, const Tensor& targets);

// The run's optimiser: AdamW(lr, betas 0.9 / 0.95, eps 1e-8, weight_decay) over the
// model's parameters, parameters of rank < 2 (biases, LayerNorm) exempt from the decay.
std::unique_ptr<optim::AdamW> make_lm_optimizer(const models::GPT2LMHeadModel& model, const LMTrainOptions& o);

// The loop's task for a GPT-2 over a token file (see the top of the file).
class LMTask : public Task {
 public:
  // token_bytes[id]: UTF-8 bytes of token id (for bits per byte); keeps references.
  LMTask(const models::GPT2LMHeadModel& model, const TokenFile& tokens, const std::vector<std::int32_t>& token_bytes,
         const LMTrainOptions& o);
  Tensor loss(std::int64_t step, std::int64_t micro) override;
  std::int64_t items_per_micro() const override { return o_.batch * o_.context; }
  Metrics evaluate(std::int64_t step) override;  // val_loss, val_bpb, val_tokens

  std::int64_t train_tokens() const { return n_train_; }
  std::int64_t val_tokens() const { return tokens_.size() - n_train_; }
  // The batch of micro-batch `micro` of step `step`: ids and targets I64 [B, T].
  std::pair<Tensor, Tensor> batch(std::int64_t step, std::int64_t micro) const;

 private:
  const models::GPT2LMHeadModel& model_;
  const TokenFile& tokens_;
  const std::vector<std::int32_t>& token_bytes_;
  LMTrainOptions o_;
  std::int64_t n_train_ = 0;
};

// A language-model training run that saves into a Hugging Face GPT-2 folder and
// resumes bitwise from it.
//   DIR/config.json, DIR/model.safetensors         the model (save_gpt2; transformers loads it)
//   DIR/qkv_train_state.safetensors                an io checkpoint (model_type "gpt2-lm-train"):
//       the weights, AdamW state, default generator, the loop's counters, metadata
//       train_config (LMTrainOptions::to_json), tokens_key (corpus_key of the texts) and
//       folder_digest (folder_digest() of the model files written just before it)
//   DIR/<name> for each file of set_folder_files()  (qkv train lm: vocab.json, merges.txt)
// Resume reads the weights from the state file only. A save writes the whole folder into
// a staging sibling and swaps it into place (io::StagedFolder), so a kill at any point
// leaves DIR as the last complete save (or absent before the first); folders written
// before that scheme (each file renamed on its own, the state last) can hold model files
// one save ahead of the state, which resume rewrites from the state's weights.
class LMTrainer {
 public:
  // A new run: init_gpt2_weights(model, o.seed).
  LMTrainer(const models::GPT2Config& cfg, const LMTrainOptions& o, const TokenFile& tokens,
            const tokenize::Tokenizer& bpe);
  // Continues the run saved in dir. FormatError naming the state file on anything
  // inconsistent, including a corpus whose key differs from the saved one.
  static std::unique_ptr<LMTrainer> resume(const std::string& dir, const TokenFile& tokens,
                                           const tokenize::Tokenizer& bpe);
  // The same from a state file already read (`source` names it; e.g. received from rank 0
  // of a data-parallel job); writes nothing.
  static std::unique_ptr<LMTrainer> resume_from(const io::Checkpoint& state, const std::string& source,
                                                const TokenFile& tokens, const tokenize::Tokenizer& bpe);
  // After resume_from(state) of DIR's state file: rewrites DIR's model files from the
  // state's weights if a save cut short left them a save ahead (resume() does this).
  void restore_folder(const std::string& dir, const io::Checkpoint& state) const;

  bool train(const LoopCallbacks& cb = {}, std::int64_t stop_at_step = 0) { return loop_->run(cb, stop_at_step); }
  // Writes the folder described above as a whole (io::StagedFolder): DIR is replaced at
  // once by the new version. keep_other_files: files of the old DIR that the save does
  // not write (a user's README, ...) are kept; false replaces DIR entirely (--overwrite).
  void save(const std::string& dir, bool keep_other_files = true) const;
  // Files written into every save besides the model and the state: name -> bytes.
  void set_folder_files(std::map<std::string, std::string> files) { folder_files_ = std::move(files); }
  // digest64 of DIR/model.safetensors then DIR/config.json as 16 hex digits
  // ("missing <file>" if one cannot be read).
  static std::string folder_digest(const std::string& dir);

  models::GPT2LMHeadModel& model() { return *model_; }
  const Loop& loop() const { return *loop_; }
  LMTask& task() { return *task_; }
  const LMTrainOptions& options() const { return o_; }
  optim::AdamW& optimizer() { return *opt_; }

  static constexpr const char* kStateFile = "qkv_train_state.safetensors";

 private:
  LMTrainer(std::shared_ptr<models::GPT2LMHeadModel> m, const LMTrainOptions& o, const TokenFile& tokens,
            const tokenize::Tokenizer& bpe);
  LMTrainOptions o_;
  std::shared_ptr<models::GPT2LMHeadModel> model_;
  std::vector<std::int32_t> token_bytes_;
  const TokenFile& tokens_;
  std::unique_ptr<LMTask> task_;
  std::unique_ptr<optim::AdamW> opt_;
  std::unique_ptr<Loop> loop_;
  std::map<std::string, std::string> folder_files_;
};

// The loop options of a run (schedule from lr / warmup / min_lr over steps).
LoopOptions lm_loop_options(const LMTrainOptions& o);

}  // namespace qkv::train
