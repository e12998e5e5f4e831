// GPT-2: token + learned position embeddings, N pre-norm decoder blocks
// (causal self-attention, MLP 4x with GELU tanh; qkv's TransformerEncoderBlock with
// norm_first), a final LayerNorm and an LM head tied to the token embedding.
// Reads and writes Hugging Face GPT-2 folders (config.json + model.safetensors).
//
// Internal parameter names (qkv modules):        Hugging Face names (GPT2LMHeadModel):
//   wte.weight [V, C], wpe.weight [P, C]           transformer.wte.weight, transformer.wpe.weight
//   h.{i}.norm1.{weight,bias}                      transformer.h.{i}.ln_1.*
//   h.{i}.self_attn.w_{q,k,v}.{weight,bias}        transformer.h.{i}.attn.c_attn.* ([C, 3C] Conv1D,
//                                                    input-major; q, k, v are its column blocks)
//   h.{i}.self_attn.w_o.*                          transformer.h.{i}.attn.c_proj.* ([C, C] Conv1D)
//   h.{i}.norm2.*                                  transformer.h.{i}.ln_2.*
//   h.{i}.ffn.linear1.*, h.{i}.ffn.linear2.*       transformer.h.{i}.mlp.c_fc.* ([C, F]), mlp.c_proj.* ([F, C])
//   ln_f.*                                         transformer.ln_f.*
//   (lm_head.weight [V, C] only when untied)       lm_head.weight (absent when tied)
// Letters: B batch, T positions, C n_embd, H n_head, F n_inner (4C), V vocab, P n_positions.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/nn/transformer.h"

namespace qkv::models {

// The largest n_embd and n_inner qkv accepts (2^24): the products of widths stay far from overflow.
inline constexpr std::int64_t kGpt2MaxWidth = std::int64_t{1} << 24;

struct GPT2Config {
  std::int64_t vocab_size = 50257;
  std::int64_t n_positions = 1024;
  std::int64_t n_embd = 768;
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_inner = 0;  // 0: 4 * n_embd
  double layer_norm_epsilon = 1e-5;
  std::string activation_function = "gelu_new";  // gelu_new | gelu_pytorch_tanh | gelu_fast | gelu (erf)
  bool tie_word_embeddings = true;
  double dropout = 0.0;  // resid/embd/attn dropout used in training (HF's *_pdrop)
  std::optional<std::int64_t> bos_token_id, eos_token_id;

  std::int64_t d_ff() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
};

// Parses a Hugging Face GPT-2 config.json. FormatError naming `source` and the field for
// malformed JSON, a missing or mistyped field, or an unsupported value
// (model_type other than gpt2, activation_function, scale_attn_weights false,
// scale_attn_by_inverse_layer_idx, add_cross_attention, n_embd % n_head != 0, sizes < 1).
GPT2Config gpt2_config_from_json(const std::string& text, const std::string& source);
// The bytes of a model of this config's parameters (what the constructor checks against
// the memory available before allocating anything).
MemoryEstimate gpt2_memory(const GPT2Config& c);
// What the constructor checks first: sizes >= 1, n_embd % n_head == 0, widths within
// kGpt2MaxWidth (ValueError), then gpt2_memory against the memory available (ResourceError).
void check_gpt2_config(const GPT2Config& c);
// config.json as transformers writes it for GPT2LMHeadModel.
std::string gpt2_config_to_json(const GPT2Config& c);

class GPT2LMHeadModel : public nn::Module, public infer::CausalLM {
 public:
  explicit GPT2LMHeadModel(const GPT2Config& c);
  const GPT2Config& config() const { return cfg_; }

  // Full forward (training; autograd as usual): ids I64 [B, T] (T <= n_positions) -> logits [B, T, V].
  Tensor forward(const Tensor& ids) const;
  // Hidden states of the full forward: out[0] = embeddings, out[i] = after block i, and the
  // last entry after ln_f (as transformers' output_hidden_states).
  std::vector<Tensor> hidden_states(const Tensor& ids) const;

  // infer::CausalLM
  std::int64_t vocab_size() const override { return cfg_.vocab_size; }
  std::int64_t max_positions() const override { return cfg_.n_positions; }
  std::vector<std::pair<std::string, std::int64_t>> sizes() const override {
    return {{"layers", cfg_.n_layer}, {"d_model", cfg_.n_embd}, {"heads", cfg_.n_head}, {"vocab", cfg_.vocab_size}};
  }
  infer::KVCacheOptions cache_options(std::int64_t batch, std::int64_t max_len) const override;
  Tensor forward_cached(const Tensor& ids, const std::vector<std::int64_t>& n_new, infer::KVCache& cache,
                        bool all_logits = false) const override;

  // The LM head's weight: wte when tied, else lm_head.
  const Tensor& lm_head_weight() const;

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::vector<std::shared_ptr<nn::TransformerEncoderBlock>> h;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> lm_head;  // null when tied

 private:
  Tensor embed(const Tensor& ids, const Tensor& positions) const;
  Tensor logits(const Tensor& x) const;
  GPT2Config cfg_;
};

// GPT-2's initialisation (transformers' GPT2PreTrainedModel._init_weights): every weight
// matrix and embedding ~ N(0, 0.02^2), the residual projections (attn.c_proj, mlp.c_proj)
// ~ N(0, (0.02 / sqrt(2 n_layer))^2), biases 0, LayerNorm weights 1. Values drawn from
// Generator(seed), parameter by parameter in named_parameters() order.
void init_gpt2_weights(GPT2LMHeadModel& model, std::uint64_t seed);

// Loads a Hugging Face GPT-2 folder: DIR/config.json and DIR/model.safetensors (names with
// or without the "transformer." prefix; attn.bias / attn.masked_bias buffers ignored; F16 and
// BF16 converted to float32). Every missing, unexpected or wrongly shaped tensor is listed
// in one FormatError naming the file. IOError if a file is missing.
std::shared_ptr<GPT2LMHeadModel> load_gpt2(const std::string& dir);
// The same from already-read parts (`source` names them in errors).
void load_gpt2_weights(GPT2LMHeadModel& model, const std::string& safetensors_path);
// Writes DIR/config.json and DIR/model.safetensors in Hugging Face's layout (transformer.*
// names, Conv1D [in, out] weights, fused c_attn, no lm_head.weight when tied, metadata
// format "pt"), each atomically; creates DIR if needed. transformers'
// GPT2LMHeadModel.from_pretrained(DIR) loads it.
void save_gpt2(const GPT2LMHeadModel& model, const std::string& dir);

}  // namespace qkv::models
