// gpt-oss (gpt-oss-20b, gpt-oss-120b): transformers' GptOssForCausalLM. Llama's layout with
// biases on the q/k/v and output projections, a learned attention sink per query head in every
// layer, sliding windows (sliding_window, 128) on the layers layer_types names (by default every
// other one, from layer 0), YaRN RoPE, and a mixture of num_local_experts experts of width
// intermediate_size in every layer: a router with a bias whose top num_experts_per_tok logits are
// softmaxed (top-k, then the softmax), experts with biases on their gate, up and down products
// and the clamped SwiGLU (swiglu_limit, swiglu_alpha). llama.cpp's architecture gpt-oss (its
// limit 7 and alpha 1.702 fixed, the FFN norm named post_attention_norm).
//
// The Hugging Face checkpoints store the experts as PyTorch computes them, x @ W: gate_up_proj
// [E, C, 2 F_e] with gate and up interleaved by columns (gate = [..., ::2], up = [..., 1::2]) and
// down_proj [E, F_e, C]; or, in the published models, in MXFP4 blocks by output rows
// (gate_up_proj_blocks [E, 2 F_e, C / 32, 16] + _scales [E, 2 F_e, C / 32], gate and up rows
// interleaved). Either way they are rewritten at load into the decoder's [E, F_e, C] / [E, C, F_e]
// (a copy: they cannot be read in place); GGUF files hold them that way already.
#include <cstring>

#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"
#include "qkv/core/error.h"
#include "qkv/kernels/quant.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;

// llama.cpp's fixed clamped-SwiGLU constants of its gpt-oss (GGUF files have no key for them).
constexpr float kLimit = 7.f, kAlpha = 1.702f;

void gpt_oss_layers(DecoderSpec& c, const std::vector<bool>& slides, i64 window) {
  c.attention_bias = c.attention_out_bias = c.attention_sinks = true;
  c.moe.routing.gating = kernels::MoeGating::TopKSoftmax;
  c.moe.routing.renormalize = false;
  c.moe.router_bias = c.moe.expert_bias = true;
  for (std::size_t i = 0; i < c.layers.size(); ++i) c.layers[i].window = slides[i] ? window : 0;
}

// Elements of `elem` bytes: out[e][j][i] = in[e][i][j] for the [E, rows, cols] tensor `in` (the
// transpose of each expert's matrix), with only every `step`-th column of in from `first` on.
std::vector<std::uint8_t> experts_transposed(const std::uint8_t* in, i64 E, i64 rows, i64 cols, i64 elem, i64 first,
                                             i64 step) {
  const i64 out_rows = (cols - first + step - 1) / step;
  std::vector<std::uint8_t> out(static_cast<std::size_t>(E * out_rows * rows * elem));
  for (i64 e = 0; e < E; ++e)
    for (i64 j = 0; j < out_rows; ++j)
      for (i64 i = 0; i < rows; ++i)
        std::memcpy(out.data() + ((e * out_rows + j) * rows + i) * elem,
                    in + ((e * rows + i) * cols + first + j * step) * elem, static_cast<std::size_t>(elem));
  return out;
}

// The folder's expert tensors rewritten into the table's (see the top of the file).
void convert_experts(std::map<std::string, FolderTensor>& t, std::vector<std::shared_ptr<const void>>& keep,
                     const DecoderSpec& c, const std::string& source) {
  const i64 E = c.moe.experts, Fe = c.moe.expert_ff, C = c.hidden_size;
  auto owned = [&](std::vector<std::uint8_t> bytes) {
    auto p = std::make_shared<std::vector<std::uint8_t>>(std::move(bytes));
    keep.push_back(p);
    return static_cast<const void*>(p->data());
  };
  auto take = [&](const std::string& name, const Shape& shape) -> FolderTensor {
    auto it = t.find(name);
    if (it == t.end()) throw FormatError(fmt::format("{}: does not match the gpt_oss config: missing {}", source, name));
    FolderTensor f = it->second;
    if (f.shape != shape)
      throw FormatError(fmt::format("{}: {} is {}, the config needs {}", source, name, shape_str(f.shape), shape_str(shape)));
    if (!f.qtype || !(*f.qtype == kernels::QType::F32 || *f.qtype == kernels::QType::F16 || *f.qtype == kernels::QType::BF16))
      throw FormatError(fmt::format("{}: {} has dtype {} (F32, F16 or BF16 expected)", source, name, f.dtype));
    t.erase(it);
    return f;
  };
  auto elem = [](const FolderTensor& f) { return static_cast<i64>(*f.qtype == kernels::QType::F32 ? 4 : 2); };
  for (i64 l = 0; l < c.num_layers(); ++l) {
    const std::string p = fmt::format("model.layers.{}.mlp.experts.", l);
    if (t.count(p + "gate_up_proj_blocks")) {  // MXFP4 (the published checkpoints)
      if (C % 32 || Fe % 32)
        throw FormatError(fmt::format("{}: MXFP4 experts need hidden_size and intermediate_size multiples of 32, got "
                                      "{} and {}", source, C, Fe));
      // Rows of `n` weights, from the pair (blocks [rows, n / 32, 16], scales [rows, n / 32]) as
      // ggml's MXFP4 rows, every `step`-th row from `first` on.
      auto mxfp4 = [&](const std::string& name, i64 rows, i64 n, i64 first, i64 step) {
        const FolderTensor& b = t.at(name + "_blocks");
        const FolderTensor& sc = t.at(name + "_scales");
        const i64 G = n / 32, out_rows = E * rows / step;
        std::vector<std::uint8_t> out(static_cast<std::size_t>(out_rows * G * 17));
        for (i64 r = 0; r < out_rows; ++r) {
          const i64 src = first + r * step;  // (expert e's rows are rows e * rows .. of all)
          kernels::mxfp4_blocks_from_hf(static_cast<const std::uint8_t*>(b.data) + src * G * 16,
                                        static_cast<const std::uint8_t*>(sc.data) + src * G, G,
                                        out.data() + r * G * 17);
        }
        return owned(std::move(out));
      };
      for (const auto& [name, rows, n] : {std::tuple{p + "gate_up_proj", 2 * Fe, C}, {p + "down_proj", C, Fe}}) {
        for (const auto& [suffix, shape] : {std::pair{"_blocks", Shape{E, rows, n / 32, 16}}, {"_scales", Shape{E, rows, n / 32}}}) {
          auto it = t.find(name + suffix);
          if (it == t.end())
            throw FormatError(fmt::format("{}: does not match the gpt_oss config: missing {}{}", source, name, suffix));
          if (it->second.shape != shape)
            throw FormatError(fmt::format("{}: {}{} is {}, the config needs {}", source, name, suffix,
                                          shape_str(it->second.shape), shape_str(shape)));
          if (it->second.dtype != "U8")
            throw FormatError(fmt::format("{}: {}{} has dtype {} (U8 expected)", source, name, suffix, it->second.dtype));
        }
      }
      t[p + "gate_proj"] = {kernels::QType::MXFP4, mxfp4(p + "gate_up_proj", 2 * Fe, C, 0, 2), {E, Fe, C}, "MXFP4"};
      t[p + "up_proj"] = {kernels::QType::MXFP4, mxfp4(p + "gate_up_proj", 2 * Fe, C, 1, 2), {E, Fe, C}, "MXFP4"};
      t[p + "down_proj"] = {kernels::QType::MXFP4, mxfp4(p + "down_proj", C, Fe, 0, 1), {E, C, Fe}, "MXFP4"};
      for (const char* n : {"gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"})
        t.erase(p + n);
    } else {  // as PyTorch computes them, x @ W
      const FolderTensor gu = take(p + "gate_up_proj", {E, C, 2 * Fe});
      const auto* g = static_cast<const std::uint8_t*>(gu.data);
      t[p + "gate_proj"] = {gu.qtype, owned(experts_transposed(g, E, C, 2 * Fe, elem(gu), 0, 2)), {E, Fe, C}, gu.dtype};
      t[p + "up_proj"] = {gu.qtype, owned(experts_transposed(g, E, C, 2 * Fe, elem(gu), 1, 2)), {E, Fe, C}, gu.dtype};
      const FolderTensor dn = take(p + "down_proj", {E, Fe, C});
      t[p + "down_proj"] = {dn.qtype, owned(experts_transposed(static_cast<const std::uint8_t*>(dn.data), E, Fe, C,
                                                               elem(dn), 0, 1)),
                            {E, C, Fe}, dn.dtype};
    }
    // The biases [E, 2 F_e] split the same way (an [E, 1, 2 F_e] tensor's columns).
    const FolderTensor gb = take(p + "gate_up_proj_bias", {E, 2 * Fe});
    const auto* b = static_cast<const std::uint8_t*>(gb.data);
    t[p + "gate_proj_bias"] = {gb.qtype, owned(experts_transposed(b, E, 1, 2 * Fe, elem(gb), 0, 2)), {E, Fe}, gb.dtype};
    t[p + "up_proj_bias"] = {gb.qtype, owned(experts_transposed(b, E, 1, 2 * Fe, elem(gb), 1, 2)), {E, Fe}, gb.dtype};
  }
}

Architecture gpt_oss() {
  Architecture a = arch::llama_layout("gpt_oss", "gpt-oss", "gpt-oss", /*interleaved_rope=*/false);
  a.gguf_names = {"gpt-oss"};
  a.tensors = arch::without(a.tensors, Slot::RopeFreqs);
  a.tensors = arch::with(a.tensors, {Slot::FfnNorm, "model.layers.{i}.post_attention_layernorm.weight",
                                     "blk.{i}.post_attention_norm.weight"});
  a.tensors = arch::with(a.tensors, {Slot::Router, "model.layers.{i}.mlp.router.weight", "blk.{i}.ffn_gate_inp.weight"});
  a.tensors = arch::with(a.tensors, {Slot::ExpertGate, "model.layers.{i}.mlp.experts.gate_proj", "blk.{i}.ffn_gate_exps.weight"});
  a.tensors = arch::with(a.tensors, {Slot::ExpertUp, "model.layers.{i}.mlp.experts.up_proj", "blk.{i}.ffn_up_exps.weight"});
  a.tensors = arch::with(a.tensors, {Slot::ExpertDown, "model.layers.{i}.mlp.experts.down_proj", "blk.{i}.ffn_down_exps.weight"});
  a.tensors.push_back({Slot::OBias, "model.layers.{i}.self_attn.o_proj.bias", "blk.{i}.attn_output.bias"});
  a.tensors.push_back({Slot::Sinks, "model.layers.{i}.self_attn.sinks", "blk.{i}.attn_sinks.weight"});
  a.tensors.push_back({Slot::RouterBias, "model.layers.{i}.mlp.router.bias", "blk.{i}.ffn_gate_inp.bias"});
  a.tensors.push_back({Slot::ExpertGateBias, "model.layers.{i}.mlp.experts.gate_proj_bias", "blk.{i}.ffn_gate_exps.bias"});
  a.tensors.push_back({Slot::ExpertUpBias, "model.layers.{i}.mlp.experts.up_proj_bias", "blk.{i}.ffn_up_exps.bias"});
  a.tensors.push_back({Slot::ExpertDownBias, "model.layers.{i}.mlp.experts.down_proj_bias", "blk.{i}.ffn_down_exps.bias"});
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(
        j, src, {.rms_norm_eps = 1e-5, .rope_theta = 150000.0, .max_position_embeddings = 131072});
    if (!hf::get_bool(j, "attention_bias", src, true))
      hf::bad(src, "attention_bias false is not supported for gpt-oss (its projections have biases)");
    if (!j.contains("rope_parameters") && !j.contains("rope_scaling")) {  // GptOssConfig's default: YaRN
      kernels::RopeScaling& s = c.ropes.front().scaling;
      s.type = kernels::RopeScaling::Type::Yarn;
      s.factor = 32.0, s.beta_fast = 32.0, s.beta_slow = 1.0, s.truncate = false, s.original_max_positions = 4096;
    }
    arch::moe_from_config(j, src, {.experts_field = "num_local_experts", .expert_ff_field = "intermediate_size",
                                   .norm_field = nullptr, .renormalize = false}, c);
    c.moe.swiglu_limit = static_cast<float>(hf::get_double(j, "swiglu_limit", src, kLimit));
    c.moe.swiglu_alpha = static_cast<float>(hf::get_double(j, "swiglu_alpha", src, kAlpha));
    if (!(c.moe.swiglu_limit > 0)) hf::bad(src, fmt::format("swiglu_limit must be > 0, got {}", c.moe.swiglu_limit));
    std::vector<bool> slides(c.layers.size());
    if (const auto s = arch::sliding_layers(j, c.num_layers(), src)) slides = *s;
    else
      for (std::size_t i = 0; i < slides.size(); ++i) slides[i] = (i + 1) % 2 != 0;
    i64 window = 128;
    if (auto it = j.find("sliding_window"); it != j.end()) {
      if (it->is_null()) {
        std::fill(slides.begin(), slides.end(), false);
      } else {
        window = hf::get_int(j, "sliding_window", src);  // (>= 1, or a FormatError naming it)
      }
    }
    gpt_oss_layers(c, slides, window);
    return c;
  };
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::spec_from_gguf(f, *find_architecture("gpt_oss"));
    if (c.moe.experts < 1)
      throw FormatError(f.source() + ": a gpt-oss file needs gpt-oss.expert_count (every layer is a mixture of experts)");
    c.moe.swiglu_limit = kLimit, c.moe.swiglu_alpha = kAlpha;
    // YaRN as transformers' GptOssConfig computes it: the correction range not rounded
    // (truncate false; llama.cpp rounds it).
    for (RopeSpec& r : c.ropes) r.scaling.truncate = false;
    const i64 window = f.find_int("gpt-oss.attention.sliding_window").value_or(128);
    gpt_oss_layers(c, arch::sliding_layers_from_gguf(f, c.num_layers(), 2), window);
    return c;
  };
  a.gguf_metadata = [](const DecoderSpec& c, const std::string& prefix, io::GGUFMetadata& meta) {
    arch::sliding_pattern_gguf_metadata(c, prefix, meta, 2);
  };
  a.hf_convert = convert_experts;
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(gpt_oss, gpt_oss())

}  // namespace qkv::models
