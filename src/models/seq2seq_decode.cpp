// Seq2SeqDecoderLM (see seq2seq.h): the Seq2Seq decoder one step at a time through
// the KV cache, for infer::generate.
#include <string>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/models/seq2seq.h"
#include "qkv/ops/ops.h"

namespace qkv::models {

using i64 = std::int64_t;

Seq2SeqDecoderLM::Seq2SeqDecoderLM(const Seq2Seq& model, const Tensor& src) : m_(model), src_(src) {
  autograd::NoGradGuard no_grad;
  memory_ = m_.encode(src_);
}

i64 Seq2SeqDecoderLM::vocab_size() const { return m_.options().vocab_size; }
i64 Seq2SeqDecoderLM::max_positions() const { return m_.options().max_positions; }

infer::KVCacheOptions Seq2SeqDecoderLM::cache_options(i64 batch, i64 max_len) const {
  const Seq2SeqOptions& o = m_.options();
  return {.num_layers = o.num_decoder_layers,
          .batch = batch,
          .num_heads = o.num_heads,
          .max_len = max_len,
          .head_dim = o.d_model / o.num_heads,
          .dtype = kv_type()};
}

Tensor Seq2SeqDecoderLM::forward_cached(const Tensor& ids, const std::vector<i64>& n_new, infer::KVCache& cache,
                                        bool all_logits) const {
  autograd::NoGradGuard no_grad;
  const i64 B = src_.size(0);
  if (ids.dtype() != DType::I64 || ids.dim() != 2 || ids.size(0) != B || cache.options().batch != B)
    throw ShapeError("Seq2SeqDecoderLM: ids must be I64 [" + std::to_string(B) + ", Tn] (one row per source), got " +
                     ids.shape_str());
  cache.check_room(n_new);
  const i64 Tn = ids.size(1);
  // Padding rows (t >= n_new[b]) read token <pad>; each row's positions start at its cache length.
  Tensor tok = ids.clone();
  for (i64 b = 0; b < B; ++b)
    for (i64 t = n_new[static_cast<std::size_t>(b)]; t < Tn; ++t) tok.set({b, t}, kSeq2SeqPad);
  const Tensor e = m_.tgt_embed->forward(tok);
  std::vector<Tensor> rows;
  for (i64 b = 0; b < B; ++b) {
    // Positions only for the real rows: padding rows may lie past the table.
    const i64 n = n_new[static_cast<std::size_t>(b)];
    const Tensor xb = e.narrow(0, b, 1);
    if (n == 0) {
      rows.push_back(xb);
      continue;
    }
    const Tensor real = xb.narrow(1, 0, n);
    Tensor placed = m_.pos ? m_.pos->forward(real, cache.length(b)) : m_.sin_pos->forward(real, cache.length(b));
    rows.push_back(n == Tn ? placed : concat({placed, xb.narrow(1, n, Tn - n)}, 1));
  }
  Tensor x = concat(rows, 0);
  const Mask memory_mask = Mask::padding(src_, kSeq2SeqPad);
  const bool pre = m_.options().norm_first;
  const auto& layers = m_.decoder->layers;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const nn::TransformerDecoderBlock& blk = *layers[l];
    const i64 li = static_cast<i64>(l);
    if (pre) {
      x = add(x, infer::cached_self_attention(*blk.self_attn, blk.norm1->forward(x), li, n_new, cache));
      const Tensor n2 = blk.norm2->forward(x);
      x = add(x, blk.cross_attn->forward(n2, memory_, memory_, memory_mask).output);
      x = add(x, blk.ffn->forward(blk.norm3->forward(x)));
    } else {
      x = blk.norm1->forward(add(x, infer::cached_self_attention(*blk.self_attn, x, li, n_new, cache)));
      x = blk.norm2->forward(add(x, blk.cross_attn->forward(x, memory_, memory_, memory_mask).output));
      x = blk.norm3->forward(add(x, blk.ffn->forward(x)));
    }
  }
  cache.advance(n_new);
  if (m_.decoder->norm) x = m_.decoder->norm->forward(x);
  const Tensor logits = m_.generator->forward(x);  // [B, Tn, V]
  if (all_logits) return logits;
  std::vector<Tensor> last;
  for (i64 b = 0; b < B; ++b)
    last.push_back(logits.select(0, b).select(0, std::max<i64>(n_new[static_cast<std::size_t>(b)] - 1, 0)));
  return stack(last, 0).contiguous();
}

}  // namespace qkv::models
