// BERT encoder inference without padding: the forward of models::BertModel (post-norm encoder
// layers, GELU erf) on a list of token sequences laid end to end, [sum of lengths, C], with the
// weights packed once for the GEMM and every bias, GELU and residual fused into its product.
//
// Letters (docs/shapes.md): S sequences, L_s the length of sequence s, T = sum_s L_s tokens,
// C hidden size, H heads, D = C / H head dim, F intermediate size.
//
// Per layer, on the T tokens at once (no padded token is ever computed):
//   qkv  [T, 3C] = x @ [Wq; Wk; Wv]^T + [bq; bk; bv]                 one packed GEMM
//   ctx  [T, C]  = per (sequence, head): softmax(q k^T / sqrt(D)) v   flash attention, keys of
//                  the sequence only, read in place from qkv (row stride 3C), written in place
//   h    [T, C]  = LayerNorm(x + ctx @ Wo^T + bo)                     residual in the epilogue
//   f    [T, F]  = gelu(h @ Wi^T + bi)                                GELU in the epilogue
//   x'   [T, C]  = LayerNorm(h + f @ Wout^T + bout)
// Because no sequence shares a product row or an attention call with another, a sequence's
// hidden states are bitwise the same whatever other sequences run with it (batch 1 or 32), and
// for any thread count (the GEMM never splits K; attention tasks own their outputs). The whole
// forward is one parallel_team: every step split over the members, barriers in between.
//
// The numbers are the module path's (BertModel::forward) up to float rounding: the products sum
// in the GEMM's K blocks and the bias is added after them (nn::Linear adds it first).
//
// Thread safety: a BertRunner is read-only once made; any number of threads may call forward()
// at once, each with its own Workspace.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/tensor.h"
#include "qkv/kernels/gemm.h"
#include "qkv/models/bert.h"

namespace qkv::infer {

class BertRunner {
 public:
  // Packs the model's weights (shares the model: its tensors stay alive with the runner).
  explicit BertRunner(std::shared_ptr<const models::BertModel> model);

  // Buffers of one caller, grown to the largest batch seen and reused (a forward pass allocates
  // nothing once warm). Not shared between threads.
  class Workspace {
   public:
    Workspace() = default;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;
    ~Workspace();
    // Floats of slot i, at least n, 64-byte aligned (contents kept only while n does not grow).
    float* get(int slot, std::size_t n);

   private:
    static constexpr int kSlots = 7;
    float* p_[kSlots] = {};
    std::size_t n_[kSlots] = {};
  };

  // seqs: S sequences of token ids (each of length 0 .. max_position_embeddings, ids in
  // [0, vocab_size)) -> the last hidden states [T, C] of every token, sequence after sequence,
  // in ws (valid until ws is used again). hidden_states (optional): T x C copies after the
  // embeddings and after each layer (L + 1 tensors). IndexError naming the sequence and
  // position of a bad id, ValueError for a sequence that is too long, before any work.
  const float* forward(const std::vector<const std::vector<std::int64_t>*>& seqs, Workspace& ws,
                       std::vector<Tensor>* hidden_states = nullptr) const;

  // Multiply-add FLOPs (2 per multiply-add) of the matrix products forward() runs for sequences
  // of these lengths: projections and feed-forward per token, QK^T and PV per query-key pair
  // of the same sequence (nothing for padding: there is none).
  double matmul_flops(const std::vector<std::int64_t>& lengths) const;

  const models::BertModel& model() const { return *model_; }

 private:
  struct Layer {
    kernels::PackedB qkv, out, inter, output;  // [3C, C], [C, C], [F, C], [C, F] as W^T products
    Tensor qkv_weight, qkv_bias;               // [3C, C], [3C]: the concatenated query/key/value
  };
  // One Linear through the packed weight (or, when set_isa changed the micro-kernel since the
  // packing, the same product from the unpacked weight).
  // This team member's part of it.
  void linear(const kernels::PackedB& packed, const Tensor& weight, std::int64_t T, const float* x, float* y,
              const kernels::GemmEpilogue& e, const Team& team) const;

  std::shared_ptr<const models::BertModel> model_;
  std::vector<Layer> layers_;
};

}  // namespace qkv::infer
