// BERT encoder (Hugging Face BertModel without the pooler), loaded from a Hugging Face folder
// (config.json + model.safetensors), e.g. sentence-transformers/all-MiniLM-L6-v2.
//
//   ids I64 [B, T] -> word_embeddings(ids) + position_embeddings(0..T-1) + token_type_embeddings(0)
//   -> embeddings.LayerNorm -> num_hidden_layers post-norm layers:
//        a = attention.output.dense(merge(sdpa(query(x), key(x), value(x), padded keys blocked)))
//        h = attention.output.LayerNorm(x + a)
//        x = output.LayerNorm(h + output.dense(gelu_erf(intermediate.dense(h))))
//   -> last hidden state [B, T, C]
//
// Parameter names are Hugging Face's (embeddings.word_embeddings.weight,
// encoder.layer.{i}.attention.self.query.weight, ...); files may carry them with or without
// the "bert." prefix. embeddings.position_ids, pooler.* and cls.* (heads) are ignored.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/nn/layers.h"

namespace qkv::models {

struct BertConfig {
  std::int64_t vocab_size = 30522;
  std::int64_t hidden_size = 768;
  std::int64_t num_hidden_layers = 12;
  std::int64_t num_attention_heads = 12;
  std::int64_t intermediate_size = 3072;
  std::int64_t max_position_embeddings = 512;
  std::int64_t type_vocab_size = 2;
  std::int64_t pad_token_id = 0;
  double layer_norm_eps = 1e-12;
};

// config.json text -> BertConfig. `source` names the file in messages. FormatError for malformed
// JSON or a field of the wrong type; ValueError naming the field and value for unsupported values
// (hidden_act other than "gelu", position_embedding_type other than "absolute", is_decoder,
// add_cross_attention, hidden_size % num_attention_heads != 0, sizes < 1, eps <= 0).
BertConfig bert_config_from_json(const std::string& json, const std::string& source = "config.json");
// name -> shape of every tensor a model of config `c` needs (Hugging Face names, no prefix).
std::vector<std::pair<std::string, Shape>> bert_expected_tensors(const BertConfig& c);

class BertLayer;

class BertModel : public nn::Module {
 public:
  explicit BertModel(const BertConfig& c);
  // dir/config.json + dir/model.safetensors -> a model in eval mode. Every missing, unexpected
  // or wrongly shaped tensor is listed in one ValueError naming the file (checked before
  // anything is allocated for the model); IOError naming a missing file.
  static std::shared_ptr<BertModel> from_folder(const std::string& dir);

  // ids I64 [B, T] (0 <= id < vocab_size, T <= max_position_embeddings), attention_mask I64/Bool
  // [B, T] (nonzero = real token; undefined = all real) -> last hidden state [B, T, C].
  // hidden_states, if non-null, receives the embeddings' output and every layer's output
  // (num_hidden_layers + 1 tensors [B, T, C]), as transformers' output_hidden_states.
  // attentions, if non-null, receives every layer's attention weights [B, H, T, T] (softmax
  // over the keys, padded keys 0), as transformers' output_attentions.
  Tensor forward(const Tensor& ids, const Tensor& attention_mask = Tensor(),
                 std::vector<Tensor>* hidden_states = nullptr, std::vector<Tensor>* attentions = nullptr) const;
  const BertConfig& config() const { return cfg_; }
  std::shared_ptr<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<nn::LayerNorm> embeddings_norm;
  std::vector<std::shared_ptr<BertLayer>> layers;

 private:
  BertConfig cfg_;
};

// One post-norm encoder layer with Hugging Face's module tree (attention.self.{query,key,value},
// attention.output.{dense,LayerNorm}, intermediate.dense, output.{dense,LayerNorm}).
class BertLayer : public nn::Module {
 public:
  explicit BertLayer(const BertConfig& c);
  // x [B, T, C], key_mask Bool [B, 1, 1, T] or undefined -> [B, T, C]. attn_weights, if
  // non-null, receives the attention weights [B, H, T, T] (then computed by the math path).
  Tensor forward(const Tensor& x, const Tensor& key_mask, Tensor* attn_weights = nullptr) const;
  std::shared_ptr<nn::Linear> query, key, value, attn_out, intermediate, output;
  std::shared_ptr<nn::LayerNorm> attn_norm, output_norm;

 private:
  BertConfig cfg_;
};

}  // namespace qkv::models
