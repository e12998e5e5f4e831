// The Llama family of decoder-only language models: Llama (1-3), Mistral and Qwen2 (REFERENCES:
// transformers' LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM; llama.cpp's GGUF files).
//
// Per token x [C] (C hidden_size), for each of the L layers:
//   h = RMSNorm(x) * attn_norm
//   q = h Wq^T (+ bq)  [H, D];  k = h Wk^T (+ bk), v = h Wv^T (+ bv)  [H_kv, D]   (biases: Qwen2)
//   q, k rotated by RoPE at the token's position (kernels/rope.h)
//   o = softmax(q k^T / sqrt(D)) v over the sequence's keys so far (grouped-query: query head h
//       reads key/value head h / (H / H_kv); Mistral's sliding window: only the last W keys)
//   x = x + o Wo^T
//   x = x + Wdown^T (silu(RMSNorm(x) Wgate^T) * (RMSNorm(x) Wup^T))
// then logits = RMSNorm(x) * norm @ lm_head^T (lm_head = embed_tokens when tied).
//
// Letters (docs/shapes.md): C hidden_size, F intermediate_size, H query heads, H_kv key/value
// heads, D head_dim, V vocab_size, L layers.
//
// Weight names (Hugging Face folder)              GGUF (llama.cpp)
//   model.embed_tokens.weight [V, C]              token_embd.weight
//   model.layers.{i}.input_layernorm.weight [C]   blk.{i}.attn_norm.weight
//   model.layers.{i}.self_attn.q_proj.* [H D, C]  blk.{i}.attn_q.*   (rows permuted for RoPE's
//   model.layers.{i}.self_attn.k_proj.* [H_kv D, C]blk.{i}.attn_k.*    adjacent pairs in
//   model.layers.{i}.self_attn.v_proj.* [H_kv D, C]blk.{i}.attn_v.*    architecture llama)
//   model.layers.{i}.self_attn.o_proj.weight      blk.{i}.attn_output.weight
//   model.layers.{i}.post_attention_layernorm.w.  blk.{i}.ffn_norm.weight
//   model.layers.{i}.mlp.{gate,up,down}_proj.w.   blk.{i}.ffn_{gate,up,down}.weight
//   model.norm.weight [C]                         output_norm.weight
//   lm_head.weight [V, C] (absent when tied)      output.weight (absent when tied)
//                                                 rope_freqs.weight [D/2] (llama3 scaling, optional)
//
// The weights are used where they lie: a GGUF file's and a safetensors file's bytes are mapped,
// and the products read them in their stored type (F32, F16, BF16 and the GGML block types,
// kernels/qgemm.h) with float32 activations. Nothing is initialised, drawn or copied to load
// a model but the small norm and bias vectors (converted to float32).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/kernels/rope.h"

namespace qkv::io {
class GGUFFile;
class MappedFile;
}

namespace qkv::models {

struct LlamaConfig {
  std::string model_type = "llama";  // llama | mistral | qwen2
  std::int64_t vocab_size = 32000;
  std::int64_t hidden_size = 4096;
  std::int64_t intermediate_size = 11008;
  std::int64_t num_hidden_layers = 32;
  std::int64_t num_attention_heads = 32;
  std::int64_t num_key_value_heads = 32;
  std::int64_t head_dim = 128;
  std::int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  kernels::RopeScaling rope_scaling;
  std::int64_t rope_dim = 128;  // rotated dims per head (head_dim unless partial)
  kernels::RopeStyle rope_style = kernels::RopeStyle::Half;
  bool attention_bias = false;  // q/k/v projections with biases (Qwen2)
  bool tie_word_embeddings = false;
  std::int64_t sliding_window = 0;  // W >= 1: a query sees only the last W positions; 0: no window
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;
};

// Parses a Hugging Face config.json of LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM
// (model_type llama, mistral, qwen2; rope settings as `rope_theta` + `rope_scaling` or as
// transformers 5's `rope_parameters`). FormatError naming `source` and the field for malformed
// JSON, a missing or mistyped field or an unsupported value (another model_type or hidden_act,
// rope_type yarn / dynamic / ..., mlp_bias, Qwen2's use_sliding_window).
LlamaConfig llama_config_from_json(const std::string& text, const std::string& source);
// The config from a GGUF file's metadata (general.architecture llama, mistral or qwen2 and its
// `{arch}.*` keys). FormatError naming the file and the key.
LlamaConfig llama_config_from_gguf(const io::GGUFFile& f);
// What the model checks before using a config: sizes >= 1, heads dividing, head_dim and
// rope_dim even, rope settings valid (ValueError naming the field and value).
void check_llama_config(const LlamaConfig& c);
// config.json as transformers writes it (rope settings as rope_parameters).
std::string llama_config_to_json(const LlamaConfig& c);

// One linear layer's weight [N, K] viewed in place, and its bias [N] (float32) or null.
struct LlamaLinear {
  kernels::QMatrix w;
  const float* bias = nullptr;
};

struct LlamaLayer {
  const float* attn_norm = nullptr;  // [C]
  LlamaLinear q, k, v, o;
  const float* ffn_norm = nullptr;   // [C]
  LlamaLinear gate, up, down;
};

// The weights of a model and what keeps their memory alive (file mappings, owned buffers).
struct LlamaWeights {
  kernels::QMatrix embed;    // [V, C]
  std::vector<LlamaLayer> layers;
  const float* norm = nullptr;  // [C]
  kernels::QMatrix lm_head;  // [V, C] (embed when tied)
  std::vector<float> rope_freq_factors;  // [rope_dim/2] divisors of inv_freq (GGUF rope_freqs), or empty
  std::vector<std::shared_ptr<const void>> keep_alive;
  // The file mapping the matrices view (a GGUF file), or null: the pages of matrices copied to
  // their decode layout are given back to the system (a later read maps them from the file again).
  std::shared_ptr<const io::MappedFile> mapping;
};

class LlamaForCausalLM : public infer::CausalLM {
 public:
  // Checks the config and every weight's type and shape against it (FormatError naming the
  // weight). The weights' memory must stay valid while the model lives (keep_alive).
  LlamaForCausalLM(LlamaConfig config, LlamaWeights weights);
  const LlamaConfig& config() const { return cfg_; }
  const LlamaWeights& weights() const { return w_; }
  // Bytes of the weights the products read per token (every matrix once), for bandwidth bounds.
  std::int64_t weight_bytes() const;
  // How activations meet quantized weights (kernels/qgemm.h): F32 (exact, the default) or Q8.
  // Q8 also copies the Q4_0 / Q4_1 / Q8_0 matrices into their decode layout where the CPU's
  // kernels read it (kernels::qgemm_repack_rows8: a decode step then reads memory in order; the
  // same bits), all of them in one buffer in the order a step reads them, and gives the file's pages of those matrices back (the resident set stays about
  // the weights' size); F32 frees the copies. Call it before the model computes, not meanwhile.
  void set_activations(kernels::QActivations a);
  kernels::QActivations activations() const { return act_; }
  // Bytes of the matrices held in their decode layout (0 unless Q8 activations on such a CPU).
  std::int64_t decode_layout_bytes() const;

  // infer::CausalLM
  std::int64_t vocab_size() const override { return cfg_.vocab_size; }
  std::int64_t max_positions() const override { return cfg_.max_position_embeddings; }
  infer::KVCacheOptions cache_options(std::int64_t batch, std::int64_t max_len) const override;
  // The sequences' new tokens are computed together as rows of one matrix (no padding); a
  // sequence with few new tokens attends through the decode kernel, a longer one through the
  // tiled FlashAttention kernel, both reading the cache's shared key/value heads in place. When
  // no sequence has more than kernels::qgemm_decode_max_m() new tokens (a decode step), each
  // sequence's logits are bitwise those it gets alone, whatever the other rows (continuous
  // batching: infer/scheduler.h).
  Tensor forward_cached(const Tensor& ids, const std::vector<std::int64_t>& n_new, infer::KVCache& cache,
                        bool all_logits = false) const override;

 private:
  LlamaConfig cfg_;
  LlamaWeights w_;
  std::vector<float> inv_freq_;  // [rope_dim / 2]
  kernels::QActivations act_ = kernels::QActivations::F32;
  // The decode layouts set_activations made (QMatrix::rows8 of w_'s matrices point into them).
  struct Rows8Buffer {
    void* p = nullptr;
    std::size_t n = 0;
    explicit Rows8Buffer(std::size_t bytes);
    ~Rows8Buffer();
    Rows8Buffer(const Rows8Buffer&) = delete;
    Rows8Buffer& operator=(const Rows8Buffer&) = delete;
  };
  std::vector<std::unique_ptr<Rows8Buffer>> rows8_;
  std::vector<kernels::QMatrix*> matrices();
};

// Loads a Llama-family model from a Hugging Face folder (config.json + model.safetensors or a
// sharded model.safetensors.index.json) or a GGUF file (architectures llama, mistral, qwen2).
// IOError / FormatError naming the file and the weight: missing, unexpected or wrongly shaped
// tensors are listed together; an unsupported architecture or tensor type is named.
std::shared_ptr<LlamaForCausalLM> load_llama(const std::string& path);
std::shared_ptr<LlamaForCausalLM> load_llama_gguf(std::shared_ptr<const io::GGUFFile> file);

// True when DIR/config.json names a Llama-family model_type (llama, mistral, qwen2).
bool is_llama_folder(const std::string& dir);

}  // namespace qkv::models
