// Internal to the flash attention kernels: reusable workspaces and the per-ISA
// entry points (flash_attention_{scalar,avx2,avx512}.cpp, one template body in
// flash_attention_impl.h). Not installed.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode_attention.h"

namespace qkv::kernels::flash {

// A growable float buffer, 64-byte aligned (2 MiB + MADV_HUGEPAGE when large),
// reused across calls: it only ever grows, so a warm call allocates nothing.
class Buffer {
 public:
  Buffer() = default;
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  // At least n floats; contents are unspecified (not preserved on growth).
  float* get(std::size_t n);

 private:
  float* p_ = nullptr;
  std::size_t cap_ = 0;
};

// Scratch owned by one OS thread (each parallel_for worker has its own).
enum BufferId {
  kKPacked,   // forward: K of one (b,h) in key panels [Lk/KP][D][KP]; backward: one key tile
  kVPacked,   // forward: V of one (b,h) in column panels [Dv/KP][Lk][KP]; backward: V tile in key panels
  kKRows,     // backward: K tile rows padded to Dp (odd D only)
  kQRows,     // backward: Q rows of one (b,h) padded to Dp (odd D only)
  kQPacked,   // forward: the task's Q block in row panels [BQ/MR][D][MR], scaled to base-2 scores
  kdORows,    // backward: dO rows of one (b,h) padded to Dvp (odd Dv only)
  kScores,    // S / P tile
  kDropMul,   // backward: dropout multipliers of the tile
  kPDrop,     // backward: dropped P tile
  kdS,        // backward: dP / dS tile
  kOAcc,      // forward: unnormalised O accumulator [BQ][Dvp]
  kRowMax,    // forward: running max m_i
  kRowSum,    // forward: running sum l_i
  kdKAcc,     // backward: dK accumulator of the key tile
  kdVAcc,     // backward: dV accumulator of the key tile
  kNumBuffers
};
struct ThreadWorkspace {
  Buffer buf[kNumBuffers];
};
ThreadWorkspace& thread_workspace();

// Scratch owned by the calling thread for one call (shared by its workers).
struct CallWorkspace {
  Buffer di;        // backward: D_i = rowsum(dO * O), [B*H*Lq]
  Buffer dq_slots;  // backward: per-worker dQ partials, [threads][2][Lq][Dp]
  std::vector<std::int64_t> slot_bh;  // which (b*H+h) each partial slot holds (-1: none)
  Buffer decode_parts;  // decode: per (b, key/value head, chunk, row) [m, l, o[D]] of a split head
};
CallWorkspace& call_workspace();

// The first key any query of a sequence with nq new queries and nk keys sees, by the causal and
// window rules (kernels/decode_attention.h): query i's first key.
inline std::int64_t decode_key_lo(const DecodeParams& p, std::int64_t nq, std::int64_t nk, std::int64_t i) {
  return p.window > 0 ? std::max<std::int64_t>(nk - nq + i - p.window + 1, 0) : 0;
}

// How decode attention divides a call into tasks, from the sizes alone (never the threads): one
// task per (sequence b, key/value head hk, key chunk c), sequence b's tasks numbered
// [start[b], start[b + 1]) as hk * splits(b) + c. When some head is split (`split`), each task
// leaves a partial [m, l, o[D]] per query row in a scratch of scratch_floats() floats, merged
// afterwards; otherwise tasks write their rows of O directly.
struct DecodePlan {
  const DecodeParams& p;
  std::int64_t Hkv = 1, G = 1, Rmax = 0, S_all = 1, tasks = 0;
  bool split = false;
  std::vector<std::int64_t> start;
  explicit DecodePlan(const DecodeParams& pp) : p(pp) {
    if (p.B <= 0 || p.H <= 0 || p.Lq <= 0) return;
    Hkv = p.H_kv > 0 ? p.H_kv : p.H, G = p.H / Hkv, Rmax = G * p.Lq;
    std::int64_t most = 0;
    for (std::int64_t b = 0; b < p.B; ++b)
      if (p.q_len[b] > 0) most = std::max(most, p.k_len[b] - first(b));
    S_all = decode_attention_splits(p.B, Hkv, most);
    start.assign(static_cast<std::size_t>(p.B + 1), 0);
    for (std::int64_t b = 0; b < p.B; ++b) {
      const std::int64_t S = splits(b);
      split = split || S > 1;
      start[static_cast<std::size_t>(b + 1)] = start[static_cast<std::size_t>(b)] + Hkv * S;
    }
    tasks = start[static_cast<std::size_t>(p.B)];
  }
  bool empty() const { return start.empty(); }  // no queries at all (B, H or Lq <= 0)
  // Keys some query of sequence b sees: [first(b), k_len[b]), in splits(b) chunks of equal size
  // (S from the sizes alone: the batch's largest, or each sequence's own when independent).
  std::int64_t first(std::int64_t b) const { return decode_key_lo(p, p.q_len[b], p.k_len[b], 0); }
  std::int64_t splits(std::int64_t b) const {
    return p.independent ? decode_attention_splits(1, 1, p.q_len[b] > 0 ? p.k_len[b] - first(b) : 0) : S_all;
  }
  std::int64_t slot() const { return p.D + 2; }
  std::int64_t scratch_floats() const { return split ? tasks * Rmax * slot() : 0; }
};

#define QKV_FLASH_DECLARE_ISA(name)                                                                            \
  void forward_##name(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p); \
  void backward_##name(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,         \
                       const float* V, const float* O, const float* LSE, const AttnParams& p);                 \
  FlashTileSizes tiles_##name();                                                                               \
  void rows_forward_##name(float* O, float* LSE, const float* Q, const float* K, const float* V,               \
                           const AttnParams& p);                                                               \
  void rows_backward_##name(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,    \
                            const float* V, const float* O, const float* LSE, const AttnParams& p);       \
  void decode_forward_##name(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p,     \
                             Team* tm, float* scratch);                                                        \
  void decode_forward_f16_##name(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,       \
                                 const DecodeParams& p, Team* tm, float* scratch);

QKV_FLASH_DECLARE_ISA(scalar)
QKV_FLASH_DECLARE_ISA(avx2)
QKV_FLASH_DECLARE_ISA(avx512)
#undef QKV_FLASH_DECLARE_ISA

}  // namespace qkv::kernels::flash
