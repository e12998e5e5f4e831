// Packed, cache-blocked, threaded GEMM (BLIS structure; see gemm_internal.h
// for the micro-kernel contract and gemm_avx512/avx2/scalar.cpp for the tiles).
//
//   for jc in N step NC:                 B panel  kc x nc  -> packed once, stays in L3
//     for pc in K step KC:               (K blocks depend only on K: bitwise reproducible)
//       for ic in M step MC:             A block  mc x kc  -> packed, stays in L2
//         for jr in nc step NR:          B sliver kc x NR  stays in L1
//           for ir in mc step MR:        micro-kernel: C[MR x NR] (+)= A sliver @ B sliver
//
// Transposes are absorbed by the packing routines. Small and skinny products
// skip packing: A is read in place when N is small (packing it would cost as
// much as using it), B (not transposed) when M is small or a K block of B is
// small enough to stay in L2. A few rows of A against B stored as rows (the
// Linear layers of generation) skip the blocking altogether (gemm_skinny.cpp).
// Threads split C into a tm x tn grid of MR/NR-aligned tiles, one independent
// sub-GEMM per thread with its own thread_local workspace; K is never split.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "gemm_internal.h"
#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/kernels/activation.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gemm.h"

namespace qkv::kernels {
namespace {

using detail::GemmKernelSet;
using detail::GemmUkr;
using i64 = std::int64_t;

// Fork only when every thread gets at least this many FLOPs (~25 us of work at
// 80 GFLOP/s): a 64^3 product (0.5 MFLOP) forked over 2 threads is slower.
constexpr double kMinFlopsPerThread = 2.0e6;
// Read A (not transposed) in place, no packing, when op(B) has at most this
// many columns: each A sliver is then used by at most 4 B slivers.
constexpr i64 kDirectAMaxN = 64;
// Read B in place when it is not transposed and either op(A) has at most this
// many rows (B is used too few times to repay packing) ...
constexpr i64 kDirectBMaxM = 24;
// ... or the rows of one K block of B span at most this many bytes (they stay
// in L2 across the M loop; 64^3 runs ~1.4x faster than with packing).
constexpr i64 kDirectBMaxBytes = 256 * 1024;

// A set is made only for an ISA the CPU has: filling one may itself run that ISA's instructions
// (GCC vectorises the table fills compiled under its target pragma), so an AVX-512 set made on an
// AVX2-only CPU stopped every process at its first product with SIGILL.
template <class T>
GemmKernelSet<T> make_set(Isa isa);
template <>
GemmKernelSet<float> make_set<float>(Isa isa) {
  if (isa > detected_isa()) return {};
  if (isa == Isa::Avx512) return detail::sgemm_kernels_avx512();
  if (isa == Isa::Avx2) return detail::sgemm_kernels_avx2();
  return detail::sgemm_kernels_scalar();
}
template <>
GemmKernelSet<double> make_set<double>(Isa isa) {
  if (isa > detected_isa()) return {};
  if (isa == Isa::Avx512) return detail::dgemm_kernels_avx512();
  if (isa == Isa::Avx2) return detail::dgemm_kernels_avx2();
  return detail::dgemm_kernels_scalar();
}

// Kernel set for the active ISA (falls back to a lower ISA if one is not compiled in).
template <class T>
const GemmKernelSet<T>& kernels() {
  static const GemmKernelSet<T> sets[3] = {make_set<T>(Isa::Scalar), make_set<T>(Isa::Avx2),
                                           make_set<T>(Isa::Avx512)};
  int i = static_cast<int>(active_isa());
  while (i > 0 && sets[i].packed_a == nullptr) --i;
  return sets[i];
}

// ---- per-thread workspace: grown as needed, never shrunk, freed at thread exit ----

struct Buffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { aligned_free(p); }
  template <class T>
  T* get(std::size_t n) {
    const std::size_t need = n * sizeof(T);
    if (need > bytes) {
      // Grow geometrically so a run of growing shapes reallocates O(log) times.
      const std::size_t nb = std::max(need, bytes + bytes / 2);
      void* q = aligned_alloc_bytes(nb, "gemm workspace");
      aligned_free(p);
      p = q;
      bytes = nb;
    }
    return static_cast<T*>(p);
  }
};

struct Workspace {
  Buffer a;     // packed A block (mc x kc) + one padded edge sliver (mr x kc)
  Buffer b;     // packed B panel (kc x nc) + one padded edge sliver (kc x nr)
  Buffer rows;  // nr x kc rows of S from a BRowSource, before they are packed
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// ---- packing ----
// Rows ahead that the row-walking packers prefetch (rows of A^T or B are
// often a page apart, where hardware prefetchers stop). 4..24 measured the
// same within this VM's noise.
constexpr i64 kPackAhead = 8;
// Rows of A^T / B the row-walking packers take at a time before moving to the next sliver.
constexpr i64 kPackRows = 16;
// Packed A sliver: op(A) rows [r0, r0+m) x k [p0, p0+kc) -> out[k*MR + i], rows i >= m zero.
// Packed B sliver: op(B) k [p0, p0+kc) x columns [c0, c0+n) -> out[k*NR + j], columns j >= n zero.
// Both walk the source in its storage order (rows of A or B as stored) so
// reads are sequential; MR and NR are template constants so the inner copies unroll.

template <class T, int MR>
void pack_a_sliver(bool ta, const T* A, i64 lda, i64 r0, i64 m, i64 p0, i64 kc, T* out,
                   detail::GemmInterleave<T> fast) {
  if (ta) {  // A stored [K,M]: row k of the sliver is contiguous in A
    for (i64 k = 0; k < kc; ++k) {
      const T* src = A + (p0 + k) * lda + r0;
      T* dst = out + k * MR;
      if (m == MR) {
        for (int i = 0; i < MR; ++i) dst[i] = src[i];
      } else {  // an edge sliver (M % MR rows): unrolled, no per-row loop bounds
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) dst[i] = i < m ? src[std::min<i64>(i, m - 1)] : T(0);
      }
    }
    return;
  }
  // A stored [M,K]: interleave MR rows, reading each row sequentially.
  if (fast && m == MR) return fast(A + r0 * lda + p0, lda, kc, out);
  const T* rows[MR];
  for (int i = 0; i < MR; ++i) rows[i] = A + (r0 + std::min<i64>(i, m - 1)) * lda + p0;
  if (m == MR) {
    for (i64 k = 0; k < kc; ++k)
      for (int i = 0; i < MR; ++i) out[k * MR + i] = rows[i][k];
  } else {
    for (i64 k = 0; k < kc; ++k)
      for (int i = 0; i < MR; ++i) out[k * MR + i] = i < m ? rows[i][k] : T(0);
  }
}

template <class T, int MR>
void pack_a_block(bool ta, const T* A, i64 lda, i64 r0, i64 mc, i64 p0, i64 kc, T* out,
                  detail::GemmInterleave<T> fast) {
  const i64 mfull = mc / MR * MR;
  if (ta && mfull > 0) {
    // A stored [K,M]: rows of A hold MR-wide pieces of every sliver. Going row by row would
    // write to all slivers at once, kc*MR*sizeof(T) bytes apart: a stride that folds onto two
    // L1 sets, which thrash. So take kPackRows rows at a time (they stay in L1) and fill the
    // slivers one after another, each with a contiguous run of writes.
    for (i64 k0 = 0; k0 < kc; k0 += kPackRows) {
      const i64 kn = std::min<i64>(kPackRows, kc - k0);
      for (i64 k = k0; k < k0 + kn && k + kPackAhead < kc; ++k)  // rows may be pages apart
        for (i64 j = 0; j < mc; j += 64 / static_cast<i64>(sizeof(T)))
          __builtin_prefetch(A + (p0 + k + kPackAhead) * lda + r0 + j, 0, 3);
      for (i64 ir = 0; ir < mfull; ir += MR) {
        T* dst = out + ir * kc + k0 * MR;
        const T* src = A + (p0 + k0) * lda + r0 + ir;
        for (i64 k = 0; k < kn; ++k) std::memcpy(dst + k * MR, src + k * lda, sizeof(T) * MR);
      }
    }
    if (mfull < mc) pack_a_sliver<T, MR>(ta, A, lda, r0 + mfull, mc - mfull, p0, kc, out + mfull * kc, fast);
    return;
  }
  for (i64 ir = 0; ir < mc; ir += MR)
    pack_a_sliver<T, MR>(ta, A, lda, r0 + ir, std::min<i64>(MR, mc - ir), p0, kc, out + (ir / MR) * kc * MR, fast);
}

// Packs op(B) columns [c0, c0+nc) into ceil(nc/NR) slivers of kc x NR at out.
template <class T, int NR>
void pack_b_panel(bool tb, const T* B, i64 ldb, i64 p0, i64 kc, i64 c0, i64 nc, T* out,
                  detail::GemmInterleave<T> fast) {
  const i64 nfull = nc / NR * NR;
  if (!tb) {  // B stored [K,N]: rows of B hold NR-wide pieces of every sliver; as for A^T
    // above, kPackRows rows at a time, one sliver after another (sliver starts are
    // kc*NR*sizeof(T) bytes apart, a multiple of 4 KiB: row-by-row writes all hit one L1 set).
    for (i64 k0 = 0; k0 < kc; k0 += kPackRows) {
      const i64 kn = std::min<i64>(kPackRows, kc - k0);
      for (i64 k = k0; k < k0 + kn && k + kPackAhead < kc; ++k)  // rows may be pages apart
        for (i64 j = 0; j < nc; j += 64 / static_cast<i64>(sizeof(T)))
          __builtin_prefetch(B + (p0 + k + kPackAhead) * ldb + c0 + j, 0, 3);
      for (i64 jr = 0; jr < nfull; jr += NR) {
        T* dst = out + jr * kc + k0 * NR;
        const T* src = B + (p0 + k0) * ldb + c0 + jr;
        for (i64 k = 0; k < kn; ++k)
          for (int j = 0; j < NR; ++j) dst[k * NR + j] = src[k * ldb + j];
      }
      if (nfull < nc) {
        T* dst = out + nfull * kc + k0 * NR;
        const T* src = B + (p0 + k0) * ldb + c0 + nfull;
        for (i64 k = 0; k < kn; ++k)
          for (i64 j = 0; j < NR; ++j) dst[k * NR + j] = nfull + j < nc ? src[k * ldb + j] : T(0);
      }
    }
    return;
  }
  // B stored [N,K]: each row of B is one column of a sliver; transpose
  // column by column (reads sequential, writes NR apart within the sliver).
  for (i64 jr = 0; jr < nc; jr += NR) {
    T* dst = out + jr * kc;
    const i64 n = std::min<i64>(NR, nc - jr);
    if (fast && n == NR) {
      fast(B + (c0 + jr) * ldb + p0, ldb, kc, dst);
      continue;
    }
    for (i64 j = 0; j < n; ++j) {
      const T* src = B + (c0 + jr + j) * ldb + p0;
      for (i64 k = 0; k < kc; ++k) dst[k * NR + j] = src[k];
    }
    for (i64 j = n; j < NR; ++j)
      for (i64 k = 0; k < kc; ++k) dst[k * NR + j] = T(0);
  }
}

template <class T>
void pack_a_any(const GemmKernelSet<T>& ks, bool ta, const T* A, i64 lda, i64 r0, i64 mc, i64 p0, i64 kc, T* out) {
  const int MR = ks.mr;
  switch (MR) {
    case 4: return pack_a_block<T, 4>(ta, A, lda, r0, mc, p0, kc, out, ks.interleave_mr);
    case 6: return pack_a_block<T, 6>(ta, A, lda, r0, mc, p0, kc, out, ks.interleave_mr);
    case 14: return pack_a_block<T, 14>(ta, A, lda, r0, mc, p0, kc, out, ks.interleave_mr);
  }
  throw Error("gemm: no A packing for mr=" + std::to_string(MR));
}

template <class T>
void pack_b_any(const GemmKernelSet<T>& ks, bool tb, const T* B, i64 ldb, i64 p0, i64 kc, i64 c0, i64 nc, T* out) {
  const int NR = ks.nr;
  switch (NR) {
    case 8: return pack_b_panel<T, 8>(tb, B, ldb, p0, kc, c0, nc, out, ks.interleave_nr);
    case 16: return pack_b_panel<T, 16>(tb, B, ldb, p0, kc, c0, nc, out, ks.interleave_nr);
    case 32: return pack_b_panel<T, 32>(tb, B, ldb, p0, kc, c0, nc, out, ks.interleave_nr);
  }
  throw Error("gemm: no B packing for nr=" + std::to_string(NR));
}

// K block size: blocks of at most ks.kc, balanced, a function of K alone.
i64 k_block(i64 K, i64 kc_max) {
  const i64 nb = (K + kc_max - 1) / kc_max;
  return (K + nb - 1) / nb;
}

// ---- epilogue and pre-packed B, as a sub-GEMM sees them ----

// GemmEpilogue of a sub-GEMM: bias at its first column, residual at its first element.
template <class T>
struct Epi {
  const T* bias = nullptr;
  GemmAct act = GemmAct::None;
  const T* residual = nullptr;
  i64 ldr = 0;
  bool empty() const { return bias == nullptr && act == GemmAct::None && residual == nullptr; }
  Epi shifted(i64 r0, i64 c0) const {
    Epi e = *this;
    if (e.bias) e.bias += c0;
    if (e.residual) e.residual += r0 * ldr + c0;
    return e;
  }
};

// The epilogue on rows [r0, r0+mb) x columns [c0, c0+nb) of a sub-GEMM's C (c points at (r0, c0)),
// each step as the unfused op rounds it: c + bias, then act, then residual + c. The activation
// takes the whole tile in one call (independent vectors in flight; see gelu_forward_f32_rows).
template <class T>
void apply_epilogue(const Epi<T>& e, T* c, i64 ldc, i64 r0, i64 c0, i64 mb, i64 nb) {
  if (e.act == GemmAct::None && e.bias && e.residual) {  // one pass: (c + bias), then residual + that
    const T* b = e.bias + c0;
    for (i64 i = 0; i < mb; ++i) {
      T* __restrict row = c + i * ldc;
      const T* __restrict r = e.residual + (r0 + i) * e.ldr + c0;
#pragma omp simd
      for (i64 j = 0; j < nb; ++j) row[j] = r[j] + (row[j] + b[j]);
    }
    return;
  }
  if (e.bias)
    for (i64 i = 0; i < mb; ++i) {
      T* __restrict row = c + i * ldc;
      const T* b = e.bias + c0;
#pragma omp simd
      for (i64 j = 0; j < nb; ++j) row[j] = row[j] + b[j];
    }
  if (e.act != GemmAct::None) {
    const GeluForm form = e.act == GemmAct::GeluErf ? GeluForm::Erf : GeluForm::Tanh;
    if constexpr (std::is_same_v<T, float>)
      gelu_forward_f32_rows(c, ldc, c, ldc, mb, nb, form);
    else
      for (i64 i = 0; i < mb; ++i) gelu_forward_ref<T>(c + i * ldc, c + i * ldc, nb, form);
  }
  if (e.residual)
    for (i64 i = 0; i < mb; ++i) {
      T* __restrict row = c + i * ldc;
      const T* __restrict r = e.residual + (r0 + i) * e.ldr + c0;
#pragma omp simd
      for (i64 j = 0; j < nb; ++j) row[j] = r[j] + row[j];
    }
}

// B packed ahead of time (PackedB): K block starting at row pc is at data + pc * n_pad, its
// sliver s (columns s*NR..) at + s * kc * NR; col0 (a multiple of NR) is the sub-GEMM's first column.
// Or B = S^T produced by a row source (src, float only), packed like a transposed B; col0 is then
// the sub-GEMM's first row of S.
template <class T>
struct Prepacked {
  const T* data = nullptr;
  i64 n_pad = 0, col0 = 0;
  const detail::BRowSource* src = nullptr;
};

// One sub-GEMM on the calling thread (M, N, K > 0, alpha != 0).
template <class T>
void gemm_serial(const GemmKernelSet<T>& ks, i64 kcb, bool ta, bool tb, i64 M, i64 N, i64 K, T alpha, const T* A,
                 i64 lda, const T* B, i64 ldb, T beta, T* C, i64 ldc, const Epi<T>& epi = {},
                 const Prepacked<T>& pre = {}) {
  const int MR = ks.mr, NR = ks.nr;
  // A^T read in place walks K with stride lda: fine for one pass over a sliver,
  // but with a power-of-two lda the lines of a sliver share a few L1 sets, so
  // re-reading it for each B sliver thrashes (2048x96x512 TN ran at 30 GFLOP/s).
  const bool pack_a = N > (ta ? NR : kDirectAMaxN);
  const bool prepacked = pre.data != nullptr;
  const bool from_rows = pre.src != nullptr;
  const bool pack_b = !prepacked && (from_rows || tb || (M > kDirectBMaxM &&
                                            std::min<i64>(kcb, K) * ldb * static_cast<i64>(sizeof(T)) > kDirectBMaxBytes));
  const i64 mc_max = std::min<i64>(ks.mc, (M + MR - 1) / MR * MR);
  const i64 nc_max = std::min<i64>(ks.nc, (N + NR - 1) / NR * NR);
  const i64 kc_max = std::min<i64>(kcb, K);

  Workspace& ws = workspace();
  // +8: slack the interleave packers may write past a sliver's end.
  T* abuf = ws.a.get<T>(static_cast<std::size_t>((pack_a ? mc_max : 0) + MR) * kc_max + 8);
  T* bbuf = ws.b.get<T>(static_cast<std::size_t>((pack_b ? nc_max : 0) + NR) * kc_max + 8);
  T* a_edge = abuf + (pack_a ? mc_max : 0) * kc_max;
  T* b_edge = bbuf + (pack_b ? nc_max : 0) * kc_max;
  alignas(64) T tile[16 * 32];  // mr x nr scratch for partial tiles (mr <= 16, nr <= 32)

  for (i64 jc = 0; jc < N; jc += ks.nc) {
    const i64 nc = std::min<i64>(ks.nc, N - jc);
    const i64 nfull = nc / NR * NR;
    for (i64 pc = 0; pc < K; pc += kcb) {
      const i64 kc = std::min<i64>(kcb, K - pc);
      const T beta_eff = pc == 0 ? beta : T(1);
      const bool last_k = pc + kc == K;
      if (from_rows) {
        if constexpr (std::is_same_v<T, float>) {
          // One sliver of S rows at a time through a small buffer, packed as a transposed B.
          T* rows = ws.rows.get<T>(static_cast<std::size_t>(NR) * kc + 8);
          for (i64 jr = 0; jr < nc; jr += NR) {
            const i64 n = std::min<i64>(NR, nc - jr);
            pre.src->rows(pre.src->ctx, pre.col0 + jc + jr, n, pc, kc, rows, kc);
            pack_b_any(ks, true, rows, kc, 0, kc, 0, n, bbuf + (jr / NR) * kc * NR);
          }
        }
      } else if (pack_b) {
        pack_b_any(ks, tb, B, ldb, pc, kc, jc, nc, bbuf);
      } else if (!prepacked && nfull < nc)
        pack_b_any(ks, tb, B, ldb, pc, kc, jc + nfull, nc - nfull, b_edge);

      for (i64 ic = 0; ic < M; ic += ks.mc) {
        const i64 mc = std::min<i64>(ks.mc, M - ic);
        const i64 mfull = mc / MR * MR;
        if (pack_a)
          pack_a_any(ks, ta, A, lda, ic, mc, pc, kc, abuf);
        else if (mfull < mc)
          pack_a_any(ks, ta, A, lda, ic + mfull, mc - mfull, pc, kc, a_edge);

        for (i64 jr = 0; jr < nc; jr += NR) {
          const i64 nb = std::min<i64>(NR, nc - jr);
          const T* bp;
          i64 rs_b = NR;
          if (prepacked) {
            bp = pre.data + pc * pre.n_pad + ((pre.col0 + jc + jr) / NR) * kc * NR;
          } else if (pack_b) {
            bp = bbuf + (jr / NR) * kc * NR;
          } else if (nb == NR) {
            bp = B + pc * ldb + jc + jr;
            rs_b = ldb;
          } else {
            bp = b_edge;
          }
          for (i64 ir = 0; ir < mc; ir += MR) {
            const i64 mb = std::min<i64>(MR, mc - ir);
            GemmUkr<T> ukr = ks.packed_a;
            const T* ap;
            i64 rs_a = 0, cs_a = 0;
            if (pack_a) {
              ap = abuf + (ir / MR) * kc * MR;
            } else if (mb == MR) {
              ukr = ks.strided_a;
              ap = ta ? A + pc * lda + (ic + ir) : A + (ic + ir) * lda + pc;
              rs_a = ta ? 1 : lda;
              cs_a = ta ? lda : 1;
            } else {
              ap = a_edge;
            }
            T* cp = C + (ic + ir) * ldc + jc + jr;
            if (mb == MR && nb == NR) {
              ukr(kc, ap, rs_a, cs_a, bp, rs_b, alpha, beta_eff, cp, ldc);
            } else if (nb == NR && ukr == ks.packed_a && ks.rows_a[mb] != nullptr) {
              // A block's edge rows: a kernel of exactly mb rows on the packed (zero-padded) sliver.
              ks.rows_a[mb](kc, ap, rs_a, cs_a, bp, rs_b, alpha, beta_eff, cp, ldc);
            } else {
              ukr(kc, ap, rs_a, cs_a, bp, rs_b, alpha, T(0), tile, NR);
              for (i64 i = 0; i < mb; ++i)
                for (i64 j = 0; j < nb; ++j) {
                  const T t = tile[i * NR + j];
                  cp[i * ldc + j] = beta_eff == T(0) ? t : t + beta_eff * cp[i * ldc + j];
                }
            }
            if (last_k && !epi.empty()) apply_epilogue(epi, cp, ldc, ic + ir, jc + jr, mb, nb);
          }
        }
      }
    }
  }
}

// C = beta * C without reading C when beta == 0.
template <class T>
void scale_c(i64 M, i64 N, T beta, T* C, i64 ldc) {
  if (beta == T(1)) return;
  for (i64 i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0))
      std::fill(c, c + N, T(0));
    else
      for (i64 j = 0; j < N; ++j) c[j] *= beta;
  }
}

// Threads to use and the tm x tn grid they split C into. Picks the grid that
// re-packs the least (each row of tiles packs B once, each column A once).
struct Grid {
  int tm = 1, tn = 1;
};
Grid choose_grid(i64 M, i64 N, i64 K, int MR, int NR, int threads) {
  Grid g;
  if (threads <= 1) return g;
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  int nt = static_cast<int>(std::min<double>(threads, std::floor(flops / kMinFlopsPerThread)));
  const i64 um = (M + MR - 1) / MR, un = (N + NR - 1) / NR;
  for (; nt > 1; --nt) {
    double best = -1;
    for (int tm = 1; tm <= nt; ++tm) {
      if (nt % tm) continue;
      const int tn = nt / tm;
      if (tm > um || tn > un) continue;
      const double cost = static_cast<double>(tm) * static_cast<double>(N) + static_cast<double>(tn) * static_cast<double>(M);
      if (best < 0 || cost < best) {
        best = cost;
        g.tm = tm;
        g.tn = tn;
      }
    }
    if (best >= 0) return g;
  }
  return Grid{};
}

// C = epi(alpha * op(A) @ op(B) + beta * C); with pre.data set, B is ignored and op(B) is read
// from the packed layout (which must be that of kernels<T>()).
// Part: with part >= 0, only the tiles the threaded call would give thread `part` of `threads`,
// on the calling thread (a member of the caller's own team); part < 0: the whole product,
// forked over `threads` (1: serial).
struct Part {
  int part = -1;
  int threads = 1;
};

template <class T>
void gemm_impl(const char* op, bool ta, bool tb, i64 M, i64 N, i64 K, T alpha, const T* A, i64 lda, const T* B,
               i64 ldb, T beta, T* C, i64 ldc, bool threaded, const Epi<T>& epi = {}, const Prepacked<T>& pre = {},
               Part part = {-1, 0}) {
  detail::check_gemm_args(op, ta, tb, M, N, K, lda, ldb, ldc);
  if (M == 0 || N == 0) return;
  const int threads = part.part >= 0 ? part.threads : threaded ? num_threads() : 1;
  if (K == 0 || alpha == T(0)) {
    if (part.part > 0) return;
    scale_c(M, N, beta, C, ldc);
    if (!epi.empty()) apply_epilogue(epi, C, ldc, 0, 0, M, N);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    // A few rows against B stored as rows (a Linear layer during generation): stream B once.
    if (!ta && tb && M <= detail::kSkinnyMaxM && pre.data == nullptr && pre.src == nullptr) {
      bool done = false;
      if (active_isa() == Isa::Avx512 && detail::sgemm_skinny_nt_avx512_available()) {
        detail::sgemm_skinny_nt_avx512(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
        done = true;
      } else if (active_isa() >= Isa::Avx2 && detail::sgemm_skinny_nt_available()) {
        detail::sgemm_skinny_nt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
        done = true;
      }
      if (done) {
        if (!epi.empty()) apply_epilogue(epi, C, ldc, 0, 0, M, N);
        return;
      }
    }
  }
  const GemmKernelSet<T>& ks = kernels<T>();
  i64 kcb = k_block(K, ks.kc);
  if (pre.src != nullptr && pre.src->k_align > 1) {  // K blocks on quantization-block boundaries
    const i64 al = pre.src->k_align;
    kcb = std::min<i64>(K, (kcb + al - 1) / al * al);
  }
  const Grid g = choose_grid(M, N, K, ks.mr, ks.nr, threads);
  if (g.tm * g.tn == 1) {
    if (part.part <= 0) gemm_serial(ks, kcb, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, epi, pre);
    return;
  }
  // Tile t covers MR-aligned rows [m0, m1) and NR-aligned columns [n0, n1).
  const i64 um = (M + ks.mr - 1) / ks.mr, un = (N + ks.nr - 1) / ks.nr;
  auto tile = [&](i64 t) {
    const i64 ti = t / g.tn, tj = t % g.tn;
    const i64 m0 = std::min(M, um * ti / g.tm * ks.mr), m1 = std::min(M, um * (ti + 1) / g.tm * ks.mr);
    const i64 n0 = std::min(N, un * tj / g.tn * ks.nr), n1 = std::min(N, un * (tj + 1) / g.tn * ks.nr);
    if (m0 >= m1 || n0 >= n1) return;
    const T* As = ta ? A + m0 : A + m0 * lda;
    const T* Bs = pre.data || pre.src ? B : tb ? B + n0 * ldb : B + n0;
    Prepacked<T> ps = pre;
    ps.col0 += n0;
    gemm_serial(ks, kcb, ta, tb, m1 - m0, n1 - n0, K, alpha, As, lda, Bs, ldb, beta, C + m0 * ldc + n0, ldc,
                epi.shifted(m0, n0), ps);
  };
  if (part.part >= 0) {
    if (part.part < g.tm * g.tn) tile(part.part);
    return;
  }
  parallel_for(0, g.tm * g.tn, 1, [&](i64 b, i64 e) {
    for (i64 t = b; t < e; ++t) tile(t);
  });
}

template <class T>
void gemm_batched_impl(const char* op, bool ta, bool tb, i64 M, i64 N, i64 K, T alpha, const T* A, i64 lda,
                       i64 sa, const T* B, i64 ldb, i64 sb, T beta, T* C, i64 ldc, i64 sc, i64 batch) {
  detail::check_gemm_args(op, ta, tb, M, N, K, lda, ldb, ldc);
  if (batch < 0 || sa < 0 || sb < 0 || sc < 0 || (sc == 0 && batch > 1 && M > 0 && N > 0))
    throw ValueError(std::string(op) + ": batch and strides must be >= 0 and stride_c > 0 when batch > 1 (batch=" +
                     std::to_string(batch) + ", stride_a=" + std::to_string(sa) + ", stride_b=" +
                     std::to_string(sb) + ", stride_c=" + std::to_string(sc) + ")");
  if (batch == 0 || M == 0 || N == 0) return;
  const double flops = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K);
  const bool small = flops < kMinFlopsPerThread * 4;
  if (batch > 1 && small && num_threads() > 1) {
    const i64 grain = std::max<i64>(1, static_cast<i64>(kMinFlopsPerThread / std::max(flops, 1.0)));
    parallel_for(0, batch, grain, [&](i64 b, i64 e) {
      for (i64 i = b; i < e; ++i)
        gemm_impl(op, ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc, false);
    });
    return;
  }
  for (i64 i = 0; i < batch; ++i)
    gemm_impl(op, ta, tb, M, N, K, alpha, A + i * sa, lda, B + i * sb, ldb, beta, C + i * sc, ldc, true);
}

}  // namespace

void sgemm(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda, const float* B,
           i64 ldb, float beta, float* C, i64 ldc, bool threaded) {
  gemm_impl<float>("sgemm", trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
}

void dgemm(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, double alpha, const double* A, i64 lda, const double* B,
           i64 ldb, double beta, double* C, i64 ldc, bool threaded) {
  gemm_impl<double>("dgemm", trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded);
}

void sgemm_batched(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda,
                   i64 stride_a, const float* B, i64 ldb, i64 stride_b, float beta, float* C, i64 ldc,
                   i64 stride_c, i64 batch) {
  gemm_batched_impl<float>("sgemm_batched", trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                           beta, C, ldc, stride_c, batch);
}

void dgemm_batched(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, double alpha, const double* A, i64 lda,
                   i64 stride_a, const double* B, i64 ldb, i64 stride_b, double beta, double* C, i64 ldc,
                   i64 stride_c, i64 batch) {
  gemm_batched_impl<double>("dgemm_batched", trans_a, trans_b, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b,
                            beta, C, ldc, stride_c, batch);
}

namespace {

// The epilogue as a sub-GEMM takes it, after checking the residual's row stride against N.
Epi<float> checked_epilogue(const char* op, const GemmEpilogue& e, i64 N) {
  if (e.residual && e.ldr < N)
    throw ValueError(std::string(op) + ": ldr " + std::to_string(e.ldr) + " must be >= N " + std::to_string(N));
  return Epi<float>{e.bias, e.act, e.residual, e.ldr};
}

void check_packed(const char* op, const PackedB& B) {
  if (B.empty()) throw ValueError(std::string(op) + ": B is empty (not packed)");
  if (!B.matches_active_isa())
    throw ValueError(std::string(op) + ": B was packed for another micro-kernel than the active ISA's (" +
                     isa_name(active_isa()) + "); pack it again after set_isa");
}

}  // namespace

void sgemm_ex(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda, const float* B,
              i64 ldb, float beta, float* C, i64 ldc, const GemmEpilogue& e, bool threaded) {
  if (!e.empty() && beta != 0.f)
    throw ValueError("sgemm_ex: beta must be 0 with an epilogue (got " + std::to_string(beta) + ")");
  const Epi<float> epi = checked_epilogue("sgemm_ex", e, N);
  gemm_impl<float>("sgemm_ex", trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, threaded, epi);
}

PackedB& PackedB::operator=(PackedB&& o) noexcept {
  if (this != &o) {
    aligned_free(data_);
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    K_ = o.K_;
    N_ = o.N_;
    n_pad_ = o.n_pad_;
    kcb_ = o.kcb_;
    isa_ = o.isa_;
    nr_ = o.nr_;
  }
  return *this;
}

PackedB::~PackedB() { aligned_free(data_); }

bool PackedB::matches_active_isa() const {
  const GemmKernelSet<float>& ks = kernels<float>();
  return data_ != nullptr && ks.nr == nr_ && k_block(K_, ks.kc) == kcb_ &&
         isa_ == static_cast<int>(active_isa());
}

PackedB PackedB::pack(bool trans_b, i64 K, i64 N, const float* B, i64 ldb) {
  detail::check_gemm_args("PackedB::pack", false, trans_b, 0, N, K, K, ldb, N);
  PackedB p;
  const GemmKernelSet<float>& ks = kernels<float>();
  p.K_ = K;
  p.N_ = N;
  p.nr_ = ks.nr;
  p.isa_ = static_cast<int>(active_isa());
  p.kcb_ = k_block(std::max<i64>(K, 1), ks.kc);
  p.n_pad_ = (N + ks.nr - 1) / ks.nr * ks.nr;
  const std::size_t n = static_cast<std::size_t>(std::max<i64>(K * p.n_pad_, 1)) + 8;  // +8: interleave slack
  p.bytes_ = n * sizeof(float);
  p.data_ = static_cast<float*>(aligned_alloc_bytes(p.bytes_, "PackedB"));
  for (i64 pc = 0; pc < K; pc += p.kcb_)
    pack_b_any(ks, trans_b, B, ldb, pc, std::min<i64>(p.kcb_, K - pc), 0, N, p.data_ + pc * p.n_pad_);
  return p;
}

void sgemm_packed(i64 M, const float* A, i64 lda, const PackedB& B, float* C, i64 ldc, const GemmEpilogue& e,
                  bool threaded) {
  check_packed("sgemm_packed", B);
  const Epi<float> epi = checked_epilogue("sgemm_packed", e, B.N_);
  const Prepacked<float> pre{B.data_, B.n_pad_, 0};
  // ldb = N: unused with pre.data, but it must pass the argument check.
  gemm_impl<float>("sgemm_packed", false, false, M, B.N_, B.K_, 1.f, A, lda, nullptr, B.N_, 0.f, C, ldc, threaded,
                   epi, pre);
}

void sgemm_packed_part(i64 M, const float* A, i64 lda, const PackedB& B, float* C, i64 ldc, const GemmEpilogue& e,
                       int part, int parts) {
  check_packed("sgemm_packed_part", B);
  if (parts < 1 || part < 0 || part >= parts)
    throw ValueError("sgemm_packed_part: part " + std::to_string(part) + " of " + std::to_string(parts) +
                     " is not in [0, parts)");
  const Epi<float> epi = checked_epilogue("sgemm_packed_part", e, B.N_);
  const Prepacked<float> pre{B.data_, B.n_pad_, 0};
  gemm_impl<float>("sgemm_packed_part", false, false, M, B.N_, B.K_, 1.f, A, lda, nullptr, B.N_, 0.f, C, ldc, false,
                   epi, pre, Part{part, parts});
}

void sgemm_epilogue_ref(bool trans_a, bool trans_b, i64 M, i64 N, i64 K, float alpha, const float* A, i64 lda,
                        const float* B, i64 ldb, float* C, i64 ldc, const GemmEpilogue& e) {
  detail::check_gemm_args("sgemm_epilogue_ref", trans_a, trans_b, M, N, K, lda, ldb, ldc);
  for (i64 i = 0; i < M; ++i)
    for (i64 j = 0; j < N; ++j) {
      double sum = 0;
      for (i64 k = 0; k < K; ++k) {
        const float a = trans_a ? A[k * lda + i] : A[i * lda + k];
        const float b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
        sum += static_cast<double>(a) * static_cast<double>(b);
      }
      double c = static_cast<double>(alpha) * sum;
      if (e.bias) c += e.bias[j];
      if (e.act != GemmAct::None) c = gelu_ref(c, e.act == GemmAct::GeluErf ? GeluForm::Erf : GeluForm::Tanh);
      if (e.residual) c += e.residual[i * e.ldr + j];
      C[i * ldc + j] = static_cast<float>(c);
    }
}

GemmTile sgemm_tile() {
  const GemmKernelSet<float>& ks = kernels<float>();
  return GemmTile{ks.mr, ks.nr};
}

namespace detail {

void sgemm_rows_source(i64 M, i64 N, i64 K, const float* A, i64 lda, const BRowSource& src, float beta, float* C,
                       i64 ldc, const GemmEpilogue& e, bool threaded, int part, int parts) {
  if (beta != 0.f && (beta != 1.f || !e.empty()))
    throw ValueError("sgemm_rows_source: beta must be 0, or 1 with an empty epilogue (got " + std::to_string(beta) +
                     ")");
  const Epi<float> epi = checked_epilogue("sgemm_rows_source", e, N);
  const Prepacked<float> pre{nullptr, 0, 0, &src};
  // ldb = K: S^T is "B stored [N,K]" (never read: the rows come from src).
  gemm_impl<float>("sgemm_rows_source", false, true, M, N, K, 1.f, A, lda, nullptr, K, beta, C, ldc,
                   part < 0 && threaded, epi, pre, part < 0 ? Part{} : Part{part, parts});
}

void apply_gemm_epilogue(const GemmEpilogue& e, float* c, i64 ldc, i64 r0, i64 c0, i64 mb, i64 nb) {
  apply_epilogue(Epi<float>{e.bias, e.act, e.residual, e.ldr}, c, ldc, r0, c0, mb, nb);
}

}  // namespace detail

}  // namespace qkv::kernels
