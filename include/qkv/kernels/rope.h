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

struct RopeScaling {
  enum class Type { None, Linear, Llama3 };
  Type type = Type::None;
  double factor = 1.0;            // Linear: positions / factor; Llama3: long wavelengths / factor
  double low_freq_factor = 1.0;   // Llama3
  double high_freq_factor = 4.0;  // Llama3
  double original_max_positions = 8192;  // Llama3: the pretraining context C0
};

// inv_freq [R/2] in float32, computed as transformers computes it (base^(2i/R) in float, its
// reciprocal, then the scaling rule of REFERENCES section 7 in float). ValueError for R odd or
// < 2, base <= 1 or not finite, a factor <= 0 or not finite, or Llama3 factors with
// high_freq_factor <= low_freq_factor.
std::vector<float> rope_inv_freq(std::int64_t rot_dim, double base, const RopeScaling& scaling);

// cos, sin: [T, R/2] (row-major) of angle pos[t] * inv_freq[i] (float32 product), rounded from
// double cos and sin.
void rope_tables(float* cos, float* sin, const std::int64_t* pos, std::int64_t T, const float* inv_freq,
                 std::int64_t half);

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
