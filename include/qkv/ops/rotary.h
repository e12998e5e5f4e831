// Rotary position embeddings as a functional op with autograd (RoFormer, Su et al. 2021), over
// the row kernels of kernels/rope.h: what the Llama family applies to queries and keys.
//
//   Tensor q2 = apply_rotary_emb(q, Tensor(), {.base = 10000.0});       // q [B, H, T, D], positions 0..T-1
//   Tensor k2 = apply_rotary_emb(k, pos, {.style = kernels::RopeStyle::Interleaved});
#pragma once
#include <cstdint>

#include "qkv/core/tensor.h"
#include "qkv/kernels/rope.h"

namespace qkv {

struct RotaryOptions {
  double base = 10000.0;          // rope_theta: inv_freq[i] = base^(-2i / R)
  std::int64_t rotary_dim = 0;    // R, the dims rotated per row (even, <= D); 0: all D (partial rotary otherwise)
  // Half: pairs (i, i + R/2), transformers' rotate_half (Llama, Mistral, Qwen2, GPT-NeoX);
  // Interleaved: pairs (2i, 2i + 1), GPT-J and Meta's original Llama code.
  kernels::RopeStyle style = kernels::RopeStyle::Half;
  kernels::RopeScaling scaling;   // linear or llama3 rope_scaling (none by default)
};

// Rotates each row x[..., t, :] by the angles positions[t] * inv_freq (float32 angles and the
// float kernel for float32, double angles for float64 -- the naive twin).
//   x [..., T, D] float32/float64, positions I64 [T] (undefined: 0, 1, ..., T-1) -> [..., T, D]
// ShapeError for rank < 2 or positions not [T]; ValueError for R odd, < 2 or > D, base <= 1,
// bad scaling factors; TypeError for a non-float x or non-int64 positions.
Tensor apply_rotary_emb(const Tensor& x, const Tensor& positions = Tensor(), const RotaryOptions& o = {});

}  // namespace qkv
