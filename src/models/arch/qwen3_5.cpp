// Qwen3.5 text models (0.8B - 27B; transformers' Qwen3_5ForCausalLM, model_type qwen3_5_text, and
// the language model of the qwen3_5 image-text checkpoints): a hybrid of Gated DeltaNet linear
// attention (three layers of four by default: layer_types, or full_attention_interval) and gated
// full attention (q_proj twice as wide, its second half per head a sigmoid gate on the output;
// q_norm / k_norm; partial rotary, 1/4 of head_dim). Every RMSNorm but the linear attention's
// gated one computes x * (1 + w). The text positions of its multimodal RoPE (mrope) are plain
// RoPE. llama.cpp's architecture qwen35: the linear layers' tensors attn_qkv, attn_gate, ssm_*,
// their value heads in the tiled order (LinearAttnSpec::tiled), ssm_a = -exp(A_log), and the
// multi-token-prediction blocks of published checkpoints after the decoder's (not read).
#include "qwen3_5_common.h"

namespace qkv::models {

QKV_REGISTER_ARCH(qwen3_5, arch::qwen3_5_layout("qwen3_5", "Qwen3.5", "qwen3_5_text", "qwen3_5", "qwen35"))

}  // namespace qkv::models
