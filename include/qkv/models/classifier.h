// The first tutorial's TinyTextClassifier (section 8) and its toy task.
//
//   tokens I64 [B, L] -> embedding [B, L, E] -> + sinusoidal PE (interleaved sin/cos)
//   -> TransformerEncoder (num_layers post-norm ReLU blocks) [B, L, E]
//   -> pooled = x[:, 0, :] [B, E] -> classifier (Linear E -> num_classes) -> logits [B, num_classes]
//
// Parameter names are those of the PyTorch reference model (tests/reference,
// tests/nn/test_parity_training.cpp): embedding.weight, encoder.layers.{i}.*,
// classifier.{weight,bias}; a checkpoint therefore loads into PyTorch by name.
//
// The task: sequences of length 8 over tokens 1..19 (vocab 20, token 0 unused),
// label 1 iff tokens 3 and 7 both appear. Only ~11% of uniform sequences are
// positive, so the "balanced" variant draws half positives, half negatives.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/core/tensor.h"
#include "qkv/nn/layers.h"
#include "qkv/nn/positional.h"
#include "qkv/nn/transformer.h"

namespace qkv::models {

struct ClassifierOptions {
  std::int64_t vocab_size = 20;
  std::int64_t d_model = 16;
  std::int64_t num_heads = 4;
  std::int64_t d_ff = 32;
  std::int64_t num_layers = 2;
  std::int64_t num_classes = 2;
  std::int64_t max_len = 32;
  // The tutorial's blocks (and nn.TransformerEncoderLayer) default to 0.1 on the
  // attention weights and after each sublayer.
  double dropout = 0.1;
  double layer_norm_eps = 1e-5;
  DType dtype = DType::F32;
};

// {"model":"TinyTextClassifier","vocab_size":20,...}: the checkpoint's config (a JSON object as text).
std::string classifier_config_to_json(const ClassifierOptions& o);
// Reads the keys written above (missing keys keep their defaults). ValueError on malformed JSON,
// a wrong type or an invalid value (e.g. d_model % num_heads != 0).
ClassifierOptions classifier_config_from_json(const std::string& json);
// A config read from a file, checked against the tensors that came with it before any model
// is built, so a hostile config cannot make the engine allocate far more than the file holds:
// throws ValueError if it describes more parameters than `model` holds, or a positional
// table far larger than the model.
void check_classifier_config_fits(const ClassifierOptions& o, const nn::StateDict& model);

class TinyTextClassifier : public nn::Module {
 public:
  explicit TinyTextClassifier(const ClassifierOptions& o = {});
  // tokens I64 [B, L] (0 <= id < vocab_size, L <= max_len) -> logits [B, num_classes].
  // attn_weights, if non-null, receives each layer's self-attention weights [B, H, L, L].
  // Without attn_weights the last layer is evaluated for position 0 only (the pooled
  // token; the same function at a third of that layer's cost, see classifier.cpp).
  Tensor forward(const Tensor& tokens, std::vector<Tensor>* attn_weights = nullptr) const;
  const ClassifierOptions& options() const { return opt_; }

  std::shared_ptr<nn::Embedding> embedding;
  std::shared_ptr<nn::SinusoidalPositionalEncoding> pos_encoding;  // not a parameter, not saved
  std::shared_ptr<nn::TransformerEncoder> encoder;
  std::shared_ptr<nn::Linear> classifier;

 private:
  ClassifierOptions opt_;
};

// ---- the task ----

struct ClassifyDataOptions {
  std::int64_t num_samples = 200;
  std::int64_t seq_len = 8;
  std::int64_t vocab_size = 20;  // tokens are uniform in [1, vocab_size)
  bool balanced = false;         // half label 1, half label 0 (rejection sampling, then shuffled)
};

struct ClassifyData {
  Tensor tokens;  // I64 [N, L]
  Tensor labels;  // I64 [N]
};

// 1 iff tokens 3 and 7 both appear in the row.
std::int64_t classify_label(const std::int64_t* tokens, std::int64_t len);
// Draws a data set from `gen` (deterministic for a given generator state).
ClassifyData make_classify_data(const ClassifyDataOptions& o, Generator& gen);
// Fraction of rows whose prediction (argmax of logits [N, C]) equals labels [N].
double accuracy(const Tensor& logits, const Tensor& labels);
// Accuracy of always predicting the most frequent label of `labels` (the majority-class baseline).
double majority_baseline(const Tensor& labels);

}  // namespace qkv::models
