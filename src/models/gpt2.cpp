// GPT2LMHeadModel (see gpt2.h): the full forward for training and the cached
// forward for generation. Config parsing and Hugging Face files are in gpt2_io.cpp.
#include "qkv/models/gpt2.h"

#include <cmath>
#include <cstring>
#include <string>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/ops/ops.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;

nn::Activation activation_of(const GPT2Config& c) {
  return c.activation_function == "gelu" ? nn::Activation::GELU : nn::Activation::GELUTanh;
}

}  // namespace

MemoryEstimate gpt2_memory(const GPT2Config& c) {
  MemoryEstimate est;
  est.add({c.vocab_size, c.n_embd}, c.tie_word_embeddings ? 1 : 2).add({c.n_positions, c.n_embd}).add({c.n_embd}, 2);
  MemoryEstimate block;
  nn::add_encoder_block_memory(block, nn::EncoderBlockOptions{.d_model = c.n_embd, .num_heads = c.n_head, .d_ff = c.d_ff()});
  return est.add(block.scale(c.n_layer));
}

void check_gpt2_config(const GPT2Config& c) {
  if (c.vocab_size < 1 || c.n_positions < 1 || c.n_embd < 1 || c.n_layer < 1 || c.n_head < 1 || c.n_embd % c.n_head)
    throw ValueError("GPT2LMHeadModel: need vocab_size, n_positions, n_embd, n_layer, n_head >= 1 and n_embd % n_head "
                     "== 0 (got vocab_size " + std::to_string(c.vocab_size) + ", n_positions " +
                     std::to_string(c.n_positions) + ", n_embd " + std::to_string(c.n_embd) + ", n_layer " +
                     std::to_string(c.n_layer) + ", n_head " + std::to_string(c.n_head) + ")");
  if (c.n_embd > kGpt2MaxWidth || c.n_inner > kGpt2MaxWidth)
    throw ValueError("GPT2LMHeadModel: n_embd " + std::to_string(c.n_embd) + " or n_inner " + std::to_string(c.n_inner) +
                     " is more than qkv supports (" + std::to_string(kGpt2MaxWidth) + ")");
  gpt2_memory(c).check("GPT2LMHeadModel (vocab_size " + std::to_string(c.vocab_size) + ", n_positions " +
                       std::to_string(c.n_positions) + ", n_embd " + std::to_string(c.n_embd) + ", n_layer " +
                       std::to_string(c.n_layer) + ", n_inner " + std::to_string(c.d_ff()) + ")");
}

GPT2LMHeadModel::GPT2LMHeadModel(const GPT2Config& c) : cfg_(c) {
  check_gpt2_config(c);
  wte = register_module("wte", std::make_shared<nn::Embedding>(
                                   nn::EmbeddingOptions{.num_embeddings = c.vocab_size, .embedding_dim = c.n_embd}));
  wpe = register_module("wpe", std::make_shared<nn::Embedding>(
                                   nn::EmbeddingOptions{.num_embeddings = c.n_positions, .embedding_dim = c.n_embd}));
  for (i64 i = 0; i < c.n_layer; ++i)
    h.push_back(register_module("h." + std::to_string(i),
                                std::make_shared<nn::TransformerEncoderBlock>(nn::EncoderBlockOptions{
                                    .d_model = c.n_embd,
                                    .num_heads = c.n_head,
                                    .d_ff = c.d_ff(),
                                    .dropout = c.dropout,
                                    .activation = activation_of(c),
                                    .norm_first = true,
                                    .layer_norm_eps = c.layer_norm_epsilon})));
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(
                                     nn::LayerNormOptions{.normalized_shape = c.n_embd, .eps = c.layer_norm_epsilon}));
  if (!c.tie_word_embeddings)
    lm_head = register_module("lm_head", std::make_shared<nn::Linear>(nn::LinearOptions{
                                             .in_features = c.n_embd, .out_features = c.vocab_size, .bias = false}));
}

const Tensor& GPT2LMHeadModel::lm_head_weight() const { return lm_head ? lm_head->weight : wte->weight; }

Tensor GPT2LMHeadModel::embed(const Tensor& ids, const Tensor& positions) const {
  return add(wte->forward(ids), wpe->forward(positions));
}

Tensor GPT2LMHeadModel::logits(const Tensor& x) const { return linear(x, lm_head_weight()); }

std::vector<Tensor> GPT2LMHeadModel::hidden_states(const Tensor& ids) const {
  if (ids.dtype() != DType::I64 || ids.dim() != 2)
    throw ShapeError("GPT2LMHeadModel: ids must be I64 [B, T], got " + ids.shape_str() + " " + dtype_name(ids.dtype()));
  const i64 T = ids.shape()[1];
  if (T > cfg_.n_positions)
    throw ValueError("GPT2LMHeadModel: " + std::to_string(T) + " positions exceed n_positions " +
                     std::to_string(cfg_.n_positions));
  std::vector<Tensor> out;
  Tensor x = embed(ids, Tensor::arange(T, DType::I64).unsqueeze(0));
  out.push_back(x);
  for (const auto& blk : h) out.push_back(x = blk->forward(x, Mask::causal()));
  out.back() = ln_f->forward(x);  // transformers applies ln_f to the last hidden state it returns
  return out;
}

Tensor GPT2LMHeadModel::forward(const Tensor& ids) const { return logits(hidden_states(ids).back()); }

void init_gpt2_weights(GPT2LMHeadModel& model, std::uint64_t seed) {
  autograd::NoGradGuard no_grad;
  Generator gen(seed);
  const double std_all = 0.02, std_proj = 0.02 / std::sqrt(2.0 * static_cast<double>(model.config().n_layer));
  auto ends_with = [](const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
  };
  for (auto& [name, p] : model.named_parameters()) {
    if (p.dim() >= 2) {
      const bool proj = ends_with(name, "self_attn.w_o.weight") || ends_with(name, "ffn.linear2.weight");
      p.copy_(mul(Tensor::randn(p.shape(), &gen, p.dtype()), proj ? std_proj : std_all));
    } else if (ends_with(name, ".bias")) {
      p.copy_(Tensor::zeros(p.shape(), p.dtype()));
    } else {
      p.copy_(Tensor::ones(p.shape(), p.dtype()));  // LayerNorm weight
    }
  }
}

infer::KVCacheOptions GPT2LMHeadModel::cache_options(i64 batch, i64 max_len) const {
  return {.num_layers = cfg_.n_layer,
          .batch = batch,
          .num_heads = cfg_.n_head,
          .max_len = max_len,
          .head_dim = cfg_.n_embd / cfg_.n_head,
          .dtype = kv_type()};
}

Tensor GPT2LMHeadModel::forward_cached(const Tensor& ids, const std::vector<i64>& n_new, infer::KVCache& cache,
                                       bool all_logits) const {
  autograd::NoGradGuard no_grad;
  const infer::KVCacheOptions& co = cache.options();
  if (ids.dtype() != DType::I64 || ids.dim() != 2 || ids.shape()[0] != co.batch)
    throw ShapeError("GPT2LMHeadModel::forward_cached: ids must be I64 [" + std::to_string(co.batch) +
                     ", Tn] for this cache, got " + ids.shape_str() + " " + dtype_name(ids.dtype()));
  if (co.num_layers != cfg_.n_layer || co.num_heads != cfg_.n_head || co.head_dim != cfg_.n_embd / cfg_.n_head)
    throw ShapeError("GPT2LMHeadModel::forward_cached: the cache is shaped for another model");
  cache.check_room(n_new);
  const i64 B = co.batch, Tn = ids.shape()[1], C = cfg_.n_embd;
  // Positions continue each sequence; padding rows (t >= n_new[b]) get token 0 at position 0
  // so they index valid rows, and never reach the cache.
  Tensor tok = Tensor::zeros({B, Tn}, DType::I64), pos = Tensor::zeros({B, Tn}, DType::I64);
  {
    const Tensor src = ids.contiguous();
    const i64* s = src.data<i64>();
    i64* t = tok.data<i64>();
    i64* p = pos.data<i64>();
    for (i64 b = 0; b < B; ++b) {
      const i64 n = n_new[static_cast<std::size_t>(b)], start = cache.length(b);
      if (n > Tn)
        throw ShapeError("GPT2LMHeadModel::forward_cached: n_new[" + std::to_string(b) + "] = " + std::to_string(n) +
                         " exceeds the " + std::to_string(Tn) + " ids given");
      if (start + n > cfg_.n_positions)
        throw ValueError("GPT2LMHeadModel::forward_cached: sequence " + std::to_string(b) + " would reach position " +
                         std::to_string(start + n) + ", past n_positions " + std::to_string(cfg_.n_positions));
      for (i64 j = 0; j < n; ++j) {
        const i64 id = s[b * Tn + j];
        if (id < 0 || id >= cfg_.vocab_size)
          throw IndexError("GPT2LMHeadModel::forward_cached: token id " + std::to_string(id) + " of sequence " +
                           std::to_string(b) + " out of range [0, " + std::to_string(cfg_.vocab_size) + ")");
        t[b * Tn + j] = id;
        p[b * Tn + j] = start + j;
      }
    }
  }
  Tensor x = embed(tok, pos);  // [B, Tn, C]
  for (i64 l = 0; l < cfg_.n_layer; ++l) {
    const nn::TransformerEncoderBlock& blk = *h[static_cast<std::size_t>(l)];
    x = add(x, infer::cached_self_attention(*blk.self_attn, blk.norm1->forward(x), l, n_new, cache));
    x = add(x, blk.ffn->forward(blk.norm2->forward(x)));
  }
  cache.advance(n_new);
  if (all_logits) return logits(ln_f->forward(x));
  // The last new token of each sequence: [B, C].
  Tensor last = Tensor::empty({B, C});
  {
    const Tensor xc = x.contiguous();
    for (i64 b = 0; b < B; ++b) {
      const i64 t = std::max<i64>(n_new[static_cast<std::size_t>(b)] - 1, 0);
      std::memcpy(last.data<float>() + b * C, xc.data<float>() + (b * Tn + t) * C, static_cast<std::size_t>(C) * 4);
    }
  }
  return logits(ln_f->forward(last));
}

}  // namespace qkv::models
