// Sentence embeddings as sentence-transformers computes them: the tokenizer's ids -> BERT ->
// pooling over the attention mask (1_Pooling/config.json) -> L2 normalisation (when
// modules.json lists sentence_transformers.models.Normalize).
//
// Texts are sorted by token length (longest first) and cut into batches, which BertRunner runs
// without padding (the batch's tokens end to end, attention within each sentence): a sentence's
// embedding is bitwise the same in any batch, and results come back in input order.
//
// Thread safety: a SentenceEmbedder (tokenizer and model shared, read-only) may serve embed()
// calls from several threads at once; each call's batches and activations are its own, and a
// request's embeddings are bitwise those it gets alone.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/infer/bert_runner.h"
#include "qkv/models/bert.h"
#include "qkv/tokenize/tokenizer.h"

namespace qkv::infer {

enum class Pooling { Mean, Cls };

struct PoolingConfig {
  Pooling mode = Pooling::Mean;
  bool normalize = true;
  std::int64_t dimension = 0;  // word_embedding_dimension; 0 = unchecked
};

// dir/modules.json and its Pooling module's config.json -> PoolingConfig. Without modules.json:
// mean pooling, no normalisation (sentence-transformers' default for a bare transformer folder).
// ValueError naming the file and key for an unsupported module or pooling mode.
PoolingConfig read_pooling_config(const std::string& dir);

// hidden [B, T, C] float, attention_mask I64 [B, T] (1 real, 0 pad) -> [B, C] float32:
// sum over real tokens / max(count, 1e-9) (Mean) or the first token (Cls).
Tensor pool(const Tensor& hidden, const Tensor& attention_mask, Pooling mode);
// x [N, C] -> x / max(||x||_2, 1e-12) per row (torch.nn.functional.normalize).
Tensor l2_normalize(const Tensor& x);

struct EmbedOptions {
  std::int64_t batch_size = 32;  // >= 1
  // Called after each batch with (texts done, total).
  std::function<void(std::int64_t, std::int64_t)> progress;
};

class SentenceEmbedder {
 public:
  SentenceEmbedder(std::shared_ptr<const tokenize::Tokenizer> tok, std::shared_ptr<const models::BertModel> model,
                   const PoolingConfig& pooling);
  // Tokenizer, model and pooling of a sentence-transformers folder (see the from_folder functions).
  static SentenceEmbedder from_folder(const std::string& dir);

  // texts -> embeddings F32 [N, C] in input order (N = 0 gives [0, C]). ValueError for batch_size < 1
  // or a text that is not valid UTF-8 (naming its index).
  Tensor embed(const std::vector<std::string>& texts, const EmbedOptions& o = {}) const;
  // Already tokenized rows ([CLS] ... [SEP]) -> embeddings [N, C] in input order.
  Tensor embed_ids(const std::vector<std::vector<std::int64_t>>& rows, const EmbedOptions& o = {}) const;

  const tokenize::Tokenizer& tokenizer() const { return *tok_; }
  const models::BertModel& model() const { return *model_; }
  const BertRunner& runner() const { return *runner_; }
  const PoolingConfig& pooling() const { return pooling_; }
  std::int64_t dimension() const { return model_->config().hidden_size; }

 private:
  std::shared_ptr<const tokenize::Tokenizer> tok_;
  std::shared_ptr<const models::BertModel> model_;
  std::shared_ptr<const BertRunner> runner_;
  PoolingConfig pooling_;
};

// path -> its lines (split on '\n'; a trailing '\r' dropped; the last newline optional; empty lines
// kept). IOError if unreadable; FormatError naming path:line and the byte for invalid UTF-8, and
// for an empty file.
std::vector<std::string> read_text_lines(const std::string& path);

// Cosine similarities of rows: a [N, C], b [M, C] -> [N, M] (float64 accumulation).
Tensor cosine_similarity_matrix(const Tensor& a, const Tensor& b);

}  // namespace qkv::infer
