// The one decoder-only language model of qkv: every architecture of the registry (models/
// registry.h: Llama, Mistral, Qwen2, Qwen3, Qwen3.5, Gemma 2 and 3, Phi-3, SmolLM3, ...) is this network,
// described by data (DecoderSpec) and run by one step function (src/models/decoder/).
//
// Per token x [C] (C hidden_size), x = embed(token) * embed_scale, then for each layer l:
//   h = RMSNorm(x) * attn_norm
//   q = h Wq^T (+ bq) [H, D];  k = h Wk^T (+ bk), v = h Wv^T (+ bv)  [H_kv, D]
//   q, k = RMSNorm per head * q_norm, k_norm          (qk_norm: Qwen3, Gemma 3), or over all
//          heads of q and of k at once                 (qk_norm_whole: OLMoE)
//   q, k rotated by the layer's RoPE at the token's position (none: SmolLM3's NoPE layers)
//   s = scale * q k^T over the sequence's keys so far; s = cap * tanh(s / cap) (soft-capping,
//       Gemma 2); only the last W keys with a sliding window; o = softmax(s) v (grouped-query:
//       query head h reads key/value head h / (H / H_kv)); with attention sinks (gpt-oss) head
//       h's softmax has one more logit, sink[h], in its denominator (kernels/attention.h)
//   with an output gate (Qwen3.5) q_proj gives each head's query and a gate g, and o = o * sigmoid(g)
//   a = o Wo^T (+ bo);  x = x + a, or x = x + RMSNorm(a) * post_attn_norm   (Gemma 2 and 3)
//   or, in a Gated DeltaNet layer (Qwen3.5's linear attention: LinearAttnSpec below), a is the
//     output of the gated delta rule over a recurrent state of fixed size instead of a softmax
//     over the cache's keys (kernels/gated_delta.h): the cache keeps that state for the layer
//   h = RMSNorm(x) * ffn_norm
//   f = Wdown^T (act(h Wgate^T) * (h Wup^T)), act = SiLU or GELU (tanh)
//     or, in a mixture-of-experts layer (Mixtral, Qwen3-MoE, OLMoE, gpt-oss): p = route(h Wrouter^T
//     (+ br)) picks k of E experts with weights (kernels/moe.h), f = sum over them of p_e *
//     expert_e(h), each expert a gated feed-forward of its own (F_e wide, with biases in gpt-oss,
//     whose experts' activation is the clamped SwiGLU: g = min(g, limit), u = clamp(u, -limit,
//     limit), (u + 1) * g * sigmoid(alpha g)); only the chosen experts' weights are read; with a
//     shared expert (Qwen2-MoE), f += sigmoid(h . w_sg) * shared(h), a gated feed-forward every
//     token runs
//   x = x + f, or x = x + RMSNorm(f) * post_ffn_norm
// then logits = RMSNorm(x) * norm @ lm_head^T (lm_head = the embedding when tied), and
// logits = cap * tanh(logits / cap) with a final soft-cap (Gemma 2).
//
// Every norm weight is the one applied: an architecture whose files store w for a norm computed
// with (1 + w) (Gemma) has 1 added when its weights are read (GGUF files store 1 + w already).
//
// Letters (docs/shapes.md): C hidden_size, F intermediate_size, H query heads, H_kv key/value
// heads, D head_dim, V vocab_size, L layers, R rotated dims per head.
//
// The weights are used where they lie: a GGUF file's and a safetensors file's bytes are mapped,
// and the products read them in their stored type (F32, F16, BF16 and the GGML block types,
// kernels/qgemm.h) with float32 activations. Nothing is initialised, drawn or copied to load a
// model but the small norm and bias vectors (converted to float32).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/infer/causal_lm.h"
#include "qkv/kernels/moe.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/kernels/rope.h"

namespace qkv::io {
class MappedFile;
}

namespace qkv::models {

// How a layer rotates its queries and keys (kernels/rope.h).
struct RopeSpec {
  double theta = 10000.0;
  kernels::RopeScaling scaling;
  std::int64_t dims = 0;  // R: rotated dims per head (even, <= head_dim; partial rotary below it)
  kernels::RopeStyle style = kernels::RopeStyle::Half;
  // Divisors of inv_freq (llama.cpp's rope_freqs tensor of llama3-scaled GGUF files): [R/2] or empty.
  std::vector<float> freq_factors;
};

enum class FfnActivation { SiLU, GeluTanh };

// The most layers a spec may have (the largest open models have ~130): configs and GGUF files
// asking for more are refused before the per-layer specs are allocated.
inline constexpr std::int64_t kMaxDecoderLayers = std::int64_t{1} << 16;

// What mixes a layer's tokens: softmax attention over the KV cache, or Gated DeltaNet linear
// attention over a recurrent state (Qwen3.5; kernels/gated_delta.h, DecoderSpec::linear).
enum class Mixer { Attention, GatedDeltaNet };

struct LayerSpec {
  Mixer mixer = Mixer::Attention;
  int rope = 0;               // index into DecoderSpec::ropes; -1: no RoPE in this layer (NoPE)
  std::int64_t window = 0;    // sliding window W >= 1 (a query at t sees keys t - W < j <= t); 0: global
  float attn_scale = 0.f;     // scale of the scores; 0: 1 / sqrt(head_dim)
  float attn_softcap = 0.f;   // cap of the scores (cap * tanh(s / cap)); 0: none
  bool qk_norm = false;       // RMSNorm over each head of q and k (before RoPE)
  bool qk_norm_whole = false; // with qk_norm: over all of q [H*D] and all of k [H_kv*D] at once (OLMoE)
  bool moe = false;           // the feed-forward is DecoderSpec::moe's mixture of experts
  bool post_attn_norm = false;  // RMSNorm of the attention's output before the residual add
  bool post_ffn_norm = false;   // RMSNorm of the feed-forward's output before the residual add
  // The attention's output is gated per element: q_proj has 2 H D rows, head h's query and gate
  // interleaved ([q_h (D), gate_h (D)] per head), and o = o * sigmoid(gate) before o_proj (Qwen3.5).
  bool attn_output_gate = false;
};

// The Gated DeltaNet layers of a spec (LayerSpec::mixer): per token, x = h Wqkv^T [2 Hk Dk + Hv Dv]
// goes through a causal depthwise convolution of K taps and SiLU, splits into q, k [Hk, Dk] and v
// [Hv, Dv]; z = h Wz^T [Hv, Dv], beta = sigmoid(h Wb^T) [Hv], g = A * softplus(h Wa^T + dt_bias)
// [Hv] (A = -exp(A_log) < 0); the gated delta rule gives o [Hv, Dv] (kernels/gated_delta.h), then
// o = RMSNorm(o) * norm * silu(z) per value head (its own weight [Dv], no offset), and out_proj
// [C, Hv Dv] (the layer's output, added to x like the attention's).
struct LinearAttnSpec {
  std::int64_t key_heads = 0, value_heads = 0;  // Hk (dividing Hv), Hv
  std::int64_t key_dim = 0, value_dim = 0;      // Dk, Dv
  std::int64_t conv_kernel = 0;                 // K taps
  // The value heads' order in the weights: tiled (value head h reads key head h % Hk; llama.cpp's
  // GGUF files) or grouped (h / (Hv / Hk); Hugging Face's).
  bool tiled = false;
  std::int64_t conv_channels() const { return 2 * key_heads * key_dim + value_heads * value_dim; }
  // Floats of one sequence's state in one layer: the convolution's last K - 1 inputs, then the
  // delta rule's [Hv, Dk, Dv] matrices.
  std::int64_t state_floats() const { return (conv_kernel - 1) * conv_channels() + value_heads * key_dim * value_dim; }
};

// A mixture-of-experts feed-forward (the layers with LayerSpec::moe): a router [E, C] scores the
// experts, kernels::moe_route picks k and weights them, each chosen expert is a gated feed-forward
// (the spec's activation) of width expert_ff.
struct MoeSpec {
  std::int64_t experts = 0;    // E
  std::int64_t top_k = 0;      // k experts per token
  std::int64_t expert_ff = 0;  // F_e: each expert's intermediate size
  kernels::MoeRouting routing;
  bool router_bias = false;  // the router has a bias [E] (gpt-oss)
  bool expert_bias = false;  // each expert's gate, up and down products have biases (gpt-oss)
  // > 0: the experts' activation is gpt-oss's clamped SwiGLU with this limit and swiglu_alpha
  // (the spec's activation otherwise).
  float swiglu_limit = 0.f;
  float swiglu_alpha = 1.702f;
  // > 0: a shared expert of this width beside the routed ones (Qwen2-MoE): every token runs it,
  // its output weighed by sigmoid(h . shared_expert_gate) and added after the routed experts'.
  std::int64_t shared_ff = 0;
};

// The most experts a layer may have (published models have up to 512).
inline constexpr std::int64_t kMaxExperts = 4096;

struct DecoderSpec {
  std::string arch;        // the registry's name of the architecture ("llama", "qwen3", ...)
  std::string model_type;  // the Hugging Face model_type it was read as ("mistral" for arch llama, say)
  std::int64_t vocab_size = 0, hidden_size = 0, intermediate_size = 0;
  std::int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  std::int64_t max_positions = 2048;  // max_position_embeddings
  double norm_eps = 1e-6;             // of every RMSNorm
  bool attention_bias = false;        // q/k/v projections with biases (Qwen2)
  bool attention_out_bias = false;    // the output projection with a bias (gpt-oss)
  bool attention_sinks = false;       // a learned sink logit per query head in every layer (gpt-oss)
  FfnActivation activation = FfnActivation::SiLU;
  float embed_scale = 1.f;     // the embedding rows are multiplied by it (Gemma: sqrt(C))
  float final_softcap = 0.f;   // cap of the logits (cap * tanh(l / cap)); 0: none
  bool tied = false;           // lm_head is the embedding
  MoeSpec moe;                 // the experts of the layers with LayerSpec::moe
  LinearAttnSpec linear;       // the Gated DeltaNet of the layers whose mixer it is
  std::vector<RopeSpec> ropes;
  std::vector<LayerSpec> layers;  // L
  std::optional<std::int64_t> bos_token_id;
  std::vector<std::int64_t> eos_token_ids;

  std::int64_t num_layers() const { return static_cast<std::int64_t>(layers.size()); }
};

// What the model checks before using a spec: sizes in [1, 2^24], heads dividing, every layer's
// RoPE index valid and its dims even and <= head_dim, the rope settings valid, windows >= 0, eps,
// scales and caps finite and >= 0. ValueError naming the field and value.
void check_decoder_spec(const DecoderSpec& s);

// One linear layer's weight [N, K] viewed in place, and its bias [N] (float32) or null.
struct DecoderLinear {
  kernels::QMatrix w;
  const float* bias = nullptr;
};

struct DecoderLayerWeights {
  const float* attn_norm = nullptr;       // [C]
  DecoderLinear q, k, v, o;
  const float* sinks = nullptr;           // [H] (attention_sinks)
  const float* q_norm = nullptr;          // [D] (qk_norm)
  const float* k_norm = nullptr;          // [D]
  const float* post_attn_norm = nullptr;  // [C] (post_attn_norm)
  const float* ffn_norm = nullptr;        // [C]
  DecoderLinear gate, up, down;
  const float* post_ffn_norm = nullptr;   // [C] (post_ffn_norm)
  // A mixture-of-experts layer (LayerSpec::moe) has these instead of gate, up and down: the
  // router [E, C] and, per expert, gate and up [F_e, C] and down [C, F_e] (views of a GGUF file's
  // 3-D ffn_*_exps tensors, or a folder's tensors of each expert).
  DecoderLinear router;
  std::vector<kernels::QMatrix> expert_gate, expert_up, expert_down;
  // With MoeSpec::expert_bias: the experts' biases, [E, F_e], [E, F_e] and [E, C] (row e expert e's).
  const float* expert_gate_bias = nullptr;
  const float* expert_up_bias = nullptr;
  const float* expert_down_bias = nullptr;
  // With MoeSpec::shared_ff: the shared expert's gate / up [F_s, C] and down [C, F_s] (gate_proj,
  // up_proj, down_proj of its feed-forward), and the weight [C] of its sigmoid gate.
  DecoderLinear shared_gate, shared_up, shared_down;
  const float* shared_expert_gate = nullptr;
  // A Gated DeltaNet layer (LayerSpec::mixer) has these instead of q, k, v, o and their norms:
  // in_proj_qkv [2 Hk Dk + Hv Dv, C], in_proj_z [Hv Dv, C], in_proj_b and in_proj_a [Hv, C],
  // out_proj [C, Hv Dv]; the convolution's taps [Cc, K], A = -exp(A_log) [Hv], dt_bias [Hv] and
  // the gated norm's weight [Dv].
  DecoderLinear lin_qkv, lin_z, lin_b, lin_a, lin_out;
  const float* lin_conv = nullptr;
  const float* lin_decay = nullptr;
  const float* lin_dt_bias = nullptr;
  const float* lin_norm = nullptr;
};

// The weights of a model and what keeps their memory alive (file mappings, owned buffers).
struct DecoderWeights {
  kernels::QMatrix embed;  // [V, C]
  std::vector<DecoderLayerWeights> layers;
  const float* norm = nullptr;  // [C]
  kernels::QMatrix lm_head;     // [V, C] (embed when tied)
  std::vector<std::shared_ptr<const void>> keep_alive;
  // The file mapping the matrices view (a GGUF file), or null: the pages of matrices copied to
  // their decode layout are given back to the system (a later read maps them from the file again).
  std::shared_ptr<const io::MappedFile> mapping;
};

// Per layer, the attention weights a forward pass computed (DecoderLM::attention_weights).
struct AttentionWeights {
  std::vector<Tensor> layers;  // per layer: float32 [H, T, T], rows sum to 1 (0 above the diagonal)
  // Per layer, the experts each token was routed to ([T * k], ranked by weight; empty for a layer
  // without experts).
  std::vector<std::vector<std::int32_t>> experts;
};

class DecoderLM : public infer::CausalLM {
 public:
  // Checks the spec and every weight's type and shape against it (FormatError naming the
  // weight). The weights' memory must stay valid while the model lives (keep_alive).
  DecoderLM(DecoderSpec spec, DecoderWeights weights);
  const DecoderSpec& spec() const { return spec_; }
  const DecoderWeights& weights() const { return w_; }
  // Bytes of the weights the products read per token (every matrix once), for bandwidth bounds.
  std::int64_t weight_bytes() const;
  // How activations meet quantized weights (kernels/qgemm.h): F32 (exact, the default) or Q8.
  // Q8 also copies the matrices of the types with a decode layout (Q4_0, Q4_K, MXFP4, ...) into
  // it where the CPU's kernels read it (kernels::qgemm_repack_rows8: a decode step then reads
  // memory in order; the same bits), all of them in one buffer in the order a step reads them, and
  // gives the file's pages of those matrices back (the resident set stays about the weights'
  // size); F32 frees the copies. Call it before the model computes, not meanwhile.
  void set_activations(kernels::QActivations a);
  kernels::QActivations activations() const { return act_; }
  // Bytes of the matrices held in their decode layout (0 unless Q8 activations on such a CPU).
  std::int64_t decode_layout_bytes() const;

  // infer::CausalLM
  std::int64_t vocab_size() const override { return spec_.vocab_size; }
  std::int64_t max_positions() const override { return spec_.max_positions; }
  std::vector<std::pair<std::string, std::int64_t>> sizes() const override {
    return {{"layers", spec_.num_layers()}, {"d_model", spec_.hidden_size}, {"heads", spec_.num_heads},
            {"kv_heads", spec_.num_kv_heads}, {"vocab", spec_.vocab_size}};
  }
  infer::KVCacheOptions cache_options(std::int64_t batch, std::int64_t max_len) const override;
  // The sequences' new tokens are computed together as rows of one matrix (no padding); a
  // sequence with few new tokens attends through the decode kernel, a longer one through the
  // tiled FlashAttention kernel, both reading the cache's shared key/value heads in place. When
  // no sequence has more than kernels::qgemm_decode_max_m() new tokens (a decode step), each
  // sequence's logits are bitwise those it gets alone, whatever the other rows (continuous
  // batching: infer/scheduler.h). A LongRoPE model runs a sequence again from its first token when
  // it passes the original context with keys of the short factors in its cache (transformers'
  // generation does the same): the cache keeps token ids for it (KVCacheOptions::keep_ids).
  Tensor forward_cached(const Tensor& ids, const std::vector<std::int64_t>& n_new, infer::KVCache& cache,
                        bool all_logits = false) const override;

  // The attention weights of every layer for one sequence of token ids [T] (T >= 1, within
  // max_positions), as transformers' output_attentions=True gives them (eager attention: the
  // softmax of the scaled, soft-capped, masked scores), computed in float32 beside one forward
  // pass. Checks the memory the weights take (L * H * T * T floats) before allocating them.
  AttentionWeights attention_weights(const std::vector<std::int64_t>& ids) const;

 private:
  struct Rope {  // a RopeSpec's inverse frequencies (the short and long ones of LongRope)
    std::vector<float> inv_freq, inv_freq_long;
    float attention_factor = 1.f;
  };
  DecoderSpec spec_;
  DecoderWeights w_;
  std::vector<Rope> ropes_;
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
  bool long_rope() const;  // a RoPE of the spec is LongRoPE (the cache keeps token ids)
  Tensor forward_impl(const Tensor& ids, const std::vector<std::int64_t>& n_new, infer::KVCache& cache,
                      bool all_logits, AttentionWeights* capture) const;
};

}  // namespace qkv::models
