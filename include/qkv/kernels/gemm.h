// GEMM kernels: C = alpha * op(A) @ op(B) + beta * C, everything row-major.
//
// Shape contract (one line per buffer; letters are GEMM's own, not docs/shapes.md's):
//   A  trans_a=false: [M,K], row stride lda >= K     trans_a=true: [K,M], lda >= M
//   B  trans_b=false: [K,N], row stride ldb >= N     trans_b=true: [N,K], ldb >= K
//   C  [M,N], row stride ldc >= N
// M, N or K may be 0 (K == 0 or alpha == 0: C = beta*C and A, B are not read).
// beta == 0 means C is not read (it may hold NaN or Inf); the result is exact zeros
// plus the product. Sizes < 0 or leading dimensions below the minimum throw ValueError.
//
// sgemm/dgemm pack B panels (KC x NC) and A blocks (MC x KC) into per-thread,
// reused workspaces and run a register-tiled micro-kernel chosen at run time
// (active_isa(): AVX-512, AVX2+FMA or portable scalar). Transposes are absorbed by
// the packing. Small or skinny products read A (and B when not transposed)
// directly instead of packing them. The K dimension is never split across
// threads and its blocking depends only on K, so results are bitwise identical
// from run to run and for any thread count (for a given ISA).
// threaded=false runs on the calling thread only (use it inside parallel_for).
// Thread safety: any number of threads may call these at once (workspaces are thread_local;
// see core/parallel.h for how concurrent calls share the pool), with bitwise the results of
// each call made alone.
#pragma once
#include <cstdint>

namespace qkv::kernels {

void sgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
           const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
           std::int64_t ldc, bool threaded = true);
void dgemm(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
           const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
           std::int64_t ldc, bool threaded = true);

// Strided batch, for b in [0, batch):
//   C + b*stride_c = alpha * op(A + b*stride_a) @ op(B + b*stride_b) + beta * (C + b*stride_c)
// Each product has the contract above. A stride of 0 broadcasts that operand
// (stride_c may be 0 only when batch <= 1). Small products run in parallel over
// the batch, large ones one after another, each threaded.
void sgemm_batched(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                   const float* A, std::int64_t lda, std::int64_t stride_a, const float* B, std::int64_t ldb,
                   std::int64_t stride_b, float beta, float* C, std::int64_t ldc, std::int64_t stride_c,
                   std::int64_t batch);
void dgemm_batched(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
                   const double* A, std::int64_t lda, std::int64_t stride_a, const double* B, std::int64_t ldb,
                   std::int64_t stride_b, double beta, double* C, std::int64_t ldc, std::int64_t stride_c,
                   std::int64_t batch);

// Naive references: triple loop with double (resp. long double) accumulation,
// same contract. Slow; for tests.
void sgemm_ref(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
               const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
               std::int64_t ldc);
void dgemm_ref(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, double alpha,
               const double* A, std::int64_t lda, const double* B, std::int64_t ldb, double beta, double* C,
               std::int64_t ldc);

// ---- fused epilogue and pre-packed weights (the Linear layers of inference) ----

// What happens to each element of C = alpha * op(A) @ op(B) once its product is complete:
//   C[i,j] = act(alpha * sum_k a_ik b_kj + bias[j]) + residual[i*ldr + j]
// in that order, each step in float and rounded as the unfused ops round them, so the result
// is bitwise that of sgemm followed by add(bias), gelu (kernels/activation.h) and add(residual).
// The epilogue runs on each register tile right after its last K block, while it is in L1.
enum class GemmAct : std::uint8_t { None, GeluErf, GeluTanh };
struct GemmEpilogue {
  const float* bias = nullptr;      // [N], or null
  GemmAct act = GemmAct::None;
  const float* residual = nullptr;  // [M, N] with row stride ldr (>= N), or null; must not overlap C
  std::int64_t ldr = 0;
  bool empty() const { return bias == nullptr && act == GemmAct::None && residual == nullptr; }
};

// sgemm with an epilogue. beta must be 0 when the epilogue is not empty (ValueError otherwise):
// a fused layer writes C, it does not accumulate into it.
void sgemm_ex(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
              const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float beta, float* C,
              std::int64_t ldc, const GemmEpilogue& epilogue, bool threaded = true);

// op(B) [K, N] packed once into the micro-kernel's sliver layout of the ISA active when it was
// packed (a weight matrix, used for every call of its layer): sgemm_packed then skips B's
// packing, which at a few rows (one short sentence) costs as much as the product. The layout is
// a pure re-arrangement: sgemm_packed gives bitwise the result of sgemm_ex(false, trans_b, ...)
// on the original B for M > the skinny kernel's rows. Read-only once made: any number of
// threads may use one PackedB at once.
class PackedB {
 public:
  PackedB() = default;
  // B as in sgemm (trans_b=true: stored [N,K] with row stride ldb, e.g. nn.Linear's weight).
  static PackedB pack(bool trans_b, std::int64_t K, std::int64_t N, const float* B, std::int64_t ldb);
  std::int64_t K() const { return K_; }
  std::int64_t N() const { return N_; }
  bool empty() const { return data_ == nullptr; }
  // True when the active ISA's micro-kernel is the one this was packed for (set_isa may change
  // it; sgemm_packed throws ValueError when it is not).
  bool matches_active_isa() const;
  std::size_t bytes() const { return bytes_; }

  PackedB(PackedB&& o) noexcept { *this = static_cast<PackedB&&>(o); }
  PackedB& operator=(PackedB&& o) noexcept;
  PackedB(const PackedB&) = delete;
  PackedB& operator=(const PackedB&) = delete;
  ~PackedB();

 private:
  friend void sgemm_packed(std::int64_t, const float*, std::int64_t, const PackedB&, float*, std::int64_t,
                           const GemmEpilogue&, bool);
  friend void sgemm_packed_part(std::int64_t, const float*, std::int64_t, const PackedB&, float*, std::int64_t,
                                const GemmEpilogue&, int, int);
  float* data_ = nullptr;
  std::size_t bytes_ = 0;
  std::int64_t K_ = 0, N_ = 0, n_pad_ = 0, kcb_ = 0;
  int isa_ = -1, nr_ = 0;
};

// C [M, N] (row stride ldc) = epilogue(A [M, K] (row stride lda) @ B), B packed.
void sgemm_packed(std::int64_t M, const float* A, std::int64_t lda, const PackedB& B, float* C, std::int64_t ldc,
                  const GemmEpilogue& epilogue = {}, bool threaded = true);

// Part `part` of `parts` of sgemm_packed's work, on the calling thread: the tiles of C that a
// call on `parts` threads gives its thread `part` (possibly none; small products run whole in
// part 0). All parts together write all of C, bitwise as sgemm_packed, for any `parts`. For the
// members of a team (core/parallel.h, parallel_team) that cannot fork inside it.
void sgemm_packed_part(std::int64_t M, const float* A, std::int64_t lda, const PackedB& B, float* C, std::int64_t ldc,
                       const GemmEpilogue& epilogue, int part, int parts);

// Naive twin: sgemm_ref, then the epilogue in double (bias added, GELU by gelu_ref, residual
// added) and one rounding to float.
void sgemm_epilogue_ref(bool trans_a, bool trans_b, std::int64_t M, std::int64_t N, std::int64_t K, float alpha,
                        const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
                        std::int64_t ldc, const GemmEpilogue& epilogue);

// Register tile of the fp32 micro-kernel for the active ISA: C is computed in
// mr x nr blocks (AVX-512 14x32, AVX2 6x16, scalar 4x16). Fused kernels can use
// it to choose tile sizes that are multiples of the micro-tile.
struct GemmTile {
  int mr;
  int nr;
};
GemmTile sgemm_tile();

}  // namespace qkv::kernels
