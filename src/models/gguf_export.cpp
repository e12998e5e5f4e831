// Models written as GGUF (see gguf_export.h).
#include "qkv/models/gguf_export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/ops/ops.h"
#include "gguf_tensors.h"

namespace qkv::models {
namespace {

using namespace gguf_out;

using i64 = std::int64_t;
using io::GGUFMeta;
using io::GGUFType;
using kernels::QType;
namespace fs = std::filesystem;

}  // namespace

void save_gpt2_gguf(const GPT2LMHeadModel& m, const std::string& path, const GgufQuant& quant,
                    const io::GGUFMetadata& tokenizer, const std::string& name) {
  autograd::NoGradGuard ng;
  const GPT2Config& c = m.config();
  Tensors t;
  std::vector<Tensor> keep;  // contiguous float32 copies of module weights (any layout)
  auto mat = [&](const std::string& n, const Tensor& w) {
    keep.push_back(w.detach().contiguous().to(DType::F32));
    t.add_float_matrix(n, keep.back().data<float>(), w.shape()[0], w.shape()[1], w.shape()[1]);
  };
  auto vec = [&](const std::string& n, const Tensor& v) {
    keep.push_back(v.detach().contiguous().to(DType::F32));
    t.add_vector(n, keep.back().data<float>(), v.numel());
  };
  // Written as F32, then converted as quant asks (llama-quantize keeps position_embd as it is).
  mat("token_embd.weight", m.wte->weight);
  mat("position_embd.weight", m.wpe->weight);
  for (i64 i = 0; i < c.n_layer; ++i) {
    const nn::TransformerEncoderBlock& b = *m.h[static_cast<std::size_t>(i)];
    const nn::MultiHeadAttention& a = *b.self_attn;
    const std::string p = "blk." + std::to_string(i) + ".";
    vec(p + "attn_norm.weight", b.norm1->weight);
    vec(p + "attn_norm.bias", b.norm1->bias);
    mat(p + "attn_qkv.weight", concat({a.w_q->weight, a.w_k->weight, a.w_v->weight}, 0));
    vec(p + "attn_qkv.bias", concat({a.w_q->bias, a.w_k->bias, a.w_v->bias}, 0));
    mat(p + "attn_output.weight", a.w_o->weight);
    vec(p + "attn_output.bias", a.w_o->bias);
    vec(p + "ffn_norm.weight", b.norm2->weight);
    vec(p + "ffn_norm.bias", b.norm2->bias);
    mat(p + "ffn_up.weight", b.ffn->linear1->weight);
    vec(p + "ffn_up.bias", b.ffn->linear1->bias);
    mat(p + "ffn_down.weight", b.ffn->linear2->weight);
    vec(p + "ffn_down.bias", b.ffn->linear2->bias);
  }
  vec("output_norm.weight", m.ln_f->weight);
  vec("output_norm.bias", m.ln_f->bias);
  mat("output.weight", m.lm_head_weight());
  const std::uint32_t file_type =
      t.apply(quant, QuantMixModel{.arch = "gpt2", .n_layer = c.n_layer, .n_head = c.n_head, .n_head_kv = c.n_head});
  io::GGUFMetadata meta;
  meta.emplace_back("general.architecture", GGUFMeta::string("gpt2"));
  meta.emplace_back("general.type", GGUFMeta::string("model"));
  meta.emplace_back("general.name", GGUFMeta::string(name));
  meta.emplace_back("gpt2.block_count", u32(c.n_layer));
  meta.emplace_back("gpt2.context_length", u32(c.n_positions));
  meta.emplace_back("gpt2.embedding_length", u32(c.n_embd));
  meta.emplace_back("gpt2.feed_forward_length", u32(c.d_ff()));
  meta.emplace_back("gpt2.attention.head_count", u32(c.n_head));
  meta.emplace_back("gpt2.attention.layer_norm_epsilon", GGUFMeta::f32(static_cast<float>(c.layer_norm_epsilon)));
  meta.emplace_back("general.file_type", GGUFMeta::u32(file_type));
  meta.emplace_back("general.quantization_version", GGUFMeta::u32(2));
  meta.insert(meta.end(), tokenizer.begin(), tokenizer.end());
  io::write_gguf(path, meta, t.list);
}

}  // namespace qkv::models
