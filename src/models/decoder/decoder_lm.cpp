// DecoderLM (see decoder.h): the checks of a spec and its weights, the decode layouts of Q8
// activations, and what the model tells infer/ about itself. The step is in step.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "qkv/core/error.h"
#include "qkv/core/memory.h"
#include "qkv/core/parallel.h"
#include "qkv/io/mapped_file.h"
#include "qkv/models/decoder.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;

std::string weight_desc(const kernels::QMatrix& m) {
  return fmt::format("{} [{}, {}]", kernels::qtype_name(m.type), m.rows, m.cols);
}

void check_matrix(const kernels::QMatrix& m, i64 rows, i64 cols, const std::string& what) {
  if (!m.data || m.rows != rows || m.cols != cols)
    throw FormatError(fmt::format("DecoderLM: {} is {}, the spec needs [{}, {}]", what,
                                  m.data ? weight_desc(m) : std::string("missing"), rows, cols));
}

}  // namespace

void check_decoder_spec(const DecoderSpec& c) {
  auto need = [](bool ok, const std::string& what) {
    if (!ok) throw ValueError("DecoderSpec: " + what);
  };
  for (auto [name, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size}, {"num_hidden_layers", c.num_layers()},
                         {"num_attention_heads", c.num_heads}, {"num_key_value_heads", c.num_kv_heads},
                         {"head_dim", c.head_dim}, {"max_position_embeddings", c.max_positions}})
    need(v >= 1 && v <= (i64{1} << 24), fmt::format("{} must be in [1, 2^24], got {}", name, v));
  need(c.num_layers() <= kMaxDecoderLayers,
       fmt::format("num_hidden_layers must be in [1, {}], got {}", kMaxDecoderLayers, c.num_layers()));
  need(c.num_heads % c.num_kv_heads == 0,
       fmt::format("num_attention_heads {} is not a multiple of num_key_value_heads {}", c.num_heads, c.num_kv_heads));
  need(c.norm_eps > 0 && std::isfinite(c.norm_eps), "rms_norm_eps must be finite and > 0");
  need(std::isfinite(c.embed_scale) && c.embed_scale > 0, fmt::format("the embedding scale must be finite and > 0, got {}", c.embed_scale));
  need(std::isfinite(c.final_softcap) && c.final_softcap >= 0,
       fmt::format("final_logit_softcapping must be finite and >= 0, got {}", c.final_softcap));
  const bool any_moe = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.moe; });
  if (any_moe) {
    const MoeSpec& m = c.moe;
    need(m.experts >= 1 && m.experts <= kMaxExperts,
         fmt::format("the number of experts must be in [1, {}], got {}", kMaxExperts, m.experts));
    need(m.top_k >= 1 && m.top_k <= m.experts,
         fmt::format("experts per token (top-k) must be in [1, {}] (the number of experts), got {}", m.experts, m.top_k));
    need(m.expert_ff >= 1 && m.expert_ff <= (i64{1} << 24),
         fmt::format("the experts' intermediate size must be in [1, 2^24], got {}", m.expert_ff));
    need(std::isfinite(m.routing.scale) && m.routing.scale > 0,
         fmt::format("the expert weights' scale must be finite and > 0, got {}", m.routing.scale));
    need(std::isfinite(m.swiglu_limit) && m.swiglu_limit >= 0,
         fmt::format("swiglu_limit must be finite and >= 0 (0: no clamp), got {}", m.swiglu_limit));
    need(std::isfinite(m.swiglu_alpha), fmt::format("swiglu_alpha must be finite, got {}", m.swiglu_alpha));
    need(m.shared_ff >= 0 && m.shared_ff <= (i64{1} << 24),
         fmt::format("the shared expert's intermediate size must be in [0, 2^24], got {}", m.shared_ff));
  }
  const bool any_linear =
      std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.mixer == Mixer::GatedDeltaNet; });
  if (any_linear) {
    const LinearAttnSpec& g = c.linear;
    for (auto [name, v] : {std::pair{"linear_num_key_heads", g.key_heads}, {"linear_num_value_heads", g.value_heads},
                           {"linear_key_head_dim", g.key_dim}, {"linear_value_head_dim", g.value_dim}})
      need(v >= 1 && v <= (i64{1} << 16), fmt::format("{} must be in [1, 2^16], got {}", name, v));
    need(g.conv_kernel >= 1 && g.conv_kernel <= 64,
         fmt::format("linear_conv_kernel_dim must be in [1, 64], got {}", g.conv_kernel));
    need(g.value_heads % g.key_heads == 0,
         fmt::format("linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", g.value_heads, g.key_heads));
    need(g.value_heads * g.key_dim * g.value_dim <= (i64{1} << 30) && g.conv_channels() <= (i64{1} << 24),
         fmt::format("the linear attention's state ({} value heads x {} x {}) is too large", g.value_heads, g.key_dim,
                     g.value_dim));
  }
  for (std::size_t i = 0; i < c.ropes.size(); ++i) {
    const RopeSpec& r = c.ropes[i];
    need(r.dims >= 2 && r.dims % 2 == 0 && r.dims <= c.head_dim,
         fmt::format("the rotary dims {} must be even, >= 2 and <= head_dim {}", r.dims, c.head_dim));
    try {
      kernels::rope_inv_freq(r.dims, r.theta, r.scaling);  // ValueError naming the rope setting
      if (r.scaling.type == kernels::RopeScaling::Type::LongRope) kernels::rope_inv_freq(r.dims, r.theta, r.scaling, true);
    } catch (const ValueError& e) {
      throw ValueError(std::string("DecoderSpec: ") + e.what());
    }
    need(r.freq_factors.empty() || static_cast<i64>(r.freq_factors.size()) == r.dims / 2,
         fmt::format("rope_freqs has {} factors for {} frequencies", r.freq_factors.size(), r.dims / 2));
    for (std::size_t k = 0; k < r.freq_factors.size(); ++k)
      need(r.freq_factors[k] > 0 && std::isfinite(r.freq_factors[k]),
           fmt::format("rope_freqs factor {} is {} (must be finite and > 0)", k, r.freq_factors[k]));
  }
  for (std::size_t l = 0; l < c.layers.size(); ++l) {
    const LayerSpec& s = c.layers[l];
    need(s.rope >= -1 && s.rope < static_cast<int>(c.ropes.size()),
         fmt::format("layer {} uses RoPE {} of {}", l, s.rope, c.ropes.size()));
    need(s.window >= 0, fmt::format("layer {}: sliding_window must be >= 0, got {}", l, s.window));
    need(std::isfinite(s.attn_scale) && s.attn_scale >= 0,
         fmt::format("layer {}: the attention scale must be finite and >= 0, got {}", l, s.attn_scale));
    need(std::isfinite(s.attn_softcap) && s.attn_softcap >= 0,
         fmt::format("layer {}: attn_logit_softcapping must be finite and >= 0, got {}", l, s.attn_softcap));
  }
}

DecoderLM::Rows8Buffer::Rows8Buffer(std::size_t bytes)
    : p(aligned_alloc_bytes(bytes, "decode layout of a weight")), n(bytes) {}
DecoderLM::Rows8Buffer::~Rows8Buffer() { aligned_free(p); }  // to the system, not the block cache

// Every matrix of the weights (the embedding last): the ones set_activations may lay out.
std::vector<kernels::QMatrix*> DecoderLM::matrices() {
  std::vector<kernels::QMatrix*> ms;
  for (DecoderLayerWeights& L : w_.layers) {
    for (DecoderLinear* lin : {&L.q, &L.k, &L.v, &L.o, &L.lin_qkv, &L.lin_z, &L.lin_b, &L.lin_a, &L.lin_out, &L.gate,
                               &L.up, &L.down, &L.router, &L.shared_gate, &L.shared_up, &L.shared_down})
      if (lin->w.data) ms.push_back(&lin->w);
    for (std::size_t e = 0; e < L.expert_gate.size(); ++e)
      for (auto* list : {&L.expert_gate, &L.expert_up, &L.expert_down}) ms.push_back(&(*list)[e]);
  }
  ms.push_back(&w_.lm_head);
  ms.push_back(&w_.embed);
  return ms;
}

void DecoderLM::set_activations(kernels::QActivations a) {
  act_ = a;
  if (a != kernels::QActivations::Q8) {  // the blocks as stored again (pages come back as read)
    for (kernels::QMatrix* m : matrices()) m->rows8 = nullptr;
    rows8_.clear();
    return;
  }
  if (!rows8_.empty()) return;
  // Every layout in one buffer, the matrices in the order a step reads them (a layer's q, k, v,
  // o, gate, up, down, layer after layer, then the head): one run of 2 MiB pages. With one
  // allocation per matrix (4 KiB pages below 2 MiB), SmolLM2's 66 MB of layer weights spanned
  // ~16,000 pages, far more than the TLB holds: on a two-thread Zen 2 step the feed-forward
  // products read ~22 GB/s, in one buffer ~29 (the bandwidth test: ~32), and decoding went
  // from ~200 to ~231 tokens/s (one thread: ~117 -> ~144).
  std::vector<std::pair<kernels::QMatrix*, i64>> laid;  // matrix, offset in the buffer
  i64 total = 0;
  for (kernels::QMatrix* m : matrices()) {
    if (m == &w_.embed) continue;  // read by lookups only: laid out when tied to the head, below
    if (!kernels::qgemm_rows8_wanted(m->type) || m->rows < 8 ||
        m->row_bytes != kernels::qtype_row_bytes(m->type, m->cols))
      continue;
    laid.emplace_back(m, total);
    total += (kernels::qgemm_rows8_bytes(*m) + 63) / 64 * 64;
  }
  if (laid.empty()) return;
  rows8_.push_back(std::make_unique<Rows8Buffer>(static_cast<std::size_t>(total)));
  for (const auto& entry : laid) {
    kernels::QMatrix* const m = entry.first;  // (not a structured binding: the lambda below captures it)
    const i64 offset = entry.second;
    const i64 bytes = kernels::qgemm_rows8_bytes(*m), groups = m->rows / 8, group_bytes = 8 * m->row_bytes;
    void* out = static_cast<std::uint8_t*>(rows8_.back()->p) + offset;
    const auto* d = static_cast<const std::uint8_t*>(m->data);
    const io::MappedFile* file = w_.mapping.get();
    const auto at = reinterpret_cast<std::uintptr_t>(d), begin = reinterpret_cast<std::uintptr_t>(file ? file->data() : nullptr);
    if (file && (at < begin || at - begin + static_cast<std::uint64_t>(bytes) > file->size())) file = nullptr;
    // ~1 MiB of rows at a time, their pages given back as soon as they are copied (the resident
    // set never holds a matrix twice).
    const i64 step = std::max<i64>(1, (i64{1} << 20) / group_bytes);
    parallel_for(0, groups, step, [&](i64 g0, i64 g1) {
      for (i64 c0 = g0; c0 < g1; c0 += step) {
        const i64 c1 = std::min(g1, c0 + step);
        kernels::qgemm_repack_rows8(*m, out, c0, c1);
        if (file)
          file->release(static_cast<std::uint64_t>(d - file->data() + c0 * group_bytes),
                        static_cast<std::uint64_t>((c1 - c0) * group_bytes));
      }
    });
    m->rows8 = out;
  }
  // Tied embeddings: the lookups read the output head's decode layout (its pages were given back).
  if (w_.embed.data == w_.lm_head.data && w_.embed.type == w_.lm_head.type && w_.embed.rows == w_.lm_head.rows &&
      w_.embed.row_bytes == w_.lm_head.row_bytes)
    w_.embed.rows8 = w_.lm_head.rows8;
}

i64 DecoderLM::decode_layout_bytes() const {
  i64 n = 0;
  for (const auto& b : rows8_) n += static_cast<i64>(b->n);
  return n;
}

DecoderLM::DecoderLM(DecoderSpec spec, DecoderWeights weights) : spec_(std::move(spec)), w_(std::move(weights)) {
  // Decode layouts belong to the model that made them (weights copied from another model keep
  // pointers into its buffers): this one reads the blocks until set_activations lays them out.
  for (kernels::QMatrix* m : matrices()) m->rows8 = nullptr;
  check_decoder_spec(spec_);
  const DecoderSpec& c = spec_;
  const i64 C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const i64 H = c.num_heads, Hkv = c.num_kv_heads, V = c.vocab_size;
  check_matrix(w_.embed, V, C, "the token embedding");
  check_matrix(w_.lm_head, V, C, "the output head");
  if (!w_.norm) throw FormatError("DecoderLM: the final norm weight is missing");
  if (static_cast<i64>(w_.layers.size()) != c.num_layers())
    throw FormatError(fmt::format("DecoderLM: {} layers of weights for a spec of {}", w_.layers.size(), c.num_layers()));
  for (std::size_t i = 0; i < w_.layers.size(); ++i) {
    const DecoderLayerWeights& l = w_.layers[i];
    const LayerSpec& s = c.layers[i];
    const std::string p = fmt::format("layer {} ", i);
    if (s.mixer == Mixer::GatedDeltaNet) {
      const LinearAttnSpec& g = c.linear;
      const i64 VD = g.value_heads * g.value_dim;
      check_matrix(l.lin_qkv.w, g.conv_channels(), C, p + "in_proj_qkv");
      check_matrix(l.lin_z.w, VD, C, p + "in_proj_z");
      check_matrix(l.lin_b.w, g.value_heads, C, p + "in_proj_b");
      check_matrix(l.lin_a.w, g.value_heads, C, p + "in_proj_a");
      check_matrix(l.lin_out.w, C, VD, p + "out_proj");
      if (!l.lin_conv || !l.lin_decay || !l.lin_dt_bias || !l.lin_norm)
        throw FormatError("DecoderLM: " + p + "the linear attention's conv1d, A, dt_bias or norm weight is missing");
      if (s.qk_norm || s.attn_output_gate || s.window > 0 || s.attn_softcap > 0)
        throw FormatError("DecoderLM: " + p + "a linear-attention layer with attention settings (q/k norm, output gate, "
                                              "window or soft-cap)");
    } else {
      check_matrix(l.q.w, (s.attn_output_gate ? 2 : 1) * H * D, C, p + "q_proj");
      check_matrix(l.k.w, Hkv * D, C, p + "k_proj");
      check_matrix(l.v.w, Hkv * D, C, p + "v_proj");
      check_matrix(l.o.w, C, H * D, p + "o_proj");
    }
    if (s.moe) {
      const i64 E = c.moe.experts, Fe = c.moe.expert_ff;
      check_matrix(l.router.w, E, C, p + "router");
      for (const auto& [list, rows, cols, what] :
           {std::tuple{&l.expert_gate, Fe, C, "gate"}, {&l.expert_up, Fe, C, "up"}, {&l.expert_down, C, Fe, "down"}}) {
        if (static_cast<i64>(list->size()) != E)
          throw FormatError(fmt::format("DecoderLM: {}has {} experts' {} matrices, the spec {} experts", p, list->size(),
                                        what, E));
        for (i64 e = 0; e < E; ++e)
          check_matrix((*list)[static_cast<std::size_t>(e)], rows, cols, fmt::format("{}expert {} {}", p, e, what));
      }
    } else {
      check_matrix(l.gate.w, F, C, p + "gate_proj");
      check_matrix(l.up.w, F, C, p + "up_proj");
      check_matrix(l.down.w, C, F, p + "down_proj");
    }
    if (!l.attn_norm || !l.ffn_norm) throw FormatError("DecoderLM: " + p + "norm weights are missing");
    const bool attends = s.mixer == Mixer::Attention;
    if (attends && c.attention_bias && (!l.q.bias || !l.k.bias || !l.v.bias))
      throw FormatError("DecoderLM: " + p + "q/k/v biases are missing (the spec has attention_bias)");
    if (attends && c.attention_out_bias && !l.o.bias)
      throw FormatError("DecoderLM: " + p + "the output projection's bias is missing (the spec has attention_out_bias)");
    if (attends && c.attention_sinks && !l.sinks)
      throw FormatError("DecoderLM: " + p + "the attention sinks are missing (the spec has attention_sinks)");
    if (s.moe && c.moe.router_bias && !l.router.bias)
      throw FormatError("DecoderLM: " + p + "the router's bias is missing (the spec has router_bias)");
    if (s.moe && c.moe.expert_bias && (!l.expert_gate_bias || !l.expert_up_bias || !l.expert_down_bias))
      throw FormatError("DecoderLM: " + p + "the experts' biases are missing (the spec has expert_bias)");
    if (s.moe && c.moe.shared_ff > 0) {
      check_matrix(l.shared_gate.w, c.moe.shared_ff, C, p + "shared expert gate_proj");
      check_matrix(l.shared_up.w, c.moe.shared_ff, C, p + "shared expert up_proj");
      check_matrix(l.shared_down.w, C, c.moe.shared_ff, p + "shared expert down_proj");
      if (!l.shared_expert_gate) throw FormatError("DecoderLM: " + p + "the shared expert's gate weight is missing");
    }
    if (s.qk_norm_whole && !s.qk_norm)
      throw FormatError("DecoderLM: " + p + "qk_norm_whole without qk_norm");
    if (attends && s.qk_norm && (!l.q_norm || !l.k_norm))
      throw FormatError("DecoderLM: " + p + "q/k norm weights are missing (the spec has qk_norm)");
    if (s.post_attn_norm && !l.post_attn_norm)
      throw FormatError("DecoderLM: " + p + "the post-attention norm weight is missing");
    if (s.post_ffn_norm && !l.post_ffn_norm)
      throw FormatError("DecoderLM: " + p + "the post-feed-forward norm weight is missing");
  }
  for (const RopeSpec& r : c.ropes) {
    Rope rope;
    rope.inv_freq = kernels::rope_inv_freq(r.dims, r.theta, r.scaling);
    if (r.scaling.type == kernels::RopeScaling::Type::LongRope)
      rope.inv_freq_long = kernels::rope_inv_freq(r.dims, r.theta, r.scaling, true);
    for (std::size_t i = 0; i < r.freq_factors.size(); ++i) {
      rope.inv_freq[i] = rope.inv_freq[i] / r.freq_factors[i];  // llama.cpp: theta / freq_factor
      if (!rope.inv_freq_long.empty()) rope.inv_freq_long[i] = rope.inv_freq_long[i] / r.freq_factors[i];
    }
    rope.attention_factor =
        static_cast<float>(kernels::rope_attention_factor(r.scaling, static_cast<double>(c.max_positions)));
    ropes_.push_back(std::move(rope));
  }
}

i64 DecoderLM::weight_bytes() const {
  auto bytes = [](const kernels::QMatrix& m) { return m.rows * m.row_bytes; };
  i64 n = bytes(w_.lm_head);
  for (const DecoderLayerWeights& l : w_.layers) {
    n += bytes(l.q.w) + bytes(l.k.w) + bytes(l.v.w) + bytes(l.o.w) + bytes(l.gate.w) + bytes(l.up.w) + bytes(l.down.w) +
         bytes(l.shared_gate.w) + bytes(l.shared_up.w) + bytes(l.shared_down.w) + bytes(l.lin_qkv.w) +
         bytes(l.lin_z.w) + bytes(l.lin_b.w) + bytes(l.lin_a.w) + bytes(l.lin_out.w);
    if (l.expert_gate.empty()) continue;
    // A token reads the router and k experts' matrices (their mean size: all experts alike).
    i64 experts = 0;
    for (const auto* list : {&l.expert_gate, &l.expert_up, &l.expert_down})
      for (const kernels::QMatrix& m : *list) experts += bytes(m);
    n += bytes(l.router.w) + experts / static_cast<i64>(l.expert_gate.size()) * spec_.moe.top_k;
  }
  return n;
}

bool DecoderLM::long_rope() const {
  return std::any_of(spec_.ropes.begin(), spec_.ropes.end(),
                     [](const RopeSpec& r) { return r.scaling.type == kernels::RopeScaling::Type::LongRope; });
}

infer::KVCacheOptions DecoderLM::cache_options(i64 batch, i64 max_len) const {
  infer::KVCacheOptions o{.num_layers = spec_.num_layers(),
                          .batch = batch,
                          .num_heads = spec_.num_heads,
                          .num_kv_heads = spec_.num_kv_heads,
                          .max_len = max_len,
                          .head_dim = spec_.head_dim,
                          .dtype = kv_type(),
                          .keep_ids = long_rope()};
  // A Gated DeltaNet layer keeps a recurrent state per sequence instead of keys and values.
  if (std::any_of(spec_.layers.begin(), spec_.layers.end(),
                  [](const LayerSpec& l) { return l.mixer == Mixer::GatedDeltaNet; }))
    for (const LayerSpec& l : spec_.layers)
      o.state_floats.push_back(l.mixer == Mixer::GatedDeltaNet ? spec_.linear.state_floats() : 0);
  return o;
}

Tensor DecoderLM::forward_cached(const Tensor& ids, const std::vector<i64>& n_new, infer::KVCache& cache,
                                 bool all_logits) const {
  if (!long_rope()) return forward_impl(ids, n_new, cache, all_logits, nullptr);
  // LongRoPE: a sequence that passes the original context in this call while its cache holds
  // keys made with the short factors runs again from its first token with the long ones, as
  // transformers' generation does (Phi3ForCausalLM.prepare_inputs_for_generation drops the cache
  // at that switch): every later logit then equals transformers'.
  cache.check_room(n_new);
  if (ids.dtype() != DType::I64 || ids.dim() != 2 || ids.shape()[0] != cache.options().batch)
    return forward_impl(ids, n_new, cache, all_logits, nullptr);  // (names the problem)
  const i64 B = cache.options().batch, Tn = ids.shape()[1];
  double original = 0;
  for (const RopeSpec& r : spec_.ropes)
    if (r.scaling.type == kernels::RopeScaling::Type::LongRope) original = r.scaling.original_max_positions;
  std::vector<i64> redo(static_cast<std::size_t>(B), 0);  // the prefix run again, per sequence
  bool any = false;
  for (i64 b = 0; b < B; ++b) {
    const i64 start = cache.length(b), n = n_new[static_cast<std::size_t>(b)];
    if (n > 0 && start > 0 && static_cast<double>(start) <= original && static_cast<double>(start + n) > original)
      redo[static_cast<std::size_t>(b)] = start, any = true;
  }
  const Tensor src = ids.contiguous();
  if (!any) {
    for (i64 b = 0; b < B; ++b)  // the new tokens' ids, kept for a later switch
      for (i64 j = 0; j < std::min(n_new[static_cast<std::size_t>(b)], Tn); ++j)
        cache.token_ids(b)[cache.length(b) + j] = src.data<i64>()[b * Tn + j];
    return forward_impl(ids, n_new, cache, all_logits, nullptr);
  }
  i64 Tn2 = Tn;
  for (i64 b = 0; b < B; ++b) Tn2 = std::max(Tn2, redo[static_cast<std::size_t>(b)] + n_new[static_cast<std::size_t>(b)]);
  std::vector<i64> ids2(static_cast<std::size_t>(B * Tn2), 0), n2(n_new);
  for (i64 b = 0; b < B; ++b) {
    const i64 p = redo[static_cast<std::size_t>(b)], n = std::min(n_new[static_cast<std::size_t>(b)], Tn);
    for (i64 j = 0; j < p; ++j) ids2[static_cast<std::size_t>(b * Tn2 + j)] = cache.token_ids(b)[j];
    for (i64 j = 0; j < n; ++j) ids2[static_cast<std::size_t>(b * Tn2 + p + j)] = src.data<i64>()[b * Tn + j];
    n2[static_cast<std::size_t>(b)] += p;
  }
  for (i64 b = 0; b < B; ++b)
    if (redo[static_cast<std::size_t>(b)]) cache.truncate(b, 0);
  for (i64 b = 0; b < B; ++b)
    for (i64 j = 0; j < n2[static_cast<std::size_t>(b)]; ++j)
      cache.token_ids(b)[cache.length(b) + j] = ids2[static_cast<std::size_t>(b * Tn2 + j)];
  const Tensor out2 = forward_impl(Tensor::from_vector(ids2, {B, Tn2}), n2, cache, all_logits, nullptr);
  if (!all_logits) return out2;
  const i64 V = spec_.vocab_size;
  Tensor out = Tensor::zeros({B, Tn, V});
  for (i64 b = 0; b < B; ++b)
    for (i64 j = 0; j < std::min(n_new[static_cast<std::size_t>(b)], Tn); ++j)
      std::memcpy(out.data<float>() + (b * Tn + j) * V,
                  out2.data<float>() + (b * Tn2 + redo[static_cast<std::size_t>(b)] + j) * V,
                  static_cast<std::size_t>(V) * sizeof(float));
  return out;
}

AttentionWeights DecoderLM::attention_weights(const std::vector<i64>& ids) const {
  const i64 T = static_cast<i64>(ids.size());
  if (T < 1) throw ValueError("DecoderLM::attention_weights: no token ids");
  if (T > spec_.max_positions)
    throw ValueError(fmt::format("DecoderLM::attention_weights: {} tokens, past max_position_embeddings {}", T,
                                 spec_.max_positions));
  MemoryEstimate().add({spec_.num_layers(), spec_.num_heads, T, T}).check("the attention weights");
  AttentionWeights out;
  infer::KVCacheOptions co = cache_options(1, T);
  co.dtype = infer::KVType::F32;
  infer::KVCache cache(co);
  forward_impl(Tensor::from_vector(ids, {1, T}), {T}, cache, false, &out);
  return out;
}

}  // namespace qkv::models
