// BERT inference on unpadded token sequences (see bert_runner.h).
#include "qkv/infer/bert_runner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>

#include "qkv/core/error.h"
#include "qkv/core/memory.h"
#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/layer_norm.h"

namespace qkv::infer {

using i64 = std::int64_t;

namespace {

// Workspace slots.
enum Slot { kX, kQkv, kCtx, kH, kF, kStats, kLse };

// A parameter's data (the constructor checks that every one is contiguous float32).
const float* data_of(const Tensor& t) { return t.data<float>(); }

}  // namespace

BertRunner::Workspace::~Workspace() {
  for (int i = 0; i < kSlots; ++i) aligned_free(p_[i]);
}

float* BertRunner::Workspace::get(int slot, std::size_t n) {
  if (n > n_[slot]) {
    aligned_free(p_[slot]);
    p_[slot] = nullptr;
    n_[slot] = 0;
    p_[slot] = static_cast<float*>(aligned_alloc_bytes(std::max<std::size_t>(n, 16) * sizeof(float), "BertRunner workspace"));
    n_[slot] = n;
  }
  return p_[slot];
}

BertRunner::BertRunner(std::shared_ptr<const models::BertModel> model) : model_(std::move(model)) {
  if (!model_) throw ValueError("BertRunner: model must be non-null");
  const models::BertConfig& c = model_->config();
  const i64 C = c.hidden_size, F = c.intermediate_size;
  auto check = [](const Tensor& t) {
    if (t.dtype() != DType::F32 || !t.is_contiguous())
      throw ValueError("BertRunner: the model's parameters must be contiguous float32 (got " +
                       std::string(dtype_name(t.dtype())) + " " + t.shape_str() + ")");
  };
  for (const Tensor* t : {&model_->word_embeddings->weight, &model_->position_embeddings->weight,
                          &model_->token_type_embeddings->weight, &model_->embeddings_norm->weight,
                          &model_->embeddings_norm->bias})
    check(*t);
  for (const auto& l : model_->layers) {
    for (const Tensor* t : {&l->query->weight, &l->key->weight, &l->value->weight, &l->attn_out->weight,
                            &l->intermediate->weight, &l->output->weight, &l->query->bias, &l->key->bias,
                            &l->value->bias, &l->attn_out->bias, &l->intermediate->bias, &l->output->bias,
                            &l->attn_norm->weight, &l->attn_norm->bias, &l->output_norm->weight, &l->output_norm->bias})
      check(*t);
    Layer L;
    // [Wq; Wk; Wv] [3C, C] and [bq; bk; bv] [3C]: one product for the three projections.
    L.qkv_weight = Tensor::empty({3 * C, C});
    L.qkv_bias = Tensor::empty({3 * C});
    float* w = L.qkv_weight.data<float>();
    float* b = L.qkv_bias.data<float>();
    const nn::Linear* parts[3] = {l->query.get(), l->key.get(), l->value.get()};
    for (int p = 0; p < 3; ++p) {
      std::memcpy(w + p * C * C, data_of(parts[p]->weight), sizeof(float) * static_cast<std::size_t>(C * C));
      std::memcpy(b + p * C, data_of(parts[p]->bias), sizeof(float) * static_cast<std::size_t>(C));
    }
    // nn.Linear's weight is [out, in]: y = x W^T, i.e. B = W read transposed.
    L.qkv = kernels::PackedB::pack(true, C, 3 * C, w, C);
    L.out = kernels::PackedB::pack(true, C, C, data_of(l->attn_out->weight), C);
    L.inter = kernels::PackedB::pack(true, C, F, data_of(l->intermediate->weight), C);
    L.output = kernels::PackedB::pack(true, F, C, data_of(l->output->weight), F);
    layers_.push_back(std::move(L));
  }
}

void BertRunner::linear(const kernels::PackedB& packed, const Tensor& weight, i64 T, const float* x, float* y,
                        const kernels::GemmEpilogue& e, const Team& team) const {
  const i64 N = packed.N(), K = packed.K();
  if (packed.matches_active_isa())
    kernels::sgemm_packed_part(T, x, K, packed, y, N, e, team.rank(), team.size());
  else if (team.rank() == 0)  // set_isa changed the micro-kernel since the packing (tests): member 0, unpacked
    kernels::sgemm_ex(false, true, T, N, K, 1.f, x, K, weight.data<float>(), K, 0.f, y, N, e, false);
}

double BertRunner::matmul_flops(const std::vector<i64>& lengths) const {
  const models::BertConfig& c = model_->config();
  const double C = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  double tokens = 0, pairs = 0;
  for (i64 L : lengths) {
    tokens += static_cast<double>(L);
    pairs += static_cast<double>(L) * static_cast<double>(L);
  }
  const double per_layer = 2.0 * tokens * (4.0 * C * C + 2.0 * C * F)  // q, k, v, output, feed-forward
                           + 2.0 * 2.0 * pairs * C;                     // QK^T and PV, all heads
  return per_layer * static_cast<double>(c.num_hidden_layers);
}

const float* BertRunner::forward(const std::vector<const std::vector<i64>*>& seqs, Workspace& ws,
                                 std::vector<Tensor>* hidden_states) const {
  const models::BertConfig& c = model_->config();
  const i64 C = c.hidden_size, F = c.intermediate_size, H = c.num_attention_heads, D = C / H;
  // Checks before any work: lengths, ids.
  std::vector<i64> offset(seqs.size() + 1, 0);
  i64 max_len = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    if (!seqs[s]) throw ValueError("BertRunner: sequence " + std::to_string(s) + " is null");
    const auto L = static_cast<i64>(seqs[s]->size());
    if (L > c.max_position_embeddings)
      throw ValueError("BertRunner: sequence " + std::to_string(s) + " has " + std::to_string(L) +
                       " tokens, more than max_position_embeddings " + std::to_string(c.max_position_embeddings));
    for (i64 t = 0; t < L; ++t) {
      const i64 id = (*seqs[s])[static_cast<std::size_t>(t)];
      if (id < 0 || id >= c.vocab_size)
        throw IndexError("BertRunner: token id " + std::to_string(id) + " at position " + std::to_string(t) +
                         " of sequence " + std::to_string(s) + " is outside the vocabulary [0, " +
                         std::to_string(c.vocab_size) + ")");
    }
    offset[s + 1] = offset[s] + L;
    max_len = std::max(max_len, L);
  }
  const i64 T = offset.back();
  MemoryEstimate est;
  est.add({T, 4 * C + 3 * C + F}).add({T}, 2, 8).add({num_threads(), max_len});
  est.check("BertRunner workspace (" + std::to_string(T) + " tokens)");
  const auto n = [](i64 v) { return static_cast<std::size_t>(std::max<i64>(v, 1)); };
  float* x = ws.get(kX, n(T * C));
  float* qkv = ws.get(kQkv, n(T * 3 * C));
  float* ctx = ws.get(kCtx, n(T * C));
  float* h = ws.get(kH, n(T * C));
  float* f = ws.get(kF, n(T * F));
  auto* stats = reinterpret_cast<double*>(ws.get(kStats, n(4 * T)));  // mean [T], rstd [T] in double
  float* lse = ws.get(kLse, n(num_threads() * max_len));
  if (hidden_states) hidden_states->clear();
  auto keep = [&](const float* src) {
    if (!hidden_states) return;
    Tensor t = Tensor::empty({T, C});
    std::memcpy(t.data<float>(), src, sizeof(float) * static_cast<std::size_t>(T * C));
    hidden_states->push_back(std::move(t));
  };
  // LayerNorm of this member's rows of src into dst (in place allowed).
  auto layer_norm = [&](const Team& team, float* dst, const float* src, const nn::LayerNorm& ln) {
    const auto [r0, r1] = team.part(0, T);
    kernels::layer_norm_rows_f32(dst + r0 * C, stats + r0, stats + T + r0, src + r0 * C, ln.weight.data<float>(),
                                 ln.bias.data<float>(), r1 - r0, C, c.layer_norm_eps);
  };
  const float* we = model_->word_embeddings->weight.data<float>();
  const float* pe = model_->position_embeddings->weight.data<float>();
  const float* te = model_->token_type_embeddings->weight.data<float>();
  std::vector<std::int64_t> token_seq(static_cast<std::size_t>(T));  // sequence of each token
  for (std::size_t sq = 0; sq < seqs.size(); ++sq)
    for (i64 t = offset[sq]; t < offset[sq + 1]; ++t) token_seq[static_cast<std::size_t>(t)] = static_cast<i64>(sq);

  kernels::AttnParams ap;
  ap.B = 1;
  ap.H = 1;
  ap.D = ap.Dv = D;
  ap.q_st = ap.k_st = ap.v_st = 3 * C;
  ap.o_st = C;
  ap.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const i64 tasks = static_cast<i64>(seqs.size()) * H;
  std::vector<std::atomic<i64>> next_task(layers_.size());  // attention tasks claimed, per layer
  for (auto& a : next_task) a.store(0, std::memory_order_relaxed);

  // One team for the whole forward: each step split over the members, a barrier between steps
  // (a short sentence's steps are a few microseconds each, less than waking a worker costs).
  parallel_team(num_threads(), [&](Team& team) {
    // Embeddings: (word + position) + token type 0, in the module path's order, then LayerNorm.
    {
      const auto [t0, t1] = team.part(0, T);
      for (i64 t = t0; t < t1; ++t) {
        const auto sq = static_cast<std::size_t>(token_seq[static_cast<std::size_t>(t)]);
        const i64 pos = t - offset[sq];
        const float* wr = we + (*seqs[sq])[static_cast<std::size_t>(pos)] * C;
        const float* pr = pe + pos * C;
        float* xr = x + t * C;
        for (i64 j = 0; j < C; ++j) xr[j] = (wr[j] + pr[j]) + te[j];
      }
      layer_norm(team, x, x, *model_->embeddings_norm);
    }
    team.barrier();
    if (team.rank() == 0) keep(x);
    for (std::size_t li = 0; li < layers_.size(); ++li) {
      const Layer& L = layers_[li];
      const models::BertLayer& ml = *model_->layers[li];
      linear(L.qkv, L.qkv_weight, T, x, qkv, {.bias = L.qkv_bias.data<float>()}, team);
      team.barrier();
      // Attention, one task per (sequence, head), claimed one at a time: q, k, v read in place,
      // the output written into its head's columns of ctx (each task owns its outputs).
      float* my_lse = lse + team.rank() * max_len;
      for (i64 task; (task = next_task[li].fetch_add(1, std::memory_order_relaxed)) < tasks;) {
        const auto sq = static_cast<std::size_t>(task / H);
        const i64 hh = task % H, len = offset[sq + 1] - offset[sq];
        if (len == 0) continue;
        kernels::AttnParams p = ap;
        p.Lq = p.Lk = len;
        const float* base = qkv + offset[sq] * 3 * C + hh * D;
        kernels::flash_attention_forward(ctx + offset[sq] * C + hh * D, my_lse, base, base + C, base + 2 * C, p);
      }
      team.barrier();
      // h = LayerNorm(x + ctx Wo^T + bo)
      linear(L.out, ml.attn_out->weight, T, ctx, h,
             {.bias = ml.attn_out->bias.data<float>(), .residual = x, .ldr = C}, team);
      team.barrier();
      layer_norm(team, h, h, *ml.attn_norm);
      team.barrier();
      // x' = LayerNorm(h + gelu(h Wi^T + bi) Wout^T + bout)
      linear(L.inter, ml.intermediate->weight, T, h, f,
             {.bias = ml.intermediate->bias.data<float>(), .act = kernels::GemmAct::GeluErf}, team);
      team.barrier();
      linear(L.output, ml.output->weight, T, f, x, {.bias = ml.output->bias.data<float>(), .residual = h, .ldr = C},
             team);
      team.barrier();
      layer_norm(team, x, x, *ml.output_norm);
      team.barrier();
      if (team.rank() == 0) keep(x);
    }
  });
  return x;
}

}  // namespace qkv::infer
