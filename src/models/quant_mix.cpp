// llama-quantize's per-tensor type choice (models/quant_mix.h): a port of llama.cpp
// src/llama-quant.cpp (0c1e570) - tensor_get_category, tensor_allows_quantization,
// llama_tensor_get_type, llama_tensor_get_type_impl and tensor_type_fallback - for the file types
// qkv writes, without an importance matrix, type overrides or --pure unless asked. The branches of
// the file types qkv does not write (IQ1/IQ2/IQ3, TQ) are left out; the architecture facts
// are the ones those rules read (falcon's exceptions, the 70B models' attn_v, 8-expert models).
#include "qkv/models/quant_mix.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <numeric>
#include <string>

#include "qkv/core/error.h"

namespace qkv::models {
namespace {

using kernels::QType;
using i64 = std::int64_t;

struct FtypeName {
  const char* name;
  LlamaFtype ftype;
};
// llama-quantize's QUANT_OPTIONS (tools/quantize/quantize.cpp) for the file types qkv writes.
constexpr FtypeName kNames[] = {
    {"F32", LlamaFtype::F32},       {"F16", LlamaFtype::F16},       {"BF16", LlamaFtype::BF16},
    {"Q8_0", LlamaFtype::Q8_0},     {"Q4_0", LlamaFtype::Q4_0},     {"Q4_1", LlamaFtype::Q4_1},
    {"Q5_0", LlamaFtype::Q5_0},     {"Q5_1", LlamaFtype::Q5_1},     {"Q2_K", LlamaFtype::Q2_K},
    {"Q3_K_S", LlamaFtype::Q3_K_S}, {"Q3_K_M", LlamaFtype::Q3_K_M}, {"Q3_K_L", LlamaFtype::Q3_K_L},
    {"Q4_K_S", LlamaFtype::Q4_K_S}, {"Q4_K_M", LlamaFtype::Q4_K_M}, {"Q5_K_S", LlamaFtype::Q5_K_S},
    {"Q5_K_M", LlamaFtype::Q5_K_M}, {"Q6_K", LlamaFtype::Q6_K},     {"IQ4_NL", LlamaFtype::IQ4_NL},
    {"IQ4_XS", LlamaFtype::IQ4_XS}, {"MXFP4_MOE", LlamaFtype::MXFP4_MOE},
};
// llama-quantize's aliases.
constexpr FtypeName kAliases[] = {{"Q3_K", LlamaFtype::Q3_K_M}, {"Q4_K", LlamaFtype::Q4_K_M}, {"Q5_K", LlamaFtype::Q5_K_M}};

bool same_name(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::toupper(static_cast<unsigned char>(a[i])) != std::toupper(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

enum class Category { TokenEmbd, Output, AttnQkv, AttnKvB, AttnV, AttnK, AttnQ, AttnOutput, FfnUp, FfnGate, FfnDown, Other };

Category category_of(const std::string& n) {
  if (n == "output.weight") return Category::Output;
  if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Category::TokenEmbd;
  if (has(n, "attn_qkv.weight")) return Category::AttnQkv;
  if (has(n, "attn_kv_b.weight")) return Category::AttnKvB;
  if (has(n, "attn_v.weight")) return Category::AttnV;
  if (has(n, "attn_k.weight")) return Category::AttnK;
  if (has(n, "attn_q.weight")) return Category::AttnQ;
  if (has(n, "attn_output.weight")) return Category::AttnOutput;
  if (has(n, "ffn_up")) return Category::FfnUp;
  if (has(n, "ffn_gate")) return Category::FfnGate;
  if (has(n, "ffn_down")) return Category::FfnDown;
  return Category::Other;
}

bool is_attn_v(Category c) { return c == Category::AttnV || c == Category::AttnQkv || c == Category::AttnKvB; }

// ggml_n_dims: the dims up to the last that is not 1 (at least 1).
int n_dims(const std::vector<i64>& dims) {
  int n = static_cast<int>(dims.size());
  while (n > 1 && dims[static_cast<std::size_t>(n - 1)] == 1) --n;
  return std::max(n, 1);
}

// tensor_allows_quantization (quantize_output_tensor on, no only_copy).
bool allows_quantization(const QuantMixTensor& t) {
  if (n_dims(t.dims) < 2) return false;
  const std::string& name = t.name;
  bool q = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
  for (const char* never : {"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel",
                            "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight",
                            "indexer.q_proj.weight", "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight",
                            "time_mix_w2.weight", "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
                            "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight",
                            "time_mix_g2.weight", "time_mix_decay_w1.weight", "time_mix_decay_w2.weight",
                            "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd", "sam.pos_embd",
                            "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
                            "mm.a.code_embd"})
    q = q && !has(name, never);
  // Positional embeddings and token types (GPT-2, BERT): LLM_TN(arch)(POS_EMBD / TOKEN_TYPES).
  q = q && name != "position_embd.weight" && name != "token_types.weight";
  return q;
}

bool is_quantized(QType t) { return t != QType::F32 && t != QType::F16 && t != QType::BF16; }
i64 block_of(QType t) { return kernels::qtype_traits(t).block; }

// tensor_type_fallback: a type whose block the row length is not a multiple of, replaced.
QType fallback(const QuantMixTensor& t, QType target) {
  const i64 ncols = t.dims.empty() ? 1 : t.dims[0];
  if (ncols % block_of(target) == 0) return target;
  QType r = target;
  switch (target) {
    case QType::IQ4_XS: r = QType::IQ4_NL; break;
    case QType::Q2_K:
    case QType::Q3_K: r = QType::Q4_0; break;
    case QType::Q4_K: r = QType::Q5_0; break;
    case QType::Q5_K: r = QType::Q5_1; break;
    case QType::Q6_K: r = QType::Q8_0; break;
    default: break;  // a 32-value block type: no smaller block to go to
  }
  return ncols % block_of(r) == 0 ? r : QType::F16;
}

// llama.cpp's LLM_TYPE_70B, which its attn_v rule reads: the architectures' "70B" sizes.
bool is_70b(const QuantMixModel& m) {
  if (m.arch == "llama") return m.n_layer == 80 && m.n_head != m.n_head_kv;
  return ((m.arch == "deci" || m.arch == "olmo") && m.n_layer == 80) || (m.arch == "jais2" && m.n_layer == 68);
}

bool use_more_bits(i64 i, i64 n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

struct State {
  const QuantMixModel& model;
  LlamaFtype ftype;
  bool tied = true;  // no output.weight: token_embd is the output matrix too
  i64 n_attention_wv = 0, i_attention_wv = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
};

// The layer of an expert's tensor (llama.cpp reads it from the name when n_expert > 1).
i64 layer_of(const State& s, i64 counter, const std::string& name) {
  if (s.model.n_expert <= 1) return counter;
  int l = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &l) != 1 || l < 0 || l >= s.model.n_layer)
    throw ValueError("quant_mix: cannot tell the layer of tensor '" + name + "' (an expert model's tensors are blk.N.*)");
  return l;
}

// llama_tensor_get_type_impl for the file types qkv writes.
QType choose(State& s, QType t, const QuantMixTensor& tensor, Category cat) {
  using F = LlamaFtype;
  const F ftype = s.ftype;
  const bool falcon = s.model.arch == "falcon";
  const i64 n_gqa = s.model.n_head_kv > 0 ? s.model.n_head / s.model.n_head_kv : 0;
  if (cat == Category::Output || (s.tied && cat == Category::TokenEmbd)) {
    const i64 nx = tensor.dims.empty() ? 1 : tensor.dims[0];
    if (ftype == F::MXFP4_MOE || falcon || nx % block_of(t) != 0)
      t = QType::Q8_0;
    else if (t != QType::Q8_0)
      t = QType::Q6_K;
  } else if (ftype == F::MXFP4_MOE) {
    // The experts' matrices (3-D: [cols, rows, experts]) MXFP4, every other tensor Q8_0 (and no
    // counter moves). bailingmoe3's 3-D MLA projections are not experts: there the FFN roles only.
    const bool experts = tensor.dims.size() > 2 && tensor.dims[2] > 1;
    const bool ffn = cat == Category::FfnUp || cat == Category::FfnGate || cat == Category::FfnDown;
    t = experts && (s.model.arch != "bailingmoe3" || ffn) ? QType::MXFP4 : QType::Q8_0;
  } else if (cat == Category::TokenEmbd) {
    // (the rules for token_embd concern IQ1/IQ2/IQ3 and TQ/Q2_0 files)
  } else if (is_attn_v(cat)) {
    if (ftype == F::Q2_K)
      t = n_gqa >= 4 ? QType::Q4_K : QType::Q3_K;
    else if ((ftype == F::IQ4_NL || ftype == F::IQ4_XS) && n_gqa >= 4)
      t = QType::Q5_K;
    else if (ftype == F::Q3_K_M)
      t = s.i_attention_wv < 2 ? QType::Q5_K : QType::Q4_K;
    else if (ftype == F::Q3_K_L)
      t = QType::Q5_K;
    else if ((ftype == F::Q4_K_M || ftype == F::Q5_K_M) && use_more_bits(s.i_attention_wv, s.n_attention_wv))
      t = QType::Q6_K;
    else if (ftype == F::Q4_K_S && s.i_attention_wv < 4)
      t = QType::Q5_K;
    if (is_70b(s.model) && (t == QType::Q3_K || t == QType::Q4_K)) t = QType::Q5_K;
    if (s.model.n_expert == 8) t = QType::Q8_0;
    ++s.i_attention_wv;
  } else if (cat == Category::AttnK) {
    if (s.model.n_expert == 8) t = QType::Q8_0;
  } else if (cat == Category::FfnDown) {
    const i64 i_layer = layer_of(s, s.i_ffn_down, tensor.name), n_layer = s.model.n_layer;
    if (ftype == F::Q2_K) {
      t = QType::Q3_K;
    } else if (ftype == F::Q3_K_M) {
      t = i_layer < n_layer / 16                              ? QType::Q5_K
          : !falcon || use_more_bits(i_layer, n_layer) ? QType::Q4_K
                                                              : QType::Q3_K;
    } else if (ftype == F::Q3_K_L) {
      t = falcon ? QType::Q4_K : QType::Q5_K;
    } else if (ftype == F::Q4_K_M) {
      if (falcon)
        t = i_layer < n_layer / 16 ? QType::Q6_K : use_more_bits(i_layer, n_layer) ? QType::Q5_K : QType::Q4_K;
      else if (use_more_bits(i_layer, n_layer))
        t = QType::Q6_K;
    } else if (i_layer < n_layer / 8 && (ftype == F::IQ4_NL || ftype == F::IQ4_XS)) {
      t = QType::Q5_K;
    } else if (ftype == F::Q5_K_M && use_more_bits(i_layer, n_layer)) {
      t = QType::Q6_K;
    } else if (ftype == F::Q4_K_S && !falcon && i_layer < n_layer / 8) {
      t = QType::Q5_K;
    }
    ++s.i_ffn_down;
  } else if (cat == Category::AttnOutput) {
    if (!falcon) {
      if (s.model.n_expert == 8) {
        if (ftype == F::Q2_K || ftype == F::Q3_K_S || ftype == F::Q3_K_M || ftype == F::IQ4_NL || ftype == F::Q4_K_S ||
            ftype == F::Q4_K_M || ftype == F::IQ4_XS)
          t = QType::Q5_K;
      } else {
        if (ftype == F::Q2_K)
          t = QType::Q3_K;
        else if (ftype == F::Q3_K_M)
          t = QType::Q4_K;
        else if (ftype == F::Q3_K_L)
          t = QType::Q5_K;
      }
    } else if (ftype == F::Q3_K_L) {
      t = QType::Q4_K;
    }
  } else if (cat == Category::FfnGate) {
    layer_of(s, s.i_ffn_gate, tensor.name);
    ++s.i_ffn_gate;
  } else if (cat == Category::FfnUp) {
    layer_of(s, s.i_ffn_up, tensor.name);
    ++s.i_ffn_up;
  }
  return t;
}

// llama.cpp's order of the tensors (llama_model_loader's weights_map): by layer ("blk.N.", -1
// for the others), then by name.
int layer_key(const std::string& name) {
  int l = -1;
  std::sscanf(name.c_str(), "blk.%d.", &l);
  return l;
}

}  // namespace

const char* llama_ftype_name(LlamaFtype f) {
  for (const FtypeName& n : kNames)
    if (n.ftype == f) return n.name;
  throw ValueError("llama_ftype_name: file type " + std::to_string(static_cast<std::uint32_t>(f)) +
                   " is not one qkv writes");
}

std::optional<LlamaFtype> llama_ftype_from_name(std::string_view name) {
  for (const FtypeName& n : kNames)
    if (same_name(name, n.name)) return n.ftype;
  for (const FtypeName& n : kAliases)
    if (same_name(name, n.name)) return n.ftype;
  return std::nullopt;
}

std::string llama_ftype_names() {
  std::string s;
  auto add = [&](const char* n) {
    if (!s.empty()) s += ", ";
    for (const char* c = n; *c; ++c) s += static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  };
  for (const FtypeName& n : kNames) add(n.name);
  for (const FtypeName& n : kAliases) add(n.name);
  return s;
}

QType llama_ftype_default_type(LlamaFtype f) {
  switch (f) {
    case LlamaFtype::F32: return QType::F32;
    case LlamaFtype::F16: return QType::F16;
    case LlamaFtype::BF16: return QType::BF16;
    case LlamaFtype::Q8_0: return QType::Q8_0;
    case LlamaFtype::Q4_0: return QType::Q4_0;
    case LlamaFtype::Q4_1: return QType::Q4_1;
    case LlamaFtype::Q5_0: return QType::Q5_0;
    case LlamaFtype::Q5_1: return QType::Q5_1;
    case LlamaFtype::Q2_K: return QType::Q2_K;
    case LlamaFtype::Q3_K_S:
    case LlamaFtype::Q3_K_M:
    case LlamaFtype::Q3_K_L: return QType::Q3_K;
    case LlamaFtype::Q4_K_S:
    case LlamaFtype::Q4_K_M: return QType::Q4_K;
    case LlamaFtype::Q5_K_S:
    case LlamaFtype::Q5_K_M: return QType::Q5_K;
    case LlamaFtype::Q6_K: return QType::Q6_K;
    case LlamaFtype::IQ4_NL: return QType::IQ4_NL;
    case LlamaFtype::IQ4_XS: return QType::IQ4_XS;
    case LlamaFtype::MXFP4_MOE: return QType::MXFP4;
  }
  throw ValueError("llama_ftype_default_type: unknown file type " + std::to_string(static_cast<std::uint32_t>(f)));
}

LlamaFtype llama_ftype_of_type(QType t) {
  for (const FtypeName& n : kNames)
    if (llama_ftype_default_type(n.ftype) == t && n.ftype != LlamaFtype::Q3_K_S && n.ftype != LlamaFtype::Q4_K_S &&
        n.ftype != LlamaFtype::Q5_K_S && n.ftype != LlamaFtype::Q3_K_L)
      return n.ftype;
  return LlamaFtype::F32;
}

std::string describe(const GgufQuant& quant) {
  if (!quant.ftype) return "weights as stored";
  const char* name = llama_ftype_name(*quant.ftype);
  if (quant.pure) return std::string(name) + " --pure (every quantized tensor " + kernels::qtype_name(llama_ftype_default_type(*quant.ftype)) + ")";
  return std::string(name) + " (llama-quantize's types)";
}

std::vector<QType> quant_mix_types(LlamaFtype ftype, const QuantMixModel& model, const std::vector<QuantMixTensor>& tensors,
                                   bool pure) {
  const QType default_type = llama_ftype_default_type(ftype);
  State s{model, ftype};
  for (const QuantMixTensor& t : tensors) {
    const Category c = category_of(t.name);
    if (is_attn_v(c)) ++s.n_attention_wv;
    if (c == Category::Output) s.tied = false;
  }
  std::vector<std::size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const int la = layer_key(tensors[a].name), lb = layer_key(tensors[b].name);
    return la != lb ? la < lb : tensors[a].name < tensors[b].name;
  });
  std::vector<QType> out(tensors.size());
  for (std::size_t i : order) {
    const QuantMixTensor& t = tensors[i];
    if (!allows_quantization(t)) {
      out[i] = t.type;
      continue;
    }
    QType type = default_type;
    if (is_quantized(default_type)) {
      if (!pure) type = choose(s, type, t, category_of(t.name));
      type = fallback(t, type);
    }
    out[i] = type;
  }
  return out;
}

}  // namespace qkv::models
