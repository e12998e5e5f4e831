// Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer"), as the Llama family applies
// them to queries and keys (REFERENCES: transformers' LlamaRotaryEmbedding, apply_rotary_pos_emb).
//
// Letters: R rotated dims per head (R <= D, even), D head dim, P positions.
//   inv_freq[i] = base^(-2i / R), i < R/2                      then the rope_scaling rule
//   angle[t,i]  = pos[t] * inv_freq[i]                          (float32 product, as transformers)
//   pair (a, b) of head h at row t:  a' = a cos - b sin,  b' = b cos + a sin
// The pairs are (i, i + R/2) in the Half style (transformers' rotate_half, GPT-NeoX, Qwen2 GGUF)
// and (2i, 2i + 1) in the Interleaved style (GPT-J; what llama.cpp's converter arranges for
// llama-architecture GGUFs by permuting the rows of attn_q / attn_k, so rotating adjacent pairs
// of those rows gives the same attention scores as rotate_half on the unpermuted ones).
// Dims R..D-1 of a head are left as they are (partial rotary).
#pragma once
#include <cstdint>
#include <vector>

namespace qkv::kernels {

enum class RopeStyle { Half, Interleaved };

// The rope_scaling rules of transformers' modeling_rope_utils.py:
//   Linear    inv_freq / factor (positions / factor)
//   Llama3    long wavelengths (> C0 / low_freq_factor) / factor, short ones kept, a smooth
//             blend between (REFERENCES section 7)
//   Yarn      (Peng et al. 2023, "YaRN") inv_freq blended between base^(-2i/R) (extrapolation)
//             and base^(-2i/R) / factor (interpolation) by a linear ramp over the dims whose
//             rotations in C0 positions fall between beta_fast and beta_slow (truncated to whole
//             dims unless truncate is false); cos and sin multiplied by the attention factor
//             (0.1 ln(factor) + 1 unless given)
//   LongRope  (Phi-3) inv_freq_i = 1 / (ext_i * base^(2i/R)) with the short factors for a
//             sequence of at most C0 positions, the long ones beyond (transformers decides by
//             the largest position of the forward call); cos and sin multiplied by the
//             attention factor (sqrt(1 + ln(s) / ln(C0)), s = max_positions / C0, unless given)
struct RopeScaling {
  enum class Type { None, Linear, Llama3, Yarn, LongRope };
  Type type = Type::None;
  double factor = 1.0;            // Linear: positions / factor; Llama3: long wavelengths / factor; Yarn
  double low_freq_factor = 1.0;   // Llama3
  double high_freq_factor = 4.0;  // Llama3
  double original_max_positions = 8192;  // Llama3, Yarn, LongRope: the pretraining context C0
  double beta_fast = 32.0, beta_slow = 1.0;  // Yarn: the ramp's bounds in rotations
  bool truncate = true;                      // Yarn: the ramp's bounds rounded to whole dims
  double attention_factor = 0.0;  // Yarn, LongRope: cos and sin multiplied by it; 0: the rule above
  std::vector<float> short_factor, long_factor;  // LongRope: [R/2] each
};

// inv_freq [R/2] in float32, computed as transformers computes it (base^(2i/R) in float, its
// reciprocal, then the scaling rule in float). LongRope: the short factors, or the long ones when
// `long_context`. ValueError for R odd or < 2, base <= 1 or not finite, a factor <= 0 or not
// finite, Llama3 factors with high_freq_factor <= low_freq_factor, or LongRope factor lists that
// are not R/2 long.
std::vector<float> rope_inv_freq(std::int64_t rot_dim, double base, const RopeScaling& scaling,
                                 bool long_context = false);
// The factor cos and sin are multiplied by (1 but for Yarn and LongRope); max_positions is the
// model's max_position_embeddings (LongRope's default rule).
double rope_attention_factor(const RopeScaling& scaling, double max_positions);

// cos, sin: [T, R/2] (row-major) of angle pos[t] * inv_freq[i] (float32 product), rounded from
// double cos and sin.
// With `attention_factor` != 1, each is then multiplied by it in float (transformers'
// cos() * attention_scaling).
void rope_tables(float* cos, float* sin, const std::int64_t* pos, std::int64_t T, const float* inv_freq,
                 std::int64_t half, float attention_factor = 1.0f);

// Rotates, in place, the first R dims of each of `heads` heads (head dim D, heads contiguous)
// of T rows with row stride ld: x [T, ld] holding [heads, D] at the start of each row.
// cos, sin: [T, R/2] from rope_tables. inverse: rotate by -angle (the backward).
void rope_apply_f32(float* x, std::int64_t T, std::int64_t heads, std::int64_t D, std::int64_t ld,
                    std::int64_t rot_dim, const float* cos, const float* sin, RopeStyle style, bool inverse = false);

// Naive twin in T = float or double: the angles in double (pos * inv_freq), cos and sin in
// double, the rotation in double.
template <class T>
void rope_apply_ref(T* x, std::int64_t rows, std::int64_t heads, std::int64_t D, std::int64_t ld, std::int64_t rot_dim,
                    const std::int64_t* pos, const float* inv_freq, RopeStyle style, bool inverse = false);

}  // namespace qkv::kernels
