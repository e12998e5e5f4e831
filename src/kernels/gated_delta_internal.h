// Private to the Gated DeltaNet kernels (include/qkv/kernels/gated_delta.h): the entry points of
// each instruction set (gated_delta_impl.h compiled in gated_delta_{scalar,avx2,avx512}.cpp),
// which gated_delta.cpp checks the arguments for and dispatches to on kernels::active_isa().
//
// Each ISA file includes this header BEFORE its `#pragma GCC target`, so the library headers'
// inline functions (std::vector, std::exp, ...) keep the baseline ISA: an inline function compiled
// for AVX-512 in one translation unit and merged at link time could otherwise run on a CPU
// without it.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "qkv/kernels/fast_exp.h"
#include "qkv/kernels/gated_delta.h"

namespace qkv::kernels::gdn {

// At least n floats of the calling thread's scratch (thread_local, grown on demand, never shrunk;
// gated_delta.cpp). Valid until the thread's next call.
float* scratch(std::size_t n);

// The three kernels per ISA, with the public functions' arguments (already checked).
void recurrent_scalar(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
void chunked_scalar(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
void conv_silu_scalar(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n,
                      std::int64_t Cc, const float* w, std::int64_t K, float* state, std::int64_t c0, std::int64_t c1);

void recurrent_avx2(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
void chunked_avx2(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                  const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
void conv_silu_avx2(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n, std::int64_t Cc,
                    const float* w, std::int64_t K, float* state, std::int64_t c0, std::int64_t c1);

void recurrent_avx512(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
void chunked_avx512(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1);
void conv_silu_avx512(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n,
                      std::int64_t Cc, const float* w, std::int64_t K, float* state, std::int64_t c0, std::int64_t c1);

}  // namespace qkv::kernels::gdn
