// What the architecture files share (internal header of models/arch/): the fields every
// decoder's config.json and GGUF metadata have, read into a spec; the GGUF keys every decoder
// writes; the Llama layout of tensor names that most architectures start from.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "arch.h"
#include "qkv/models/quant_mix.h"

namespace qkv::models::arch {

using json = nlohmann::json;

// How an architecture's config.json is read beyond the common fields.
struct ConfigDefaults {
  bool tie_word_embeddings = false;           // transformers' default for the config class
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::int64_t max_position_embeddings = 2048;
  // The field naming the activation and the values accepted for it (first: the default).
  const char* act_field = "hidden_act";
  std::vector<std::string> activations = {"silu"};
};

// The common fields of a decoder config.json: sizes, eps, tying, special tokens, attention_bias
// (default false), the RoPE of every layer (rope_theta + rope_scaling, or transformers 5's
// rope_parameters; partial_rotary_factor), every layer global with the default scale.
// FormatError naming `src` and the field.
DecoderSpec spec_from_config(const json& j, const std::string& src, const ConfigDefaults& d = {});

// `sliding_window` (when present and not null) as the window of every layer (Mistral, Phi-3).
void window_on_every_layer(const json& j, const std::string& src, DecoderSpec& c);

// A RoPE from a config's rope settings: `rp` is the rope_parameters / rope_scaling object (or
// null: none), `field` its name for messages; theta is the base when rp has no rope_theta.
RopeSpec rope_from_config(const json* rp, const std::string& field, double theta, std::int64_t dims,
                          const std::string& src);
// The object of config field `key` (null when absent or null; FormatError when not an object).
const json* object_field(const json& j, const char* key, const std::string& src);
// A list of floats (longrope factors, say): FormatError naming the field for anything else.
std::vector<float> float_list(const json& j, const char* key, const std::string& where);

// `layer_types` (transformers: "sliding_attention" / "full_attention" per layer), when present:
// checked against the layer count; nullopt when absent.
std::optional<std::vector<bool>> sliding_layers(const json& j, std::int64_t layers, const std::string& src);

// Which layers slide, by llama.cpp's rules: the `{arch}.attention.sliding_window_pattern` key
// (an int: layers i with i % pattern < pattern - 1 slide; or a bool per layer), else
// `default_pattern` (Gemma 2 and gpt-oss 2, Gemma 3 6). FormatError naming the file and the key.
std::vector<bool> sliding_layers_from_gguf(const io::GGUFFile& f, std::int64_t layers, std::int64_t default_pattern);
// The other way: nothing when the spec's sliding layers follow `pattern` (llama.cpp's default
// for the architecture), else a bool per layer (as llama.cpp's converter writes layer_types).
void sliding_pattern_gguf_metadata(const DecoderSpec& spec, const std::string& prefix, io::GGUFMetadata& meta,
                                   std::int64_t pattern);

// The common keys of `{arch}.*` GGUF metadata: block_count, embedding_length,
// feed_forward_length, attention.head_count(_kv), key_length, rope.dimension_count,
// context_length, attention.layer_norm_rms_epsilon, rope.freq_base, rope.scaling.*, vocab_size,
// attention.sliding_window; expert_count > 0: every layer a mixture of expert_used_count of
// expert_count experts, expert_feed_forward_length wide (else feed_forward_length), weights
// renormalised (llama.cpp's llama and qwen3moe; an architecture that does not clears it) and
// scaled by expert_weights_scale; the tokenizer's BOS and EOS ids; tied when there is no output
// tensor. The RoPE style follows the architecture's (interleaved where llama.cpp permuted q/k
// of `arch`). FormatError naming the file and the key.
DecoderSpec spec_from_gguf(const io::GGUFFile& f, const Architecture& arch);

// The experts of a mixture-of-experts config.json (every layer a mixture): the counts from
// `experts_field` (num_experts, num_local_experts) and num_experts_per_tok, each expert's width
// from `expert_ff_field`, the weights renormalised per norm_topk_prob (default `renormalize`;
// nullptr `norm_field`: always `renormalize`, as Mixtral). FormatError naming the field.
struct MoeConfig {
  const char* experts_field = "num_experts";
  const char* expert_ff_field = "moe_intermediate_size";
  const char* norm_field = "norm_topk_prob";
  bool renormalize = false;
};
void moe_from_config(const json& j, const std::string& src, const MoeConfig& m, DecoderSpec& c);
// The Qwen-MoE rule of which layers are mixtures: those not in mlp_only_layers and on the
// decoder_sparse_step (default 1: all); the others keep a dense feed-forward of intermediate_size.
void sparse_layers_from_config(const json& j, const std::string& src, DecoderSpec& c);

// The keys spec_from_gguf reads, written for `spec` under `prefix` ("llama." ...).
void write_common_gguf_metadata(const DecoderSpec& spec, const std::string& prefix, io::GGUFMetadata& meta);

// The Llama layout: embed_tokens, the layers' input_layernorm, q/k/v/o projections (and q/k/v
// biases), post_attention_layernorm (the feed-forward's norm), gate/up/down, the final norm,
// lm_head; GGUF token_embd, blk.{i}.attn_norm, attn_q/k/v/output, ffn_norm, ffn_gate/up/down,
// output_norm, output, rope_freqs; and a mixture of experts' router and experts: mlp.gate,
// mlp.experts.{e}.gate_proj / up_proj / down_proj (Qwen-MoE, OLMoE), GGUF ffn_gate_inp and the
// 3-D ffn_gate_exps / ffn_up_exps / ffn_down_exps (read when the spec has experts).
std::vector<TensorName> llama_tensor_names();
// An architecture of the Llama layout named `name` (its model_type and GGUF architecture),
// written to GGUF as `gguf_name` (q / k rows permuted when `interleaved_rope`), its spec the
// common fields of config.json (spec_from_config) and of GGUF metadata (spec_from_gguf): the
// starting point of most architecture files, which then change what differs.
Architecture llama_layout(const std::string& name, const std::string& display, const std::string& gguf_name,
                          bool interleaved_rope);
// `names` with the entry of `slot` replaced by (or, when absent, extended with) `t`.
std::vector<TensorName> with(std::vector<TensorName> names, const TensorName& t);
// `names` without the entry of `slot`.
std::vector<TensorName> without(std::vector<TensorName> names, Slot slot);

// Loads a folder or GGUF file of a decoder family (the registry's load_causal_lm of them).
LoadedCausalLM load_decoder_causal_lm(const std::string& path, const CausalLMLoadOptions& options);
// Writes one as GGUF (the registry's write_gguf of decoder families).
std::string write_decoder_gguf(const std::string& path, const std::string& out, const GgufQuant& quant,
                               const io::GGUFMetadata& tokenizer, const std::string& name);

}  // namespace qkv::models::arch
