// Gated DeltaNet kernels (include/qkv/kernels/gated_delta.h): argument checks, the dispatch on
// kernels::active_isa() to the per-ISA kernels (gated_delta_impl.h compiled in
// gated_delta_{scalar,avx2,avx512}.cpp), the calling thread's scratch, and the naive float64
// twins the tests compare them with.
#include "qkv/kernels/gated_delta.h"

#include <cmath>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/kernels/cpu.h"
#include "gated_delta_internal.h"

namespace qkv::kernels {

namespace gdn {
float* scratch(std::size_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}
}  // namespace gdn

namespace {

using i64 = std::int64_t;

void check(const char* op, const GatedDeltaParams& p, i64 h0, i64 h1, bool chunked) {
  auto fail = [&](const std::string& what) { throw ValueError(std::string(op) + ": " + what); };
  if (p.n < 0) fail("n must be >= 0, got " + std::to_string(p.n));
  if (p.Hk < 1 || p.Hv < 1 || p.Hv % p.Hk != 0)
    fail("the key heads must divide the value heads, got Hk=" + std::to_string(p.Hk) + " Hv=" + std::to_string(p.Hv));
  if (p.Dk < 1 || p.Dv < 1) fail("head dims must be >= 1, got Dk=" + std::to_string(p.Dk) + " Dv=" + std::to_string(p.Dv));
  if (chunked && p.chunk < 1) fail("chunk must be >= 1, got " + std::to_string(p.chunk));
  if (h0 < 0 || h0 > h1 || h1 > p.Hv)
    fail("head range [" + std::to_string(h0) + ", " + std::to_string(h1) + ") not within [0, " + std::to_string(p.Hv) +
         ")");
}

void check_conv(i64 n, i64 Cc, i64 K, i64 c0, i64 c1) {
  auto fail = [](const std::string& what) { throw ValueError("causal_conv1d_silu: " + what); };
  if (n < 0) fail("n must be >= 0, got " + std::to_string(n));
  if (K < 1) fail("K must be >= 1, got " + std::to_string(K));
  if (c0 < 0 || c0 > c1 || c1 > Cc)
    fail("channel range [" + std::to_string(c0) + ", " + std::to_string(c1) + ") not within [0, " + std::to_string(Cc) +
         ")");
}

}  // namespace

void gated_delta_recurrent(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                           const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  check("gated_delta_recurrent", p, h0, h1, false);
  switch (active_isa()) {
    case Isa::Avx512: return gdn::recurrent_avx512(o, state, q, k, v, g, beta, p, h0, h1);
    case Isa::Avx2: return gdn::recurrent_avx2(o, state, q, k, v, g, beta, p, h0, h1);
    case Isa::Scalar: break;
  }
  gdn::recurrent_scalar(o, state, q, k, v, g, beta, p, h0, h1);
}

void gated_delta_chunked(float* o, float* state, const float* q, const float* k, const float* v, const float* g,
                         const float* beta, const GatedDeltaParams& p, std::int64_t h0, std::int64_t h1) {
  check("gated_delta_chunked", p, h0, h1, true);
  switch (active_isa()) {
    case Isa::Avx512: return gdn::chunked_avx512(o, state, q, k, v, g, beta, p, h0, h1);
    case Isa::Avx2: return gdn::chunked_avx2(o, state, q, k, v, g, beta, p, h0, h1);
    case Isa::Scalar: break;
  }
  gdn::chunked_scalar(o, state, q, k, v, g, beta, p, h0, h1);
}

void causal_conv1d_silu(float* out, std::int64_t ldo, const float* x, std::int64_t ldx, std::int64_t n,
                        std::int64_t Cc, const float* w, std::int64_t K, float* state, std::int64_t c0,
                        std::int64_t c1) {
  check_conv(n, Cc, K, c0, c1);
  switch (active_isa()) {
    case Isa::Avx512: return gdn::conv_silu_avx512(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
    case Isa::Avx2: return gdn::conv_silu_avx2(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
    case Isa::Scalar: break;
  }
  gdn::conv_silu_scalar(out, ldo, x, ldx, n, Cc, w, K, state, c0, c1);
}

// transformers' torch_recurrent_gated_delta_rule in double, token by token, head by head.
void gated_delta_ref(double* o, double* state, const float* q, const float* k, const float* v, const float* g,
                     const float* beta, const GatedDeltaParams& p) {
  check("gated_delta_ref", p, 0, p.Hv, false);
  const i64 Dk = p.Dk, Dv = p.Dv;
  std::vector<double> qn(static_cast<std::size_t>(Dk)), kn(qn.size()), kv(static_cast<std::size_t>(Dv));
  // x / sqrt(sum x^2 + eps) when normalising, then times scale.
  auto norm = [&](std::vector<double>& dst, const float* src, double scale) {
    double ss = 0;
    for (i64 d = 0; d < Dk; ++d) ss += static_cast<double>(src[d]) * src[d];
    const double inv = p.l2norm_qk ? 1.0 / std::sqrt(ss + static_cast<double>(p.eps)) : 1.0;
    for (i64 d = 0; d < Dk; ++d) dst[d] = src[d] * inv * scale;
  };
  for (i64 t = 0; t < p.n; ++t)
    for (i64 h = 0; h < p.Hv; ++h) {
      const i64 j = p.tiled ? h % p.Hk : h / (p.Hv / p.Hk);
      norm(qn, q + t * p.q_st + j * Dk, 1.0 / std::sqrt(static_cast<double>(Dk)));
      norm(kn, k + t * p.k_st + j * Dk, 1.0);
      const double decay = std::exp(static_cast<double>(g[t * p.gb_st + h])), b = beta[t * p.gb_st + h];
      const float* vt = v + t * p.v_st + h * Dv;
      double* S = state + h * Dk * Dv;
      for (i64 i = 0; i < Dk * Dv; ++i) S[i] *= decay;
      for (i64 c = 0; c < Dv; ++c) {
        double s = 0;
        for (i64 i = 0; i < Dk; ++i) s += S[i * Dv + c] * kn[i];
        kv[c] = s;
      }
      for (i64 i = 0; i < Dk; ++i)
        for (i64 c = 0; c < Dv; ++c) S[i * Dv + c] += kn[i] * (vt[c] - kv[c]) * b;
      double* ot = o + t * p.o_st + h * Dv;
      for (i64 c = 0; c < Dv; ++c) {
        double s = 0;
        for (i64 i = 0; i < Dk; ++i) s += S[i * Dv + c] * qn[i];
        ot[c] = s;
      }
    }
}

void causal_conv1d_silu_ref(double* out, const float* x, std::int64_t ldx, std::int64_t n, std::int64_t Cc,
                            const float* w, std::int64_t K, double* state) {
  check_conv(n, Cc, K, 0, Cc);
  // x' = the K - 1 state rows, then the n rows of x.
  std::vector<double> xp(static_cast<std::size_t>((K - 1 + n) * Cc));
  for (i64 r = 0; r < K - 1; ++r)
    for (i64 c = 0; c < Cc; ++c) xp[r * Cc + c] = state[r * Cc + c];
  for (i64 t = 0; t < n; ++t)
    for (i64 c = 0; c < Cc; ++c) xp[(K - 1 + t) * Cc + c] = x[t * ldx + c];
  for (i64 t = 0; t < n; ++t)
    for (i64 c = 0; c < Cc; ++c) {
      double s = 0;
      for (i64 j = 0; j < K; ++j) s += static_cast<double>(w[c * K + j]) * xp[(t + j) * Cc + c];
      out[t * Cc + c] = s / (1.0 + std::exp(-s));
    }
  for (i64 r = 0; r < K - 1; ++r)
    for (i64 c = 0; c < Cc; ++c) state[r * Cc + c] = xp[(n + r) * Cc + c];
}

}  // namespace qkv::kernels
