// The step of DecoderLM (see decoder.h): new tokens of any number of sequences through every
// layer, their keys and values appended to the KV cache, the logits out. Written once for every
// architecture: what differs between them is read from the spec (norms, RoPE, windows, scales,
// soft-caps, activations); how the work is shared among threads (a team, its barriers, the Q8
// quantisation shared by products, the decode/prefill split) is here only.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/kernels/activation.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/kernels/gated_delta.h"
#include "qkv/kernels/half.h"
#include "qkv/kernels/rms_norm.h"
#include "qkv/kernels/swiglu.h"
#include "qkv/models/decoder.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;

// A float buffer of one forward call's workspace: grown on demand, never zeroed, 64-byte aligned.
class Buf {
 public:
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() {
    if (p_) aligned_free(p_, n_ * sizeof(float));
  }
  float* get(i64 n) {
    const auto want = static_cast<std::size_t>(std::max<i64>(n, 1));
    if (want > n_) {
      if (p_) aligned_free(p_, n_ * sizeof(float));
      p_ = nullptr;
      p_ = static_cast<float*>(aligned_alloc_bytes(want * sizeof(float), "decoder forward workspace"));
      n_ = want;
    }
    return p_;
  }

 private:
  float* p_ = nullptr;
  std::size_t n_ = 0;
};

// The workspace of the calling thread (forward_cached is const and may run on many threads at
// once, each with its own cache; one call per thread at a time).
struct Workspace {
  Buf x, h, hp, q, k, v, att, a, g, u, qd, od, last, dscratch;
  Buf router, eh, eg, eu, eo;  // a mixture of experts: router logits, the experts' rows in and out
  Buf sg, su, so;              // its shared expert's gate / up rows and output rows
  Buf qg, gate;                // q_proj's rows with the output gate, the gate's part of them
  Buf mix, conv, lz, lb, la, lo;  // a Gated DeltaNet layer's projections, convolved rows and output
  std::vector<std::unique_ptr<Buf>> cos, sin;  // per RoPE of the spec
  Buf& cos_of(std::size_t i) { return at(cos, i); }
  Buf& sin_of(std::size_t i) { return at(sin, i); }

 private:
  static Buf& at(std::vector<std::unique_ptr<Buf>>& v, std::size_t i) {
    while (v.size() <= i) v.push_back(std::make_unique<Buf>());
    return *v[i];
  }
};
Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// y = gelu_tanh(g) * u elementwise (y may equal g): Gemma's gated feed-forward (GeGLU), in
// chunks that stay in L1.
void geglu_tanh_f32(float* y, const float* g, const float* u, i64 n) {
  constexpr i64 kChunk = 1024;
  for (i64 i = 0; i < n; i += kChunk) {
    const i64 m = std::min(kChunk, n - i);
    kernels::gelu_forward_f32(y + i, g + i, m, kernels::GeluForm::Tanh);
    for (i64 j = 0; j < m; ++j) y[i + j] = y[i + j] * u[i + j];
  }
}

// y = gpt-oss's clamped SwiGLU of g and u (y may equal g): g = min(g, limit), u = clamp(u, -limit,
// limit), y = (u + 1) * g * sigmoid(alpha g), in float32 as transformers' GptOssExperts (and
// llama.cpp's swiglu_oai); NaN stays NaN.
void swiglu_clamped_f32(float* y, const float* g, const float* u, i64 n, float alpha, float limit) {
  for (i64 i = 0; i < n; ++i) {
    const float gi = std::min(g[i], limit), ui = std::clamp(u[i], -limit, limit);
    const float glu = gi * (1.f / (1.f + std::exp(-(gi * alpha))));
    y[i] = (ui + 1.f) * glu;
  }
}

// A sequence with up to this many new rows runs a Gated DeltaNet layer's recurrence token by
// token (each token the bits of decoding it alone: speculative decoding's verification of a draft
// then gives what decoding one token at a time would); more rows run the chunked form.
constexpr i64 kRecurrentRows = 32;
// Tokens per chunk of the chunked form in a prompt. Larger chunks put more of the work into the
// chunk's products, whose shapes then suit the kernels better: a 512-token prompt of the
// Qwen3.5-0.8B shape (Q8 path, AVX-512) ran at ~115 / 133 / 121 tokens/s on one thread with chunks
// of 64 / 256 / 512 (202 / 229 on two with 64 / 256); transformers uses 64. The results agree
// with the recurrence within the kernels' tolerance at both (test_gated_delta).
constexpr i64 kGdnChunk = 256;

// x = cap * tanh(x / cap) (transformers: x / cap, tanh, * cap in float32).
void softcap_f32(float* x, i64 n, float cap) {
  for (i64 i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

}  // namespace

Tensor DecoderLM::forward_impl(const Tensor& ids, const std::vector<i64>& n_new, infer::KVCache& cache,
                               bool all_logits, AttentionWeights* capture) const {
  const DecoderSpec& c = spec_;
  const infer::KVCacheOptions& co = cache.options();
  if (ids.dtype() != DType::I64 || ids.dim() != 2 || ids.shape()[0] != co.batch)
    throw ShapeError(fmt::format("DecoderLM::forward_cached: ids must be I64 [{}, Tn] for this cache, got {} {}", co.batch,
                                 ids.shape_str(), dtype_name(ids.dtype())));
  if (co.num_layers != c.num_layers() || co.num_heads != c.num_heads || co.num_kv_heads != c.num_kv_heads ||
      co.head_dim != c.head_dim)
    throw ShapeError("DecoderLM::forward_cached: the cache is shaped for another model");
  cache.check_room(n_new);
  const bool f16 = co.dtype == infer::KVType::F16;
  const i64 B = co.batch, Tn = ids.shape()[1], T = co.max_len, L = c.num_layers();
  const i64 C = c.hidden_size, F = c.intermediate_size, D = c.head_dim, H = c.num_heads;
  const i64 Hkv = c.num_kv_heads, V = c.vocab_size, HD = H * D, KD = Hkv * D;

  // The new tokens of every sequence, as rows of one matrix: row r is token row_t[r] of
  // sequence row_b[r], at position pos[r]. Everything is checked before anything is written.
  std::vector<i64> row_b, row_t, pos, first(static_cast<std::size_t>(B), -1);
  const Tensor src = ids.contiguous();
  const i64* s = src.data<i64>();
  for (i64 b = 0; b < B; ++b) {
    const i64 n = n_new[static_cast<std::size_t>(b)], start = cache.length(b);
    if (n > Tn)
      throw ShapeError(fmt::format("DecoderLM::forward_cached: n_new[{}] = {} exceeds the {} ids given", b, n, Tn));
    if (start + n > c.max_positions)
      throw ValueError(fmt::format("DecoderLM::forward_cached: sequence {} would reach position {}, past "
                                   "max_position_embeddings {}",
                                   b, start + n, c.max_positions));
    if (n > 0) first[static_cast<std::size_t>(b)] = static_cast<i64>(row_b.size());
    for (i64 j = 0; j < n; ++j) {
      const i64 id = s[b * Tn + j];
      if (id < 0 || id >= V)
        throw IndexError(fmt::format("DecoderLM::forward_cached: token id {} of sequence {} out of range [0, {})", id,
                                     b, V));
      row_b.push_back(b);
      row_t.push_back(j);
      pos.push_back(start + j);
    }
  }
  const i64 R = static_cast<i64>(row_b.size());
  Tensor out = all_logits ? Tensor::zeros({B, Tn, V}) : Tensor::zeros({B, V});
  if (R == 0) return out;

  Workspace& ws = workspace();
  if (capture) capture->experts.assign(static_cast<std::size_t>(L), {});
  float* x = ws.x.get(R * C);
  float* h = ws.h.get(R * C);
  float* q = ws.q.get(R * HD);
  float* k = ws.k.get(R * KD);
  float* v = ws.v.get(R * KD);
  // Gated DeltaNet layers: their widths (kernels/gated_delta.h).
  const LinearAttnSpec& G = c.linear;
  const bool any_linear =
      std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.mixer == Mixer::GatedDeltaNet; });
  const i64 Cc = any_linear ? G.conv_channels() : 0, Hv = G.value_heads, VD = G.value_heads * G.value_dim;
  float* att = ws.att.get(R * std::max(HD, any_linear ? VD : 0));
  const bool any_gate = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.attn_output_gate; });
  float* qg = any_gate ? ws.qg.get(R * 2 * HD) : nullptr;
  float* gate = any_gate ? ws.gate.get(R * HD) : nullptr;
  float* g = ws.g.get(R * F);
  float* u = ws.u.get(R * F);
  const bool post_norms = std::any_of(c.layers.begin(), c.layers.end(),
                                      [](const LayerSpec& l) { return l.post_attn_norm || l.post_ffn_norm; });
  // A sub-layer's output before its post-norm (or before it is added, with an output bias).
  float* a = post_norms || c.attention_out_bias ? ws.a.get(R * C) : nullptr;

  // The cos and sin tables of every RoPE at the rows' positions ([R, R_dims / 2] each). LongRope
  // takes its long factors for a sequence that reaches past the original context in this call
  // (transformers decides by the largest position of the forward pass).
  std::vector<float*> cosv(ropes_.size()), sinv(ropes_.size());
  for (std::size_t i = 0; i < ropes_.size(); ++i) {
    const Rope& rp = ropes_[i];
    const i64 half = c.ropes[i].dims / 2;
    cosv[i] = ws.cos_of(i).get(R * half);
    sinv[i] = ws.sin_of(i).get(R * half);
    if (rp.inv_freq_long.empty()) {
      kernels::rope_tables(cosv[i], sinv[i], pos.data(), R, rp.inv_freq.data(), half, rp.attention_factor);
      continue;
    }
    const double original = c.ropes[i].scaling.original_max_positions;
    for (i64 b = 0; b < B; ++b) {
      const i64 n = n_new[static_cast<std::size_t>(b)], r0 = first[static_cast<std::size_t>(b)];
      if (n == 0) continue;
      const bool long_context = static_cast<double>(cache.length(b) + n) > original;
      kernels::rope_tables(cosv[i] + r0 * half, sinv[i] + r0 * half, pos.data() + r0, n,
                           (long_context ? rp.inv_freq_long : rp.inv_freq).data(), half, rp.attention_factor);
    }
  }

  // (A row in the decode layout is read from it: the blocks' pages were given back.)
  std::vector<std::uint8_t> row_bytes;
  for (i64 r = 0; r < R; ++r) {
    const i64 id = s[row_b[static_cast<std::size_t>(r)] * Tn + row_t[static_cast<std::size_t>(r)]];
    const std::uint8_t* src_row = static_cast<const std::uint8_t*>(w_.embed.data) + id * w_.embed.row_bytes;
    if (w_.embed.rows8 != nullptr && id < w_.embed.rows / 8 * 8) {
      row_bytes.resize(static_cast<std::size_t>(w_.embed.row_bytes));
      kernels::qgemm_rows8_row(w_.embed, id, row_bytes.data());
      src_row = row_bytes.data();
    }
    kernels::dequantize_row(w_.embed.type, src_row, x + r * C, C);
    if (c.embed_scale != 1.f)
      for (i64 i = 0; i < C; ++i) x[r * C + i] = x[r * C + i] * c.embed_scale;
  }

  // Sequences with few new tokens attend through the decode kernel (one call for all of them),
  // the others through one FlashAttention call each.
  std::vector<i64> q_len(static_cast<std::size_t>(B), 0), k_len(static_cast<std::size_t>(B), 0);
  i64 Lq = 0;
  for (i64 b = 0; b < B; ++b) {
    const i64 n = n_new[static_cast<std::size_t>(b)];
    k_len[static_cast<std::size_t>(b)] = cache.length(b) + n;
    if (n > 0 && n <= infer::kDecodeKernelMaxQueries) {
      q_len[static_cast<std::size_t>(b)] = n;
      Lq = std::max(Lq, n);
    }
  }
  // A step where every sequence decodes one token (row b is sequence b's) runs the decode kernel
  // on q and att in place ([B, H * D] is its [B, H, 1, D]): no copy of Q in, none of O out.
  const bool q_in_place = B > 0 && std::all_of(n_new.begin(), n_new.end(), [](i64 n) { return n == 1; });
  float* qd = Lq && !q_in_place ? ws.qd.get(B * H * Lq * D) : nullptr;
  float* od = Lq && !q_in_place ? ws.od.get(B * H * Lq * D) : nullptr;
  const float default_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  auto scale_of = [&](const LayerSpec& ls) { return ls.attn_scale > 0 ? ls.attn_scale : default_scale; };
  // A step where no sequence has more new tokens than the products' decode path takes rows (a
  // decode step of many sequences, say) runs every product on the decode path, whatever the rows
  // in all: each sequence gets the bits it gets alone (qgemm's rows_alone; continuous batching
  // relies on it).
  bool alone = true;
  for (i64 b = 0; b < B; ++b) alone = alone && n_new[static_cast<std::size_t>(b)] <= kernels::qgemm_decode_max_m();
  const kernels::QGemmOptions plain{.activations = act_, .rows_alone = alone};
  const kernels::QGemmOptions accumulate{.accumulate = true, .activations = act_, .rows_alone = alone};
  auto with_bias = [&](const float* bias, const kernels::Q8Rows* a_q8 = nullptr) {
    kernels::QGemmOptions o = plain;
    o.epilogue.bias = bias;
    o.a_q8 = a_q8;
    return o;
  };
  // With Q8 activations, products sharing an input (q, k and v; gate and up) quantize it once per
  // team member (bitwise the same products, kernels/qgemm.h): the member's rows of h quantized
  // here when the Q8 path will take W's product.
  auto shared_q8 = [&](const float* A, const kernels::QMatrix& W) -> const kernels::Q8Rows* {
    if (!kernels::qgemm_uses_q8(R, W.type, plain)) return nullptr;
    thread_local kernels::Q8Rows rows;
    kernels::quantize_rows_q8(R, A, C, C, rows);
    return &rows;
  };
  // One member's share of a product: its part of the output columns (bitwise the whole
  // product for any team size, kernels/qgemm.h).
  auto product = [&](Team& tm, const float* A, i64 lda, const kernels::QMatrix& W, float* o, i64 ldo,
                     const kernels::QGemmOptions& opt) { kernels::qgemm_part(R, A, lda, W, o, ldo, opt, tm.rank(), tm.size()); };
  // Each member normalises every row into its own copy of h (the same values: one function of
  // the row), so the products that read h need no barrier after the norm: two fewer per layer.
  const i64 members = std::max(1, num_threads());
  float* hp = ws.hp.get(members * R * C);
  auto norm = [&](Team& tm, const float* w) -> const float* {
    if (tm.size() > members) throw ValueError("DecoderLM: a team larger than num_threads()");
    float* hm = hp + tm.rank() * R * C;
    kernels::rms_norm_rows_f32(hm, C, nullptr, x, C, w, R, C, c.norm_eps);
    return hm;
  };
  // A sub-layer's output: added into x by the product (accumulate), or written to `a` (with its
  // bias, as PyTorch's linear layer adds it before the residual), normalised by rows (the
  // post-norms of Gemma) and then added. Ends after a barrier, x complete.
  auto residual = [&](Team& tm, const float* A, i64 lda, const kernels::QMatrix& W, const float* post_norm,
                      const float* bias) {
    if (!post_norm && !bias) {
      product(tm, A, lda, W, x, C, accumulate);
      tm.barrier();
      return;
    }
    product(tm, A, lda, W, a, C, with_bias(bias));
    tm.barrier();
    const auto [r0, r1] = tm.part(0, R);
    for (i64 r = r0; r < r1; ++r) {
      if (post_norm) kernels::rms_norm_rows_f32(a + r * C, C, nullptr, a + r * C, C, post_norm, 1, C, c.norm_eps);
      for (i64 i = 0; i < C; ++i) x[r * C + i] = x[r * C + i] + a[r * C + i];
    }
    tm.barrier();
  };
  // The gated activation of n values from g and u into g.
  auto activate = [&](float* gv, const float* uv, i64 n) {
    if (c.activation == FfnActivation::SiLU)
      kernels::swiglu_forward_f32(gv, gv, uv, n);
    else
      geglu_tanh_f32(gv, gv, uv, n);
  };
  // A mixture-of-experts feed-forward of the rows normalised into hm (this member's copy), added
  // into x (through `post_norm` when given). Every member routes every row (the same function of
  // the router's logits: the same choices), then the rows are grouped by expert (expert-major,
  // rows ascending: slot s of the groups is row srow[s]); each chosen expert's gate and up
  // products run over its rows only (the team splitting each product's columns), then its down
  // product; each row's output is the weighted sum of its experts' rows in ascending expert
  // order (transformers' index_add_ order). Only the chosen experts' weights are read, and each
  // row gets the bits it gets alone in a step on the decode path (rows_alone).
  const i64 E = c.moe.experts, Kx = c.moe.top_k, Fe = c.moe.expert_ff;
  const bool any_moe = std::any_of(c.layers.begin(), c.layers.end(), [](const LayerSpec& l) { return l.moe; });
  float* rlog = any_moe ? ws.router.get(R * E) : nullptr;
  float* eh = any_moe && R > 1 ? ws.eh.get(R * Kx * C) : nullptr;
  float* eg = any_moe ? ws.eg.get(R * Kx * Fe) : nullptr;
  float* eu = any_moe ? ws.eu.get(R * Kx * Fe) : nullptr;
  float* eo = any_moe ? ws.eo.get(R * Kx * C) : nullptr;
  if (any_moe && !post_norms) a = ws.a.get(R * C);
  const i64 Fs = any_moe ? c.moe.shared_ff : 0;
  float* sg = Fs > 0 ? ws.sg.get(R * Fs) : nullptr;
  float* su = Fs > 0 ? ws.su.get(R * Fs) : nullptr;
  float* so = Fs > 0 ? ws.so.get(R * C) : nullptr;
  // The experts' activation: the spec's gated one, or gpt-oss's clamped SwiGLU.
  auto activate_experts = [&](float* gv, const float* uv, i64 n) {
    if (c.moe.swiglu_limit > 0)
      swiglu_clamped_f32(gv, gv, uv, n, c.moe.swiglu_alpha, c.moe.swiglu_limit);
    else
      activate(gv, uv, n);
  };
  // An expert's product options: its row of the experts' biases [E, n] in the epilogue, if any.
  auto expert_opt = [&](const float* bias, i64 e, i64 n) {
    kernels::QGemmOptions o = plain;
    if (bias) o.epilogue.bias = bias + e * n;
    return o;
  };
  auto experts = [&](Team& tm, i64 l, const float* hm, const DecoderLayerWeights& P, const float* post_norm) {
    kernels::QGemmOptions exact = plain;  // the router in float32 whatever the activations: its
    exact.activations = kernels::QActivations::F32;  // choices are transformers'
    exact.epilogue.bias = P.router.bias;
    product(tm, hm, C, P.router.w, rlog, E, exact);
    tm.barrier();
    thread_local std::vector<std::int32_t> chosen, srow, slot_of;
    thread_local std::vector<float> weight;
    thread_local std::vector<i64> count, offset;
    chosen.resize(static_cast<std::size_t>(R * Kx));
    weight.resize(static_cast<std::size_t>(R * Kx));
    kernels::moe_route(rlog, R, E, Kx, c.moe.routing, chosen.data(), weight.data());
    if (capture && tm.rank() == 0) capture->experts[static_cast<std::size_t>(l)] = chosen;
    count.assign(static_cast<std::size_t>(E), 0);
    for (const std::int32_t e : chosen) ++count[static_cast<std::size_t>(e)];
    offset.assign(static_cast<std::size_t>(E) + 1, 0);
    for (i64 e = 0; e < E; ++e) offset[static_cast<std::size_t>(e + 1)] = offset[static_cast<std::size_t>(e)] + count[static_cast<std::size_t>(e)];
    srow.resize(static_cast<std::size_t>(R * Kx));
    slot_of.resize(static_cast<std::size_t>(R * Kx));
    {
      std::vector<i64> fill(offset.begin(), offset.end() - 1);
      for (i64 r = 0; r < R; ++r)
        for (i64 j = 0; j < Kx; ++j) {
          const auto e = static_cast<std::size_t>(chosen[static_cast<std::size_t>(r * Kx + j)]);
          slot_of[static_cast<std::size_t>(r * Kx + j)] = static_cast<std::int32_t>(fill[e]);
          srow[static_cast<std::size_t>(fill[e]++)] = static_cast<std::int32_t>(r);
        }
    }
    // The experts' input rows: h itself for one row; else gathered (each member its share).
    const float* in = hm;
    if (R > 1) {
      const auto [s0, s1] = tm.part(0, R * Kx);
      for (i64 sl = s0; sl < s1; ++sl)
        std::memcpy(eh + sl * C, hm + srow[static_cast<std::size_t>(sl)] * C, static_cast<std::size_t>(C) * sizeof(float));
      tm.barrier();
      in = eh;
    }
    auto rows_in = [&](i64 e) { return R > 1 ? in + offset[static_cast<std::size_t>(e)] * C : in; };
    for (i64 e = 0; e < E; ++e) {
      const i64 n = count[static_cast<std::size_t>(e)], o = offset[static_cast<std::size_t>(e)];
      if (n == 0) continue;
      kernels::qgemm_part(n, rows_in(e), C, P.expert_gate[static_cast<std::size_t>(e)], eg + o * Fe, Fe,
                          expert_opt(P.expert_gate_bias, e, Fe), tm.rank(), tm.size());
      kernels::qgemm_part(n, rows_in(e), C, P.expert_up[static_cast<std::size_t>(e)], eu + o * Fe, Fe,
                          expert_opt(P.expert_up_bias, e, Fe), tm.rank(), tm.size());
    }
    // Where each member's gate and up products wrote the same columns of every expert (the decode
    // and Q8 paths split by columns), it activates them itself: no barrier before the activation.
    bool own_columns = true;
    for (i64 e = 0; e < E && own_columns; ++e) {
      const i64 n = count[static_cast<std::size_t>(e)];
      for (int m = 0; n > 0 && m < tm.size() && own_columns; ++m) {
        const auto cg = kernels::qgemm_part_columns(n, P.expert_gate[static_cast<std::size_t>(e)], plain, m, tm.size());
        own_columns = cg && cg == kernels::qgemm_part_columns(n, P.expert_up[static_cast<std::size_t>(e)], plain, m, tm.size());
      }
    }
    if (own_columns) {
      for (i64 e = 0; e < E; ++e) {
        const i64 n = count[static_cast<std::size_t>(e)], o = offset[static_cast<std::size_t>(e)];
        if (n == 0) continue;
        const auto [n0, n1] =
            *kernels::qgemm_part_columns(n, P.expert_gate[static_cast<std::size_t>(e)], plain, tm.rank(), tm.size());
        for (i64 r = o; r < o + n; ++r) activate_experts(eg + r * Fe + n0, eu + r * Fe + n0, n1 - n0);
      }
    } else {
      tm.barrier();
      const auto [e0, e1] = tm.part(0, R * Kx * Fe, 16);
      activate_experts(eg + e0, eu + e0, e1 - e0);
    }
    tm.barrier();
    for (i64 e = 0; e < E; ++e) {
      const i64 n = count[static_cast<std::size_t>(e)], o = offset[static_cast<std::size_t>(e)];
      if (n == 0) continue;
      kernels::qgemm_part(n, eg + o * Fe, Fe, P.expert_down[static_cast<std::size_t>(e)], eo + o * C, C,
                          expert_opt(P.expert_down_bias, e, C), tm.rank(), tm.size());
    }
    tm.barrier();
    // The shared expert (Qwen2-MoE) over every row: its gate and up products, activation, down.
    if (Fs > 0) {
      product(tm, hm, C, P.shared_gate.w, sg, Fs, plain);
      product(tm, hm, C, P.shared_up.w, su, Fs, plain);
      tm.barrier();
      const auto [e0, e1] = tm.part(0, R * Fs, 16);
      activate(sg + e0, su + e0, e1 - e0);
      tm.barrier();
      product(tm, sg, Fs, P.shared_down.w, so, C, plain);
      tm.barrier();
    }
    const auto [r0, r1] = tm.part(0, R);
    std::vector<std::pair<std::int32_t, i64>> order(static_cast<std::size_t>(Kx));  // (expert, choice)
    for (i64 r = r0; r < r1; ++r) {
      for (i64 j = 0; j < Kx; ++j) order[static_cast<std::size_t>(j)] = {chosen[static_cast<std::size_t>(r * Kx + j)], j};
      std::sort(order.begin(), order.end());
      float* f = a + r * C;
      std::fill(f, f + C, 0.f);
      for (const auto& [e, j] : order) {
        const float wj = weight[static_cast<std::size_t>(r * Kx + j)];
        const float* y = eo + slot_of[static_cast<std::size_t>(r * Kx + j)] * C;
        for (i64 i = 0; i < C; ++i) f[i] = f[i] + y[i] * wj;
      }
      if (Fs > 0) {  // + sigmoid(h . w_sg) * shared(h), after the routed experts (transformers' order)
        float dot = 0.f;
        for (i64 i = 0; i < C; ++i) dot += hm[r * C + i] * P.shared_expert_gate[i];
        const float sig = 1.f / (1.f + std::exp(-dot));
        for (i64 i = 0; i < C; ++i) f[i] = f[i] + sig * so[r * C + i];
      }
      if (post_norm) kernels::rms_norm_rows_f32(f, C, nullptr, f, C, post_norm, 1, C, c.norm_eps);
      for (i64 i = 0; i < C; ++i) x[r * C + i] = x[r * C + i] + f[i];
    }
    tm.barrier();
  };
  // A Gated DeltaNet layer (Qwen3.5's linear attention; decoder.h, kernels/gated_delta.h), in the
  // team: the input norm and four products (qkv, z, b, a), each sequence's rows through the causal
  // convolution (its state holds the last K - 1 inputs; channels shared by the members), the
  // decays and rates, the delta rule (units of one sequence's value head shared by the members: a
  // few rows token by token, more in chunks), then the gated norm into att. Its out_proj is the
  // residual of the next before().
  float* mix = any_linear ? ws.mix.get(R * Cc) : nullptr;
  float* cv = any_linear ? ws.conv.get(R * Cc) : nullptr;
  float* lz = any_linear ? ws.lz.get(R * VD) : nullptr;
  float* lb = any_linear ? ws.lb.get(R * Hv) : nullptr;
  float* la = any_linear ? ws.la.get(R * Hv) : nullptr;
  float* lo = any_linear ? ws.lo.get(R * VD) : nullptr;
  std::vector<i64> seq_first, seq_n;  // the sequences with new rows
  for (i64 b = 0; b < B; ++b)
    if (n_new[static_cast<std::size_t>(b)] > 0) seq_first.push_back(b), seq_n.push_back(n_new[static_cast<std::size_t>(b)]);
  auto linear_attention = [&](Team& tm, i64 l) {
    const DecoderLayerWeights& W = w_.layers[static_cast<std::size_t>(l)];
    const i64 K = G.conv_kernel, Dk = G.key_dim, Dv = G.value_dim, Hk = G.key_heads;
    const float* hm = norm(tm, W.attn_norm);
    const kernels::Q8Rows* hq = shared_q8(hm, W.lin_qkv.w);
    product(tm, hm, C, W.lin_qkv.w, mix, Cc, with_bias(nullptr, hq));
    product(tm, hm, C, W.lin_z.w, lz, VD, with_bias(nullptr, hq));
    product(tm, hm, C, W.lin_b.w, lb, Hv, with_bias(nullptr, hq));
    product(tm, hm, C, W.lin_a.w, la, Hv, with_bias(nullptr, hq));
    tm.barrier();
    {  // the convolution (by channels), the rates beta = sigmoid(b) and decays g = A softplus(a + dt_bias) (by rows)
      const auto [c0, c1] = tm.part(0, Cc, 16);
      for (std::size_t i = 0; i < seq_first.size(); ++i) {
        const i64 b = seq_first[i], r0 = first[static_cast<std::size_t>(b)];
        kernels::causal_conv1d_silu(cv + r0 * Cc, Cc, mix + r0 * Cc, Cc, seq_n[i], Cc, W.lin_conv, K,
                                    cache.state(l, b), c0, c1);
      }
      const auto [e0, e1] = tm.part(0, R * Hv);
      for (i64 e = e0; e < e1; ++e) {
        const i64 h = e % Hv;
        lb[e] = 1.f / (1.f + std::exp(-lb[e]));
        const float x = la[e] + W.lin_dt_bias[h];
        const float softplus = x > 20.f ? x : std::log1p(std::exp(x));  // (PyTorch's threshold 20)
        la[e] = W.lin_decay[h] * softplus;
      }
    }
    tm.barrier();
    {  // the delta rule: units (sequence, value head)
      kernels::GatedDeltaParams gp;
      gp.Hk = Hk, gp.Hv = Hv, gp.Dk = Dk, gp.Dv = Dv, gp.tiled = G.tiled, gp.eps = 1e-6f;
      gp.chunk = kGdnChunk;
      gp.q_st = Cc, gp.k_st = Cc, gp.v_st = Cc, gp.gb_st = Hv, gp.o_st = VD;
      const i64 S = static_cast<i64>(seq_first.size());
      const auto [u0, u1] = tm.part(0, S * Hv);
      for (i64 i = u0 / Hv; i * Hv < u1 && i < S; ++i) {
        const i64 h0 = std::max<i64>(u0 - i * Hv, 0), h1 = std::min<i64>(u1 - i * Hv, Hv);
        if (h1 <= h0) continue;
        const i64 b = seq_first[static_cast<std::size_t>(i)], r0 = first[static_cast<std::size_t>(b)];
        gp.n = seq_n[static_cast<std::size_t>(i)];
        float* st = cache.state(l, b) + (K - 1) * Cc;
        const float* row = cv + r0 * Cc;
        if (gp.n <= kRecurrentRows)
          kernels::gated_delta_recurrent(lo + r0 * VD, st, row, row + Hk * Dk, row + 2 * Hk * Dk, la + r0 * Hv,
                                         lb + r0 * Hv, gp, h0, h1);
        else
          kernels::gated_delta_chunked(lo + r0 * VD, st, row, row + Hk * Dk, row + 2 * Hk * Dk, la + r0 * Hv,
                                       lb + r0 * Hv, gp, h0, h1);
      }
    }
    tm.barrier();
    {  // o = RMSNorm(o) * norm * silu(z) per (row, value head), into att [R, Hv Dv]
      const auto [e0, e1] = tm.part(0, R * Hv);
      kernels::rms_norm_rows_f32(att + e0 * Dv, Dv, nullptr, lo + e0 * Dv, Dv, W.lin_norm, e1 - e0, Dv, c.norm_eps);
      kernels::swiglu_forward_f32(att + e0 * Dv, lz + e0 * Dv, att + e0 * Dv, (e1 - e0) * Dv);  // silu(z) * o
    }
    tm.barrier();
  };
  // The steps between two attentions run as one team of threads (a barrier between steps):
  // a step with a prefilling sequence wakes the workers twice per layer, not once per product
  // (a decoding step runs as one team throughout, below).
  //   before(l): the rest of layer l-1 (o_proj and the feed-forward), then layer l's norm, q/k/v
  //              products, RoPE and cache write; before(L): the rest of the last layer.
  auto before = [&](Team& tm, i64 l) {
    if (l > 0) {
      const DecoderLayerWeights& P = w_.layers[static_cast<std::size_t>(l - 1)];
      const LayerSpec& PS = c.layers[static_cast<std::size_t>(l - 1)];
      if (PS.attn_output_gate) {  // o = o * sigmoid(gate), elementwise (transformers: in float32)
        const auto [e0, e1] = tm.part(0, R * HD, 16);
        for (i64 e = e0; e < e1; ++e) att[e] = att[e] * (1.f / (1.f + std::exp(-gate[e])));
        tm.barrier();
      }
      if (PS.mixer == Mixer::GatedDeltaNet)
        residual(tm, att, VD, P.lin_out.w, PS.post_attn_norm ? P.post_attn_norm : nullptr, nullptr);
      else
        residual(tm, att, HD, P.o.w, PS.post_attn_norm ? P.post_attn_norm : nullptr, P.o.bias);
      const float* hm = norm(tm, P.ffn_norm);
      if (PS.moe) {
        experts(tm, l - 1, hm, P, PS.post_ffn_norm ? P.post_ffn_norm : nullptr);
      } else {
        const kernels::Q8Rows* hq = shared_q8(hm, P.gate.w);
        const kernels::QGemmOptions gu = with_bias(nullptr, hq);
        product(tm, hm, C, P.gate.w, g, F, gu);
        product(tm, hm, C, P.up.w, u, F, gu);
        // Where every member's gate and up products wrote the same columns (the decode and Q8
        // paths split by columns), each finishes the activation on its own (elementwise: the same
        // bits), with no barrier between the products and the activation.
        bool own_columns = true;
        for (int m = 0; m < tm.size() && own_columns; ++m) {
          const auto cg = kernels::qgemm_part_columns(R, P.gate.w, gu, m, tm.size());
          own_columns = cg && cg == kernels::qgemm_part_columns(R, P.up.w, gu, m, tm.size());
        }
        if (own_columns) {
          const auto [n0, n1] = *kernels::qgemm_part_columns(R, P.gate.w, gu, tm.rank(), tm.size());
          for (i64 r = 0; r < R; ++r) activate(g + r * F + n0, u + r * F + n0, n1 - n0);
        } else {
          tm.barrier();
          const auto [e0, e1] = tm.part(0, R * F, 16);
          activate(g + e0, u + e0, e1 - e0);
        }
        tm.barrier();
        residual(tm, g, F, P.down.w, PS.post_ffn_norm ? P.post_ffn_norm : nullptr, P.down.bias);
      }
    }
    if (l == L) return;
    const DecoderLayerWeights& W = w_.layers[static_cast<std::size_t>(l)];
    const LayerSpec& LS = c.layers[static_cast<std::size_t>(l)];
    if (LS.mixer == Mixer::GatedDeltaNet) {
      linear_attention(tm, l);
      return;
    }
    // RoPE and the cache write (the new keys and values appended: cache [B, H_kv, T, D]), shared
    // by head: unit (r, j) is row r's query head j (q norm and RoPE, then its copy into the decode
    // kernel's Q unless that reads q in place) for j < H, else key/value head j - H (k norm and
    // RoPE of the key, then the key and the value into the cache). A decode step has one row per
    // sequence: split by rows, one member would do it all while the others wait.
    float* Kc = f16 ? nullptr : cache.keys(l).data<float>();
    float* Vc = f16 ? nullptr : cache.values(l).data<float>();
    std::uint16_t* Kh = f16 ? cache.keys_f16(l) : nullptr;
    std::uint16_t* Vh = f16 ? cache.values_f16(l) : nullptr;
    const i64 U = H + Hkv;
    const auto [u0, u1] = tm.part(0, R * U);
    // The cache lines this member will write, fetched for writing while the products run: written
    // cold, after the products, they took ~2 us per layer on a Zen 2 (lines and pages not cached).
    // (Decode rows only: a prompt's rows are written long after, their lines evicted again.)
    for (i64 un = u0; un < u1 && R <= kernels::qgemm_decode_max_m(); ++un) {
      if (un % U < H) continue;
      const i64 r = un / U, dst = ((row_b[static_cast<std::size_t>(r)] * Hkv + un % U - H) * T + pos[static_cast<std::size_t>(r)]) * D;
      const i64 bytes = D * (f16 ? 2 : 4);
      const char* kp = f16 ? reinterpret_cast<const char*>(Kh + dst) : reinterpret_cast<const char*>(Kc + dst);
      const char* vp = f16 ? reinterpret_cast<const char*>(Vh + dst) : reinterpret_cast<const char*>(Vc + dst);
      for (i64 o = 0; o < bytes; o += 64) __builtin_prefetch(kp + o, 1, 3), __builtin_prefetch(vp + o, 1, 3);
    }
    const float* hm = norm(tm, W.attn_norm);
    const kernels::Q8Rows* hq = shared_q8(hm, W.q.w);
    if (LS.attn_output_gate)  // rows [q_0, gate_0, q_1, gate_1, ...] (head by head), split below
      product(tm, hm, C, W.q.w, qg, 2 * HD, with_bias(W.q.bias, hq));
    else
      product(tm, hm, C, W.q.w, q, HD, with_bias(W.q.bias, hq));
    product(tm, hm, C, W.k.w, k, KD, with_bias(W.k.bias, hq));
    product(tm, hm, C, W.v.w, v, KD, with_bias(W.v.bias, hq));
    tm.barrier();
    if (LS.qk_norm_whole) {  // over all heads of a row at once (OLMoE): by rows, before the heads split
      const auto [r0, r1] = tm.part(0, R);
      for (i64 r = r0; r < r1; ++r) {
        kernels::rms_norm_rows_f32(q + r * HD, HD, nullptr, q + r * HD, HD, W.q_norm, 1, HD, c.norm_eps);
        kernels::rms_norm_rows_f32(k + r * KD, KD, nullptr, k + r * KD, KD, W.k_norm, 1, KD, c.norm_eps);
      }
      tm.barrier();
    }
    const RopeSpec* rope = LS.rope >= 0 ? &c.ropes[static_cast<std::size_t>(LS.rope)] : nullptr;
    const i64 half = rope ? rope->dims / 2 : 0;
    const float* cos_l = rope ? cosv[static_cast<std::size_t>(LS.rope)] : nullptr;
    const float* sin_l = rope ? sinv[static_cast<std::size_t>(LS.rope)] : nullptr;
    // Row by row, the member's query heads [q0, q1) and key/value heads [k0, k1) of the row.
    for (i64 r = u0 / U; r * U < u1; ++r) {
      const i64 j0 = std::max<i64>(u0 - r * U, 0), j1 = std::min<i64>(u1 - r * U, U);
      const i64 q0 = std::min(j0, H), q1 = std::min(j1, H), k0 = std::max(j0, H) - H, k1 = std::max(j1, H) - H;
      const i64 b = row_b[static_cast<std::size_t>(r)], p = pos[static_cast<std::size_t>(r)];
      if (q1 > q0) {
        float* qh = q + r * HD + q0 * D;
        if (LS.attn_output_gate)
          for (i64 j = q0; j < q1; ++j) {
            std::memcpy(q + r * HD + j * D, qg + r * 2 * HD + j * 2 * D, static_cast<std::size_t>(D) * sizeof(float));
            std::memcpy(gate + r * HD + j * D, qg + r * 2 * HD + j * 2 * D + D, static_cast<std::size_t>(D) * sizeof(float));
          }
        if (LS.qk_norm && !LS.qk_norm_whole) kernels::rms_norm_rows_f32(qh, D, nullptr, qh, D, W.q_norm, q1 - q0, D, c.norm_eps);
        if (rope)
          kernels::rope_apply_f32(qh, 1, q1 - q0, D, HD, rope->dims, cos_l + r * half, sin_l + r * half, rope->style);
        if (q_len[static_cast<std::size_t>(b)] && !q_in_place)  // Q of the decode kernel: [B, H, Lq, D]
          for (i64 j = q0; j < q1; ++j)
            std::memcpy(qd + ((b * H + j) * Lq + row_t[static_cast<std::size_t>(r)]) * D, q + r * HD + j * D,
                        static_cast<std::size_t>(D) * sizeof(float));
      }
      if (k1 > k0) {
        float* kh = k + r * KD + k0 * D;
        if (LS.qk_norm && !LS.qk_norm_whole) kernels::rms_norm_rows_f32(kh, D, nullptr, kh, D, W.k_norm, k1 - k0, D, c.norm_eps);
        if (rope)
          kernels::rope_apply_f32(kh, 1, k1 - k0, D, KD, rope->dims, cos_l + r * half, sin_l + r * half, rope->style);
      }
      for (i64 j = k0; j < k1; ++j) {
        const i64 dst = ((b * Hkv + j) * T + p) * D;
        if (f16) {  // rounded to the nearest half once, here
          kernels::float_to_half_rows(k + r * KD + j * D, Kh + dst, D);
          kernels::float_to_half_rows(v + r * KD + j * D, Vh + dst, D);
        } else {
          std::memcpy(Kc + dst, k + r * KD + j * D, static_cast<std::size_t>(D) * sizeof(float));
          std::memcpy(Vc + dst, v + r * KD + j * D, static_cast<std::size_t>(D) * sizeof(float));
        }
      }
    }
  };
  // The decode kernel's parameters: the new queries of every decoding sequence (qd [B, H, Lq, D],
  // out to od) over the cache [B, Hkv, T, D]; `independent`: each sequence gets the bits it gets
  // alone (how its keys are split depends on its own lengths only). The layer's scale, window
  // and soft-cap are set per layer (layer_params).
  kernels::DecodeParams dp;
  dp.B = B, dp.H = H, dp.H_kv = Hkv, dp.Lq = Lq, dp.D = D;
  dp.q_sb = H * Lq * D, dp.q_sh = Lq * D, dp.q_st = D;
  dp.o_sb = dp.q_sb, dp.o_sh = dp.q_sh, dp.o_st = dp.q_st;
  dp.k_sb = Hkv * T * D, dp.k_sh = T * D, dp.k_st = D;
  dp.v_sb = dp.k_sb, dp.v_sh = dp.k_sh, dp.v_st = dp.k_st;
  dp.q_len = q_len.data();
  dp.k_len = k_len.data();
  dp.independent = true;
  auto layer_params = [&](i64 l) {
    const LayerSpec& ls = c.layers[static_cast<std::size_t>(l)];
    dp.scale = scale_of(ls);
    dp.window = ls.window;
    dp.softcap = ls.attn_softcap;
    dp.sinks = w_.layers[static_cast<std::size_t>(l)].sinks;
  };
  // A sequence's few new queries attend one query row at a time, each as the decode step of that
  // token alone would (its own key count, so its own split of the keys): a pass over a few new
  // tokens (speculative decoding's verification of a draft, a short prompt) gives each token's
  // row the bits of decoding the tokens one by one, at any depth and with any window. Row i of
  // the calls: sequence b's query i (when it has one) over its first k_len - q_len + 1 + i keys.
  std::vector<std::vector<i64>> row_q_len(static_cast<std::size_t>(Lq > 1 ? Lq : 0)), row_k_len(row_q_len.size());
  for (std::size_t i = 0; i < row_q_len.size(); ++i)
    for (i64 b = 0; b < B; ++b) {
      const i64 n = q_len[static_cast<std::size_t>(b)], has = n > static_cast<i64>(i) ? 1 : 0;
      row_q_len[i].push_back(has);
      row_k_len[i].push_back(has ? k_len[static_cast<std::size_t>(b)] - n + 1 + static_cast<i64>(i) : 0);
    }
  // Calls `call(params, Q, O)` once for the whole step (one query per sequence) or once per row.
  auto by_rows = [&](const kernels::DecodeParams& base, const auto& call) {
    if (row_q_len.empty()) return call(base, qd, od);
    for (std::size_t i = 0; i < row_q_len.size(); ++i) {
      kernels::DecodeParams p = base;
      p.Lq = 1, p.q_len = row_q_len[i].data(), p.k_len = row_k_len[i].data();
      call(p, qd + static_cast<i64>(i) * base.q_st, od + static_cast<i64>(i) * base.o_st);
    }
  };
  // The decode kernel's output rows back into att [R, H*D] (rows r0..r1).
  auto gather_rows = [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const i64 b = row_b[static_cast<std::size_t>(r)], t = row_t[static_cast<std::size_t>(r)];
      if (!q_len[static_cast<std::size_t>(b)]) continue;
      for (i64 hh = 0; hh < H; ++hh)
        std::memcpy(att + r * HD + hh * D, od + ((b * H + hh) * Lq + t) * D, static_cast<std::size_t>(D) * sizeof(float));
    }
  };
  // The attention weights of layer l (capture: one sequence, every row new, float32 cache), as
  // eager attention computes them: the reference kernel over the cache's keys.
  auto capture_weights = [&](i64 l) {
    const LayerSpec& ls = c.layers[static_cast<std::size_t>(l)];
    kernels::AttnParams p;
    p.B = 1, p.H = H, p.Lq = R, p.Lk = R, p.D = D, p.Dv = D, p.H_kv = Hkv;
    p.q_sh = D, p.q_st = HD;
    p.k_sh = T * D, p.k_st = D, p.v_sh = T * D, p.v_st = D;
    p.o_sh = D, p.o_st = HD;
    p.scale = scale_of(ls);
    p.causal = true;
    p.window = ls.window;
    p.softcap = ls.attn_softcap;
    p.sinks = w_.layers[static_cast<std::size_t>(l)].sinks;  // (their share goes to no key: rows sum below 1)
    Tensor weights = Tensor::empty({H, R, R});
    std::vector<float> o(static_cast<std::size_t>(R * HD));
    kernels::attention_ref_forward<float>(o.data(), nullptr, weights.data<float>(), q, cache.keys(l).data<float>(),
                                          cache.values(l).data<float>(), p);
    capture->layers.push_back(weights);
  };
  // Attention of layer l over the cache, outside a team: one decode call for every decoding
  // sequence, then one FlashAttention call per prefilling sequence (the kernels split their work over the threads).
  auto attention = [&](i64 l) {
    if (c.layers[static_cast<std::size_t>(l)].mixer == Mixer::GatedDeltaNet) {  // done in before(): no map
      if (capture) capture->layers.push_back(Tensor());
      return;
    }
    layer_params(l);
    if (capture) capture_weights(l);
    if (Lq) {
      by_rows(dp, [&](const kernels::DecodeParams& p, const float* Q, float* O) {
        if (f16)
          kernels::decode_attention_forward_f16(O, Q, cache.keys_f16(l), cache.values_f16(l), p);
        else
          kernels::decode_attention_forward(O, Q, cache.keys(l).data<float>(), cache.values(l).data<float>(), p);
      });
      gather_rows(0, R);
    }
    const LayerSpec& ls = c.layers[static_cast<std::size_t>(l)];
    for (i64 b = 0; b < B; ++b) {
      const i64 n = n_new[static_cast<std::size_t>(b)];
      if (n == 0 || q_len[static_cast<std::size_t>(b)]) continue;
      const i64 r0 = first[static_cast<std::size_t>(b)];
      cache.attend_prefill(l, b, n, k_len[static_cast<std::size_t>(b)], q + r0 * HD, D, HD, att + r0 * HD, D, HD,
                           {.scale = scale_of(ls), .window = ls.window, .softcap = ls.attn_softcap,
                            .sinks = w_.layers[static_cast<std::size_t>(l)].sinks});
    }
  };
  // A step where every sequence decodes (the common generation step) runs as a single team,
  // attention included: the workers are woken once per step, not twice per layer (a futex
  // wake-up costs tens of microseconds on a VM, against ~0.3 ms of work per layer). The decode
  // kernel shares its tasks among the members (long contexts split their keys over them), with the
  // same bits as the call outside a team.
  bool one_team = Lq > 0 && !capture;
  for (i64 b = 0; b < B; ++b)
    if (n_new[static_cast<std::size_t>(b)] > 0 && !q_len[static_cast<std::size_t>(b)]) one_team = false;
  // The rows whose logits are wanted when not every row's: the last new token of each sequence,
  // normalised into h, then the output head (rows as alone: a sequence's logits do not depend on
  // the others).
  std::vector<i64> seqs;
  for (i64 b = 0; b < B; ++b)
    if (n_new[static_cast<std::size_t>(b)] > 0) seqs.push_back(b);
  const i64 S = static_cast<i64>(seqs.size());
  kernels::QGemmOptions heads = plain;
  heads.rows_alone = true;
  float* logits = all_logits ? nullptr : ws.last.get(S * V);
  auto last_rows = [&](float* hs) {
    for (i64 i = 0; i < S; ++i) {
      const i64 b = seqs[static_cast<std::size_t>(i)];
      const i64 r = first[static_cast<std::size_t>(b)] + n_new[static_cast<std::size_t>(b)] - 1;
      kernels::rms_norm_rows_f32(hs + i * C, C, nullptr, x + r * C, C, w_.norm, 1, C, c.norm_eps);
    }
  };
  if (q_in_place) {
    dp.q_sb = HD, dp.q_sh = D, dp.q_st = D;
    dp.o_sb = HD, dp.o_sh = D, dp.o_st = D;
    qd = q, od = att;
  }
  if (one_team) {
    // Scratch for the layer whose parameters need the most (the split depends on the window).
    i64 scratch_floats = 1;
    for (i64 l = 0; l < L; ++l) {
      layer_params(l);
      by_rows(dp, [&](const kernels::DecodeParams& p, const float*, float*) {
        scratch_floats = std::max(scratch_floats, kernels::decode_attention_team_scratch(p));
      });
    }
    float* scratch = ws.dscratch.get(scratch_floats);
    parallel_team(num_threads(), [&](Team& tm) {
      kernels::DecodeParams lp = dp;  // this member's copy, set per layer
      for (i64 l = 0; l <= L; ++l) {
        before(tm, l);
        if (l == L) {
          // The output head in the same team (its rows normalised by every member into its own
          // copy of h, as the layers' norms): no second wake-up of the workers per step, and
          // they start the head's 30 MB (SmolLM2) together instead of one wake-up apart.
          if (!all_logits) {
            float* hs = hp + tm.rank() * R * C;
            last_rows(hs);
            kernels::qgemm_part(S, hs, C, w_.lm_head, logits, V, heads, tm.rank(), tm.size());
          }
          break;
        }
        const LayerSpec& ls = c.layers[static_cast<std::size_t>(l)];
        if (ls.mixer == Mixer::GatedDeltaNet) continue;  // (done in before(), which ends after a barrier)
        tm.barrier();
        lp.scale = scale_of(ls), lp.window = ls.window, lp.softcap = ls.attn_softcap;
        lp.sinks = w_.layers[static_cast<std::size_t>(l)].sinks;
        by_rows(lp, [&](const kernels::DecodeParams& p, const float* Q, float* O) {
          if (f16)
            kernels::decode_attention_forward_f16(tm, scratch, O, Q, cache.keys_f16(l), cache.values_f16(l), p);
          else
            kernels::decode_attention_forward(tm, scratch, O, Q, cache.keys(l).data<float>(),
                                              cache.values(l).data<float>(), p);
        });
        if (!q_in_place) {
          const auto [r0, r1] = tm.part(0, R);
          gather_rows(r0, r1);
          tm.barrier();
        }
      }
    });
  } else {
    for (i64 l = 0; l <= L; ++l) {
      parallel_team(num_threads(), [&](Team& tm) { before(tm, l); });
      if (l < L) attention(l);
    }
  }
  cache.advance(n_new);

  // The rows whose logits are wanted: every row, or the last new token of each sequence.
  if (all_logits) {
    kernels::rms_norm_rows_f32(h, C, nullptr, x, C, w_.norm, R, C, c.norm_eps);
    float* all = ws.last.get(R * V);
    kernels::qgemm(R, h, C, w_.lm_head, all, V, plain);
    if (c.final_softcap > 0)
      parallel_for(0, R, 1, [&](i64 r0, i64 r1) { softcap_f32(all + r0 * V, (r1 - r0) * V, c.final_softcap); });
    float* o = out.data<float>();
    for (i64 r = 0; r < R; ++r)
      std::memcpy(o + (row_b[static_cast<std::size_t>(r)] * Tn + row_t[static_cast<std::size_t>(r)]) * V, all + r * V,
                  static_cast<std::size_t>(V) * sizeof(float));
    return out;
  }
  if (!one_team) {
    last_rows(h);
    kernels::qgemm(S, h, C, w_.lm_head, logits, V, heads);
  }
  if (c.final_softcap > 0)
    parallel_for(0, S * V, 4096, [&](i64 e0, i64 e1) { softcap_f32(logits + e0, e1 - e0, c.final_softcap); });
  float* o = out.data<float>();
  for (i64 i = 0; i < S; ++i)
    std::memcpy(o + seqs[static_cast<std::size_t>(i)] * V, logits + i * V, static_cast<std::size_t>(V) * sizeof(float));
  return out;
}

}  // namespace qkv::models
