// Gemma 2 (2B, 9B, 27B): transformers' Gemma2ForCausalLM (gemma_common.h) with soft-capped
// attention scores and logits (attn_logit_softcapping, final_logit_softcapping) and sliding
// windows on alternate layers (0, 2, ...). llama.cpp's architecture gemma2.
#include "gemma_common.h"

namespace qkv::models {
namespace {

Architecture gemma2() {
  Architecture a;
  a.name = "gemma2";
  a.display = "Gemma 2";
  a.model_types = {"gemma2"};
  a.gguf_names = {"gemma2"};
  a.gguf_name = "gemma2";
  a.norm_offset = 1.f;
  a.tensors = arch::gemma_tensor_names();
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    return arch::gemma_spec_from_config(j, src, 2, 8192);
  };
  a.from_gguf = [](const io::GGUFFile& f) { return arch::gemma_spec_from_gguf(f, *find_architecture("gemma2"), 2, 46); };
  a.gguf_metadata = [](const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta) {
    arch::gemma_gguf_metadata(c, prefix, meta, 2);
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(gemma2, gemma2())

}  // namespace qkv::models
