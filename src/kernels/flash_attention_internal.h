// Internal to the flash attention kernels: reusable workspaces and the per-ISA
// entry points (flash_attention_{scalar,avx2,avx512}.cpp, one template body in
// flash_attention_impl.h). Not installed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

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
  std::vector<std::int64_t> decode_splits;  // decode: the key chunks of each sequence [B]
};
CallWorkspace& call_workspace();

#define QKV_FLASH_DECLARE_ISA(name)                                                                            \
  void forward_##name(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p); \
  void backward_##name(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,         \
                       const float* V, const float* O, const float* LSE, const AttnParams& p);                 \
  FlashTileSizes tiles_##name();                                                                               \
  void rows_forward_##name(float* O, float* LSE, const float* Q, const float* K, const float* V,               \
                           const AttnParams& p);                                                               \
  void rows_backward_##name(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,    \
                            const float* V, const float* O, const float* LSE, const AttnParams& p);       \
  void decode_forward_##name(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p);     \
  void decode_forward_f16_##name(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,       \
                                 const DecodeParams& p);

QKV_FLASH_DECLARE_ISA(scalar)
QKV_FLASH_DECLARE_ISA(avx2)
QKV_FLASH_DECLARE_ISA(avx512)
#undef QKV_FLASH_DECLARE_ISA

}  // namespace qkv::kernels::flash
