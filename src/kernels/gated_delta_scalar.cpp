// Portable Gated DeltaNet kernels (the template body is gated_delta_impl.h): one float per
// "vector", 4 x 4 register tiles. The compiler may still vectorise it for the build's baseline.
#include "gated_delta_internal.h"

#include "gated_delta_impl.h"

namespace qkv::kernels::gdn {

void recurrent_scalar(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  Kernels<IsaScalar>::recurrent(o, state, q, k, v, g, beta, p, h0, h1);
}
void chunked_scalar(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                    const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  Kernels<IsaScalar>::chunked(o, state, q, k, v, g, beta, p, h0, h1);
}
void conv_silu_scalar(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n,
                      std::int64_t Cc, const float* w, std::int64_t K, float* state, std::int64_t c0,
                      std::int64_t c1) {
  Kernels<IsaScalar>::conv_silu(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
}

}  // namespace qkv::kernels::gdn
