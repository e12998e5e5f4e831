// Naive twins of the quantized-weight products (kernels/qgemm.h), the test references: every row
// of W through dequantize_row (the bitwise gguf-py values), double accumulation, one rounding.
// The Q8-activation twin quantizes A with the same function as the fast path and sums the exact
// integer block dot products, scaled, in double.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "qgemm_internal.h"
#include "qkv/core/error.h"
#include "qkv/kernels/activation.h"
#include "qkv/kernels/qgemm.h"
#include "quant_internal.h"

namespace qkv::kernels {
namespace {

using detail::i64;
using detail::Q8Act;
using detail::u8;

double finish(double dot, i64 m, i64 n, const float* C, i64 ldc, const QGemmOptions& o) {
  if (o.accumulate) return static_cast<double>(C[m * ldc + n]) + dot;
  const GemmEpilogue& e = o.epilogue;
  double c = dot;
  if (e.bias) c += e.bias[n];
  if (e.act != GemmAct::None) c = gelu_ref(c, e.act == GemmAct::GeluErf ? GeluForm::Erf : GeluForm::Tanh);
  if (e.residual) c += e.residual[m * e.ldr + n];
  return c;
}

}  // namespace

void qgemm_ref(i64 M, const float* A, i64 lda, const QMatrix& W, float* C, i64 ldc, const QGemmOptions& o) {
  if (M < 0 || W.rows < 0 || W.cols < 0 || lda < W.cols || ldc < W.rows ||
      W.row_bytes < qtype_row_bytes(W.type, W.cols) || (o.accumulate && !o.epilogue.empty()))
    throw ValueError("qgemm_ref: bad arguments (M=" + std::to_string(M) + ", N=" + std::to_string(W.rows) +
                     ", K=" + std::to_string(W.cols) + ")");
  const i64 N = W.rows, K = W.cols;
  const auto* base = static_cast<const u8*>(W.data);
  const bool q8 = qgemm_uses_q8(M, W.type, o);
  std::vector<float> w(static_cast<std::size_t>(K));
  std::vector<double> out(static_cast<std::size_t>(M * N));
  if (!q8) {
    for (i64 n = 0; n < N; ++n) {
      dequantize_row(W.type, base + n * W.row_bytes, w.data(), K);
      for (i64 m = 0; m < M; ++m) {
        double s = 0;
        for (i64 k = 0; k < K; ++k) s += static_cast<double>(A[m * lda + k]) * static_cast<double>(w[k]);
        out[m * N + n] = s;
      }
    }
  } else {
    // A quantized as the fast path quantizes it; each 32-block's d_a * sum(w * q) exactly (w the
    // dequantized weights, in double). The Q8 path's rows: those qgemm takes it for.
    std::vector<detail::Q8Act> aq(static_cast<std::size_t>(K / 32));
    for (i64 m = 0; m < M; ++m) {
      detail::quantize_q8(A + m * lda, K, aq.data());
      for (i64 n = 0; n < N; ++n) {
        dequantize_row(W.type, base + n * W.row_bytes, w.data(), K);
        double s = 0;
        for (i64 b = 0; b < K / 32; ++b) {
          double blk = 0;
          for (int i = 0; i < 32; ++i) blk += static_cast<double>(w[32 * b + i]) * aq[b].q[i];
          s += static_cast<double>(aq[b].d) * blk;
        }
        out[m * N + n] = s;
      }
    }
  }
  for (i64 m = 0; m < M; ++m)
    for (i64 n = 0; n < N; ++n) C[m * ldc + n] = static_cast<float>(finish(out[m * N + n], m, n, C, ldc, o));
}

}  // namespace qkv::kernels
