// The slots of models/arch/'s tensor tables (internal header of models/): which tensors a spec
// needs, their shapes, and where each lives in DecoderWeights. Shared by the loader and the GGUF
// writer, so that both read the one table of an architecture the same way.
#pragma once
#include <cstdint>
#include <string>

#include "../arch/arch.h"
#include "qkv/core/shape.h"
#include "qkv/models/decoder.h"

namespace qkv::models {

enum class Need {
  No,         // the spec has no use for it (a bias of a model without biases, say)
  Yes,        // it must be there
  IfPresent,  // read when there (rope_freqs, LongRope's factors)
  Ignored,    // accepted and not read (a tied model's lm_head saved anyway)
};

// Whether architecture `a`'s table names `slot`.
bool has_slot(const Architecture& a, Slot slot);
// `pattern` with "{i}" replaced by the layer and "{e}" by the expert.
std::string expand_name(const char* pattern, std::int64_t layer, std::int64_t expert = 0);
// The name names one tensor per expert ("{e}" in it), not one 3-D tensor of all.
bool per_expert_name(const char* pattern);
// An expert slot (ExpertGate, ExpertUp, ExpertDown): one matrix per expert of DecoderLayerWeights.
bool slot_is_expert(Slot slot);
Need slot_need(const DecoderSpec& c, const Architecture& a, Slot slot, std::int64_t layer);
// PyTorch order: [rows, cols] of a matrix, [n] of a vector, [E, rows, cols] of the experts' matrices
// (of `layer`'s spec for the per-layer slots).
Shape slot_shape(const DecoderSpec& c, Slot slot, std::int64_t layer = 0);
// A norm's weight (the architecture's norm_offset applies).
bool slot_is_norm(Slot slot);

// Where a vector or a matrix of a slot lives (Embed, LmHead, FinalNorm, and the per-layer slots
// but the fused ones).
const float** vector_slot(DecoderWeights& w, Slot slot, std::int64_t layer);
kernels::QMatrix* matrix_slot(DecoderWeights& w, Slot slot, std::int64_t layer);
const float* vector_of(const DecoderWeights& w, Slot slot, std::int64_t layer);
const kernels::QMatrix* matrix_of(const DecoderWeights& w, Slot slot, std::int64_t layer);

// Rows [r0, r0 + n) of m, viewed in place.
kernels::QMatrix row_view(const kernels::QMatrix& m, std::int64_t r0, std::int64_t n);

}  // namespace qkv::models
