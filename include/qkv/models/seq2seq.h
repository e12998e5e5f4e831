// Seq2Seq: an encoder-decoder Transformer (decoder blocks with cross-attention)
// and the toy sequence tasks it is trained on (reverse, copy, sort of digit
// strings), with teacher-forced training, greedy decoding and exact-sequence
// accuracy on a held-out set disjoint from the training set.
//
// Tokens: <pad> = 0, <bos> = 1, <eos> = 2, digits 0..9 = 3..12 (vocab 13).
//   source          d_1 .. d_L <eos> <pad>...            [B, S]   S = max L + 1
//   decoder input   <bos> t_1 .. t_L <pad>...             [B, T]   T = max L + 1
//   decoder target  t_1 .. t_L <eos> -100...              [B, T]   (-100 = ignore_index)
// Encoder self-attention and decoder cross-attention block <pad> keys
// (Mask::padding); decoder self-attention is causal, so real positions never
// see the trailing pads.
//
// Parameter names (dotted, PyTorch style): src_embed.weight, tgt_embed.weight,
// [pos.pe.weight if learned], encoder.layers.{i}.self_attn.w_q.weight, ...,
// decoder.layers.{i}.cross_attn.w_k.weight, ..., generator.weight/bias.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/infer/causal_lm.h"
#include "qkv/io/checkpoint.h"
#include "qkv/nn/positional.h"
#include "qkv/nn/transformer.h"

namespace qkv::models {

// ---- tokens ----
inline constexpr std::int64_t kSeq2SeqPad = 0, kSeq2SeqBos = 1, kSeq2SeqEos = 2, kSeq2SeqFirstDigit = 3;
inline constexpr std::int64_t kSeq2SeqNumDigits = 10;
inline constexpr std::int64_t kSeq2SeqVocab = kSeq2SeqFirstDigit + kSeq2SeqNumDigits;  // 13
// "<pad>", "<bos>", "<eos>", "0".."9"; "<unk:N>" otherwise.
std::string seq2seq_token_label(std::int64_t id);

// ---- tasks and data ----
enum class Seq2SeqTask { Reverse, Copy, Sort };
const char* seq2seq_task_name(Seq2SeqTask t);
// "reverse" | "copy" | "sort", else ValueError listing them.
Seq2SeqTask parse_seq2seq_task(const std::string& s);

// One example as digit values 0..9 (not token ids).
struct Seq2SeqExample {
  std::vector<std::int64_t> input, target;
};
// reverse: input reversed; copy: input; sort: ascending.
std::vector<std::int64_t> seq2seq_target(Seq2SeqTask task, const std::vector<std::int64_t>& input);

struct Seq2SeqDataOptions {
  Seq2SeqTask task = Seq2SeqTask::Reverse;
  std::int64_t min_len = 1;
  std::int64_t max_len = 10;
  std::int64_t train_size = 10000;
  std::int64_t test_size = 1000;
  std::uint64_t seed = 0;
};

// A training set and a held-out set: lengths uniform in [min_len, max_len],
// digits uniform. The held-out set is drawn first and every training sequence
// that appears in it is redrawn, so the two are disjoint (the held-out set
// takes at most a tenth of all sequences of any one length, so every length
// still appears in training). Sequences inside a set may repeat.
struct Seq2SeqData {
  std::vector<Seq2SeqExample> train, test;
};
Seq2SeqData make_seq2seq_data(const Seq2SeqDataOptions& o);

// Token-id tensors for a batch of examples (see the layout at the top).
struct Seq2SeqBatch {
  Tensor src;      // I64 [B, S]
  Tensor tgt_in;   // I64 [B, T]
  Tensor tgt_out;  // I64 [B, T], -100 at padding
};
Seq2SeqBatch make_seq2seq_batch(const std::vector<Seq2SeqExample>& examples);
// Source ids only (digits + <eos>, padded): I64 [B, S].
Tensor make_seq2seq_source(const std::vector<std::vector<std::int64_t>>& inputs);

// ---- model ----
struct Seq2SeqOptions {
  std::int64_t vocab_size = kSeq2SeqVocab;
  std::int64_t d_model = 64;
  std::int64_t num_heads = 4;
  std::int64_t num_encoder_layers = 2;
  std::int64_t num_decoder_layers = 2;
  std::int64_t d_ff = 128;
  double dropout = 0.0;
  std::int64_t max_positions = 32;   // positional table length; sequences (+1 special) must fit
  bool norm_first = true;            // pre-norm blocks with a final LayerNorm per stack
  bool learned_positions = false;    // false: sinusoidal table; true: `pos.pe.weight`
  nn::Activation activation = nn::Activation::ReLU;

  // A JSON object with the fields above (activation as "relu"/"gelu"/"gelu_tanh").
  std::string to_json() const;
  // Missing fields keep their defaults; an unknown field, a wrong type or an
  // invalid value is a ValueError naming it.
  static Seq2SeqOptions from_json(const std::string& json);
  bool operator==(const Seq2SeqOptions&) const = default;
};

class Seq2Seq : public nn::Module {
 public:
  explicit Seq2Seq(const Seq2SeqOptions& o);

  // src I64 [B, S] -> memory [B, S, E]. weights: per layer [B, H, S, S].
  Tensor encode(const Tensor& src, std::vector<Tensor>* self_weights = nullptr) const;
  // tgt_in I64 [B, T], memory [B, S, E], src I64 [B, S] (for its padding mask) -> logits [B, T, V].
  Tensor decode(const Tensor& tgt_in, const Tensor& memory, const Tensor& src,
                std::vector<Tensor>* self_weights = nullptr, std::vector<Tensor>* cross_weights = nullptr) const;
  // Teacher-forced logits [B, T, V].
  Tensor forward(const Tensor& src, const Tensor& tgt_in) const;
  // Mean cross-entropy over non-padding target positions (rank 0).
  Tensor loss(const Seq2SeqBatch& batch) const;

  // Greedy decoding (no gradient; uses the current train/eval mode, so call
  // eval() first): starts from <bos>, appends the argmax token, stops a row at
  // <eos> or after max_new_tokens. Returns each row's token ids without <bos>
  // and without the final <eos> (a row that never produced <eos> ends with -1).
  // Runs infer::generate over Seq2SeqDecoderLM: one decoder step per token
  // through the KV cache.
  std::vector<std::vector<std::int64_t>> greedy_decode(const Tensor& src, std::int64_t max_new_tokens) const;

  const Seq2SeqOptions& options() const { return opt_; }

  std::shared_ptr<nn::Embedding> src_embed, tgt_embed;
  std::shared_ptr<nn::SinusoidalPositionalEncoding> sin_pos;  // not a parameter; null if learned
  std::shared_ptr<nn::LearnedPositionalEncoding> pos;         // null unless learned_positions
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::TransformerDecoder> decoder;
  std::shared_ptr<nn::Linear> generator;

 private:
  Tensor add_positions(const Tensor& x) const;
  Seq2SeqOptions opt_;
};

// The decoder of a Seq2Seq over one batch of sources as generation sees it
// (infer::CausalLM): the memory is encoded once at construction; each step runs the
// decoder's self-attention through the KV cache (new positions continue each
// sequence) and cross-attention over the memory with the sources' padding masked.
// Logits are the generator's. Keeps references: `model` and `src` must outlive it.
class Seq2SeqDecoderLM : public infer::CausalLM {
 public:
  // src I64 [B, S]
  Seq2SeqDecoderLM(const Seq2Seq& model, const Tensor& src);
  std::int64_t vocab_size() const override;
  std::int64_t max_positions() const override;
  infer::KVCacheOptions cache_options(std::int64_t batch, std::int64_t max_len) const override;
  Tensor forward_cached(const Tensor& ids, const std::vector<std::int64_t>& n_new, infer::KVCache& cache,
                        bool all_logits = false) const override;

 private:
  const Seq2Seq& m_;
  Tensor src_, memory_;
};

// Greedy-decodes every example (in batches of `batch`, model in eval mode for
// the call) and returns the fraction whose output equals the target exactly
// (same length, same digits, <eos> produced). predictions (optional) receives
// the decoded digit values per example.
double seq2seq_exact_accuracy(Seq2Seq& model, const std::vector<Seq2SeqExample>& examples, std::int64_t batch = 500,
                              std::vector<std::vector<std::int64_t>>* predictions = nullptr);

// A config read from a checkpoint, checked against its tensors before any model is
// built (a hostile config cannot make it allocate far more than the file holds):
// ValueError if it describes more parameters than `sd` holds, or a sinusoidal table
// far larger than the model.
void check_seq2seq_config_fits(const Seq2SeqOptions& o, const nn::StateDict& sd);

// Parses an input like "3 1 4 1 5" or "31415" into digit values; ValueError otherwise.
std::vector<std::int64_t> parse_seq2seq_input(const std::string& s);
// Rebuilds a Seq2Seq from a checkpoint (model_type "seq2seq"); ValueError otherwise.
std::shared_ptr<Seq2Seq> seq2seq_from_checkpoint(const io::Checkpoint& ckpt);

}  // namespace qkv::models
