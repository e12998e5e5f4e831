// The router of a mixture-of-experts feed-forward (Mixtral, Qwen3-MoE, OLMoE): from a token's
// router logits s [E] to the k experts it uses and their weights.
//
//   SoftmaxTopK (Mixtral, Qwen3-MoE, OLMoE; transformers' *TopKRouter): p = softmax(s) in float32,
//     the k largest p (ties: the lower expert index first, as torch.topk on a CPU), then, with
//     `renormalize` (Mixtral; Qwen3-MoE's norm_topk_prob), p_i / sum of the k chosen.
//   TopKSoftmax (gpt-oss): the k largest s, then the softmax over those k only.
//   Either way the weights are then multiplied by `scale` (llama.cpp's expert_weights_scale; 1).
//
// Defined for any input: a NaN logit counts as -inf (never chosen before a finite one, probability
// 0); when every logit of a token is NaN or -inf, the token takes experts 0..k-1 with weight 1/k
// each (times scale). The choice and the weights are a function of the token's logits alone.
#pragma once
#include <cstdint>

namespace qkv::kernels {

enum class MoeGating { SoftmaxTopK, TopKSoftmax };

struct MoeRouting {
  MoeGating gating = MoeGating::SoftmaxTopK;
  bool renormalize = false;
  float scale = 1.f;
};

// logits [R, E] -> experts [R, k] (indices in [0, E), by descending weight) and weights [R, k]
// (float32). 1 <= k <= E. Not threaded.
void moe_route(const float* logits, std::int64_t R, std::int64_t E, std::int64_t k, const MoeRouting& routing,
               std::int32_t* experts, float* weights);

}  // namespace qkv::kernels
