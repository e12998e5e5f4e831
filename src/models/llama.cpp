// LlamaForCausalLM (see llama.h): the cached forward of the Llama family. Config parsing and
// the Hugging Face / GGUF files are in llama_io.cpp.
#include "qkv/models/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/infer/kv_cache.h"
#include "qkv/io/mapped_file.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/kernels/half.h"
#include "qkv/kernels/rms_norm.h"
#include "qkv/kernels/swiglu.h"

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
      p_ = static_cast<float*>(aligned_alloc_bytes(want * sizeof(float), "Llama forward workspace"));
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
  Buf x, h, hp, q, k, v, att, g, u, cos, sin, qd, od, last, dscratch;
};
Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

std::string weight_desc(const kernels::QMatrix& m) {
  return std::string(kernels::qtype_name(m.type)) + " [" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + "]";
}

void check_matrix(const kernels::QMatrix& m, i64 rows, i64 cols, const std::string& what) {
  if (!m.data || m.rows != rows || m.cols != cols)
    throw FormatError("LlamaForCausalLM: " + what + " is " + (m.data ? weight_desc(m) : std::string("missing")) +
                      ", the config needs [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
}

}  // namespace

LlamaForCausalLM::Rows8Buffer::Rows8Buffer(std::size_t bytes)
    : p(aligned_alloc_bytes(bytes, "decode layout of a weight")), n(bytes) {}
LlamaForCausalLM::Rows8Buffer::~Rows8Buffer() { aligned_free(p); }  // to the system, not the block cache

// Every matrix of the weights (the embedding last): the ones set_activations may lay out.
std::vector<kernels::QMatrix*> LlamaForCausalLM::matrices() {
  std::vector<kernels::QMatrix*> ms;
  for (LlamaLayer& L : w_.layers)
    for (LlamaLinear* lin : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) ms.push_back(&lin->w);
  ms.push_back(&w_.lm_head);
  ms.push_back(&w_.embed);
  return ms;
}

void LlamaForCausalLM::set_activations(kernels::QActivations a) {
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
  std::vector<std::pair<kernels::QMatrix*, std::int64_t>> laid;  // matrix, offset in the buffer
  std::int64_t total = 0;
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
    const std::int64_t offset = entry.second;
    const std::int64_t bytes = kernels::qgemm_rows8_bytes(*m), groups = m->rows / 8, group_bytes = 8 * m->row_bytes;
    void* out = static_cast<std::uint8_t*>(rows8_.back()->p) + offset;
    const auto* d = static_cast<const std::uint8_t*>(m->data);
    const io::MappedFile* file = w_.mapping.get();
    const auto at = reinterpret_cast<std::uintptr_t>(d), begin = reinterpret_cast<std::uintptr_t>(file ? file->data() : nullptr);
    if (file && (at < begin || at - begin + static_cast<std::uint64_t>(bytes) > file->size())) file = nullptr;
    // ~1 MiB of rows at a time, their pages given back as soon as they are copied (the resident
    // set never holds a matrix twice).
    const std::int64_t step = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / group_bytes);
    parallel_for(0, groups, step, [&](std::int64_t g0, std::int64_t g1) {
      for (std::int64_t c0 = g0; c0 < g1; c0 += step) {
        const std::int64_t c1 = std::min(g1, c0 + step);
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

std::int64_t LlamaForCausalLM::decode_layout_bytes() const {
  std::int64_t n = 0;
  for (const auto& b : rows8_) n += static_cast<std::int64_t>(b->n);
  return n;
}

LlamaForCausalLM::LlamaForCausalLM(LlamaConfig config, LlamaWeights weights)
    : cfg_(std::move(config)), w_(std::move(weights)) {
  // Decode layouts belong to the model that made them (weights copied from another model keep
  // pointers into its buffers): this one reads the blocks until set_activations lays them out.
  for (kernels::QMatrix* m : matrices()) m->rows8 = nullptr;
  check_llama_config(cfg_);
  const LlamaConfig& c = cfg_;
  const i64 C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const i64 H = c.num_attention_heads, Hkv = c.num_key_value_heads, V = c.vocab_size;
  check_matrix(w_.embed, V, C, "the token embedding");
  check_matrix(w_.lm_head, V, C, "the output head");
  if (!w_.norm) throw FormatError("LlamaForCausalLM: the final norm weight is missing");
  if (static_cast<i64>(w_.layers.size()) != c.num_hidden_layers)
    throw FormatError("LlamaForCausalLM: " + std::to_string(w_.layers.size()) + " layers of weights for a config of " +
                      std::to_string(c.num_hidden_layers));
  for (std::size_t i = 0; i < w_.layers.size(); ++i) {
    const LlamaLayer& l = w_.layers[i];
    const std::string p = "layer " + std::to_string(i) + " ";
    check_matrix(l.q.w, H * D, C, p + "q_proj");
    check_matrix(l.k.w, Hkv * D, C, p + "k_proj");
    check_matrix(l.v.w, Hkv * D, C, p + "v_proj");
    check_matrix(l.o.w, C, H * D, p + "o_proj");
    check_matrix(l.gate.w, F, C, p + "gate_proj");
    check_matrix(l.up.w, F, C, p + "up_proj");
    check_matrix(l.down.w, C, F, p + "down_proj");
    if (!l.attn_norm || !l.ffn_norm) throw FormatError("LlamaForCausalLM: " + p + "norm weights are missing");
    if (c.attention_bias && (!l.q.bias || !l.k.bias || !l.v.bias))
      throw FormatError("LlamaForCausalLM: " + p + "q/k/v biases are missing (the config has attention_bias)");
  }
  inv_freq_ = kernels::rope_inv_freq(c.rope_dim, c.rope_theta, c.rope_scaling);
  if (!w_.rope_freq_factors.empty()) {
    if (w_.rope_freq_factors.size() != inv_freq_.size())
      throw FormatError("LlamaForCausalLM: rope_freqs has " + std::to_string(w_.rope_freq_factors.size()) +
                        " factors for " + std::to_string(inv_freq_.size()) + " frequencies");
    for (std::size_t i = 0; i < inv_freq_.size(); ++i) {
      const float f = w_.rope_freq_factors[i];
      if (!(f > 0) || !std::isfinite(f))
        throw FormatError("LlamaForCausalLM: rope_freqs factor " + std::to_string(i) + " is " + std::to_string(f) +
                          " (must be finite and > 0)");
      inv_freq_[i] = inv_freq_[i] / f;  // llama.cpp: theta / freq_factor
    }
  }
}

std::int64_t LlamaForCausalLM::weight_bytes() const {
  auto bytes = [](const kernels::QMatrix& m) { return m.rows * m.row_bytes; };
  i64 n = bytes(w_.lm_head);
  for (const LlamaLayer& l : w_.layers)
    n += bytes(l.q.w) + bytes(l.k.w) + bytes(l.v.w) + bytes(l.o.w) + bytes(l.gate.w) + bytes(l.up.w) + bytes(l.down.w);
  return n;
}

infer::KVCacheOptions LlamaForCausalLM::cache_options(i64 batch, i64 max_len) const {
  return {.num_layers = cfg_.num_hidden_layers,
          .batch = batch,
          .num_heads = cfg_.num_attention_heads,
          .num_kv_heads = cfg_.num_key_value_heads,
          .max_len = max_len,
          .head_dim = cfg_.head_dim,
          .dtype = kv_type()};
}

Tensor LlamaForCausalLM::forward_cached(const Tensor& ids, const std::vector<i64>& n_new, infer::KVCache& cache,
                                        bool all_logits) const {
  const LlamaConfig& c = cfg_;
  const infer::KVCacheOptions& co = cache.options();
  if (ids.dtype() != DType::I64 || ids.dim() != 2 || ids.shape()[0] != co.batch)
    throw ShapeError("LlamaForCausalLM::forward_cached: ids must be I64 [" + std::to_string(co.batch) +
                     ", Tn] for this cache, got " + ids.shape_str() + " " + dtype_name(ids.dtype()));
  if (co.num_layers != c.num_hidden_layers || co.num_heads != c.num_attention_heads ||
      co.num_kv_heads != c.num_key_value_heads || co.head_dim != c.head_dim)
    throw ShapeError("LlamaForCausalLM::forward_cached: the cache is shaped for another model");
  cache.check_room(n_new);
  const bool f16 = co.dtype == infer::KVType::F16;
  const i64 B = co.batch, Tn = ids.shape()[1], T = co.max_len;
  const i64 C = c.hidden_size, F = c.intermediate_size, D = c.head_dim, H = c.num_attention_heads;
  const i64 Hkv = c.num_key_value_heads, V = c.vocab_size, HD = H * D, KD = Hkv * D;

  // The new tokens of every sequence, as rows of one matrix: row r is token row_t[r] of
  // sequence row_b[r], at position pos[r]. Everything is checked before anything is written.
  std::vector<i64> row_b, row_t, pos, first(static_cast<std::size_t>(B), -1);
  const Tensor src = ids.contiguous();
  const i64* s = src.data<i64>();
  for (i64 b = 0; b < B; ++b) {
    const i64 n = n_new[static_cast<std::size_t>(b)], start = cache.length(b);
    if (n > Tn)
      throw ShapeError("LlamaForCausalLM::forward_cached: n_new[" + std::to_string(b) + "] = " + std::to_string(n) +
                       " exceeds the " + std::to_string(Tn) + " ids given");
    if (start + n > c.max_position_embeddings)
      throw ValueError("LlamaForCausalLM::forward_cached: sequence " + std::to_string(b) + " would reach position " +
                       std::to_string(start + n) + ", past max_position_embeddings " +
                       std::to_string(c.max_position_embeddings));
    if (n > 0) first[static_cast<std::size_t>(b)] = static_cast<i64>(row_b.size());
    for (i64 j = 0; j < n; ++j) {
      const i64 id = s[b * Tn + j];
      if (id < 0 || id >= V)
        throw IndexError("LlamaForCausalLM::forward_cached: token id " + std::to_string(id) + " of sequence " +
                         std::to_string(b) + " out of range [0, " + std::to_string(V) + ")");
      row_b.push_back(b);
      row_t.push_back(j);
      pos.push_back(start + j);
    }
  }
  const i64 R = static_cast<i64>(row_b.size());
  Tensor out = all_logits ? Tensor::zeros({B, Tn, V}) : Tensor::zeros({B, V});
  if (R == 0) return out;

  Workspace& ws = workspace();
  float* x = ws.x.get(R * C);
  float* h = ws.h.get(R * C);
  float* q = ws.q.get(R * HD);
  float* k = ws.k.get(R * KD);
  float* v = ws.v.get(R * KD);
  float* att = ws.att.get(R * HD);
  float* g = ws.g.get(R * F);
  float* u = ws.u.get(R * F);
  const i64 half = c.rope_dim / 2;
  float* cosv = ws.cos.get(R * half);
  float* sinv = ws.sin.get(R * half);
  kernels::rope_tables(cosv, sinv, pos.data(), R, inv_freq_.data(), half);

  // (A row in the decode layout is read from it: the blocks' pages were given back.)
  std::vector<std::uint8_t> row_bytes;
  for (i64 r = 0; r < R; ++r) {
    const i64 id = s[row_b[static_cast<std::size_t>(r)] * Tn + row_t[static_cast<std::size_t>(r)]];
    const std::uint8_t* src = static_cast<const std::uint8_t*>(w_.embed.data) + id * w_.embed.row_bytes;
    if (w_.embed.rows8 != nullptr && id < w_.embed.rows / 8 * 8) {
      row_bytes.resize(static_cast<std::size_t>(w_.embed.row_bytes));
      kernels::qgemm_rows8_row(w_.embed, id, row_bytes.data());
      src = row_bytes.data();
    }
    kernels::dequantize_row(w_.embed.type, src, x + r * C, C);
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
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
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
  auto product = [&](Team& tm, const float* A, i64 lda, const kernels::QMatrix& W, float* out, i64 ldo,
                     const kernels::QGemmOptions& o) { kernels::qgemm_part(R, A, lda, W, out, ldo, o, tm.rank(), tm.size()); };
  // Each member normalises every row into its own copy of h (the same values: one function of
  // the row), so the products that read h need no barrier after the norm: two fewer per layer.
  const i64 members = std::max(1, num_threads());
  float* hp = ws.hp.get(members * R * C);
  auto norm = [&](Team& tm, const float* w) -> const float* {
    if (tm.size() > members) throw ValueError("LlamaForCausalLM: a team larger than num_threads()");
    float* hm = hp + tm.rank() * R * C;
    kernels::rms_norm_rows_f32(hm, C, nullptr, x, C, w, R, C, c.rms_norm_eps);
    return hm;
  };
  // The steps between two attentions run as one team of threads (a barrier between steps):
  // a step with a prefilling sequence wakes the workers twice per layer, not once per product
  // (a decoding step runs as one team throughout, below).
  //   before(l): the rest of layer l-1 (o_proj and the feed-forward), then layer l's norm, q/k/v
  //              products, RoPE and cache write; before(L): the rest of the last layer.
  auto before = [&](Team& tm, i64 l) {
    if (l > 0) {
      const LlamaLayer& P = w_.layers[static_cast<std::size_t>(l - 1)];
      product(tm, att, HD, P.o.w, x, C, accumulate);
      tm.barrier();
      const float* hm = norm(tm, P.ffn_norm);
      const kernels::Q8Rows* hq = shared_q8(hm, P.gate.w);
      const kernels::QGemmOptions gu = with_bias(nullptr, hq);
      product(tm, hm, C, P.gate.w, g, F, gu);
      product(tm, hm, C, P.up.w, u, F, gu);
      // Where every member's gate and up products wrote the same columns (the decode and Q8
      // paths split by columns), each finishes SwiGLU on its own (elementwise: the same bits),
      // with no barrier between the products and SwiGLU.
      bool own_columns = true;
      for (int m = 0; m < tm.size() && own_columns; ++m) {
        const auto cg = kernels::qgemm_part_columns(R, P.gate.w, gu, m, tm.size());
        own_columns = cg && cg == kernels::qgemm_part_columns(R, P.up.w, gu, m, tm.size());
      }
      if (own_columns) {
        const auto [n0, n1] = *kernels::qgemm_part_columns(R, P.gate.w, gu, tm.rank(), tm.size());
        for (i64 r = 0; r < R; ++r) kernels::swiglu_forward_f32(g + r * F + n0, g + r * F + n0, u + r * F + n0, n1 - n0);
      } else {
        tm.barrier();
        const auto [e0, e1] = tm.part(0, R * F, 16);
        kernels::swiglu_forward_f32(g + e0, g + e0, u + e0, e1 - e0);
      }
      tm.barrier();
      product(tm, g, F, P.down.w, x, C, accumulate);
      tm.barrier();
    }
    if (l == c.num_hidden_layers) return;
    const LlamaLayer& L = w_.layers[static_cast<std::size_t>(l)];
    // RoPE and the cache write (the new keys and values appended: cache [B, H_kv, T, D]), shared
    // by head: unit (r, j) is row r's query head j (RoPE, then its copy into the decode kernel's
    // Q unless that reads q in place) for j < H, else key/value head j - H (RoPE of the key, then
    // the key and the value into the cache). A decode step has one row per sequence: split by
    // rows, one member would do it all while the others wait.
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
    const float* hm = norm(tm, L.attn_norm);
    const kernels::Q8Rows* hq = shared_q8(hm, L.q.w);
    product(tm, hm, C, L.q.w, q, HD, with_bias(L.q.bias, hq));
    product(tm, hm, C, L.k.w, k, KD, with_bias(L.k.bias, hq));
    product(tm, hm, C, L.v.w, v, KD, with_bias(L.v.bias, hq));
    tm.barrier();
    // Row by row, the member's query heads [q0, q1) and key/value heads [k0, k1) of the row.
    for (i64 r = u0 / U; r * U < u1; ++r) {
      const i64 j0 = std::max<i64>(u0 - r * U, 0), j1 = std::min<i64>(u1 - r * U, U);
      const i64 q0 = std::min(j0, H), q1 = std::min(j1, H), k0 = std::max(j0, H) - H, k1 = std::max(j1, H) - H;
      const i64 b = row_b[static_cast<std::size_t>(r)], p = pos[static_cast<std::size_t>(r)];
      if (q1 > q0) {
        kernels::rope_apply_f32(q + r * HD + q0 * D, 1, q1 - q0, D, HD, c.rope_dim, cosv + r * half, sinv + r * half,
                                c.rope_style);
        if (q_len[static_cast<std::size_t>(b)] && !q_in_place)  // Q of the decode kernel: [B, H, Lq, D]
          for (i64 j = q0; j < q1; ++j)
            std::memcpy(qd + ((b * H + j) * Lq + row_t[static_cast<std::size_t>(r)]) * D, q + r * HD + j * D,
                        static_cast<std::size_t>(D) * sizeof(float));
      }
      if (k1 > k0)
        kernels::rope_apply_f32(k + r * KD + k0 * D, 1, k1 - k0, D, KD, c.rope_dim, cosv + r * half, sinv + r * half,
                                c.rope_style);
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
  // alone (how its keys are split depends on its own lengths only).
  kernels::DecodeParams dp;
  dp.B = B, dp.H = H, dp.H_kv = Hkv, dp.Lq = Lq, dp.D = D;
  dp.q_sb = H * Lq * D, dp.q_sh = Lq * D, dp.q_st = D;
  dp.o_sb = dp.q_sb, dp.o_sh = dp.q_sh, dp.o_st = dp.q_st;
  dp.k_sb = Hkv * T * D, dp.k_sh = T * D, dp.k_st = D;
  dp.v_sb = dp.k_sb, dp.v_sh = dp.k_sh, dp.v_st = dp.k_st;
  dp.q_len = q_len.data();
  dp.k_len = k_len.data();
  dp.scale = scale;
  dp.window = c.sliding_window;
  dp.independent = true;
  // The decode kernel's output rows back into att [R, H*D] (rows r0..r1).
  auto gather_rows = [&](i64 r0, i64 r1) {
    for (i64 r = r0; r < r1; ++r) {
      const i64 b = row_b[static_cast<std::size_t>(r)], t = row_t[static_cast<std::size_t>(r)];
      if (!q_len[static_cast<std::size_t>(b)]) continue;
      for (i64 hh = 0; hh < H; ++hh)
        std::memcpy(att + r * HD + hh * D, od + ((b * H + hh) * Lq + t) * D, static_cast<std::size_t>(D) * sizeof(float));
    }
  };
  // Attention of layer l over the cache, outside a team: one decode call for every decoding
  // sequence, then one FlashAttention call per prefilling sequence (the kernels split their work over the threads).
  auto attention = [&](i64 l) {
    if (Lq) {
      if (f16)
        kernels::decode_attention_forward_f16(od, qd, cache.keys_f16(l), cache.values_f16(l), dp);
      else
        kernels::decode_attention_forward(od, qd, cache.keys(l).data<float>(), cache.values(l).data<float>(), dp);
      gather_rows(0, R);
    }
    for (i64 b = 0; b < B; ++b) {
      const i64 n = n_new[static_cast<std::size_t>(b)];
      if (n == 0 || q_len[static_cast<std::size_t>(b)]) continue;
      const i64 r0 = first[static_cast<std::size_t>(b)];
      cache.attend_prefill(l, b, n, k_len[static_cast<std::size_t>(b)], q + r0 * HD, D, HD, att + r0 * HD, D, HD, scale,
                           c.sliding_window);
    }
  };
  // A step where every sequence decodes (the common generation step) runs as a single team,
  // attention included: the workers are woken once per step, not twice per layer (a futex
  // wake-up costs tens of microseconds on a VM, against ~0.3 ms of work per layer). The decode
  // kernel shares its tasks among the members (long contexts split their keys over them), with the
  // same bits as the call outside a team.
  bool one_team = Lq > 0;
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
      kernels::rms_norm_rows_f32(hs + i * C, C, nullptr, x + r * C, C, w_.norm, 1, C, c.rms_norm_eps);
    }
  };
  if (q_in_place) {
    dp.q_sb = HD, dp.q_sh = D, dp.q_st = D;
    dp.o_sb = HD, dp.o_sh = D, dp.o_st = D;
    qd = q, od = att;
  }
  if (one_team) {
    float* scratch = ws.dscratch.get(std::max<i64>(kernels::decode_attention_team_scratch(dp), 1));
    parallel_team(num_threads(), [&](Team& tm) {
      for (i64 l = 0; l <= c.num_hidden_layers; ++l) {
        before(tm, l);
        if (l == c.num_hidden_layers) {
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
        tm.barrier();
        if (f16)
          kernels::decode_attention_forward_f16(tm, scratch, od, qd, cache.keys_f16(l), cache.values_f16(l), dp);
        else
          kernels::decode_attention_forward(tm, scratch, od, qd, cache.keys(l).data<float>(),
                                            cache.values(l).data<float>(), dp);
        if (!q_in_place) {
          const auto [r0, r1] = tm.part(0, R);
          gather_rows(r0, r1);
          tm.barrier();
        }
      }
    });
  } else {
    for (i64 l = 0; l <= c.num_hidden_layers; ++l) {
      parallel_team(num_threads(), [&](Team& tm) { before(tm, l); });
      if (l < c.num_hidden_layers) attention(l);
    }
  }
  cache.advance(n_new);

  // The rows whose logits are wanted: every row, or the last new token of each sequence.
  if (all_logits) {
    kernels::rms_norm_rows_f32(h, C, nullptr, x, C, w_.norm, R, C, c.rms_norm_eps);
    float* logits = ws.last.get(R * V);
    kernels::qgemm(R, h, C, w_.lm_head, logits, V, plain);
    float* o = out.data<float>();
    for (i64 r = 0; r < R; ++r)
      std::memcpy(o + (row_b[static_cast<std::size_t>(r)] * Tn + row_t[static_cast<std::size_t>(r)]) * V, logits + r * V,
                  static_cast<std::size_t>(V) * sizeof(float));
    return out;
  }
  if (!one_team) {
    last_rows(h);
    kernels::qgemm(S, h, C, w_.lm_head, logits, V, heads);
  }
  float* o = out.data<float>();
  for (i64 i = 0; i < S; ++i)
    std::memcpy(o + seqs[static_cast<std::size_t>(i)] * V, logits + i * V, static_cast<std::size_t>(V) * sizeof(float));
  return out;
}

}  // namespace qkv::models
