// FlashAttention-2-style tiled attention on the CPU: public entry points,
// run-time ISA dispatch and the reusable workspaces. The kernel body is one
// template (flash_attention_impl.h) compiled three times:
//   flash_attention_scalar.cpp  portable C++ (the fallback; also the baseline build)
//   flash_attention_avx2.cpp    AVX2 + FMA  (#pragma GCC target, works with QKV_NATIVE=OFF)
//   flash_attention_avx512.cpp  AVX-512F/BW/VL/DQ
// The naive twin (reference) is attention_ref.cpp.
#include "qkv/kernels/attention.h"
#include "qkv/kernels/cpu.h"
#include "qkv/core/error.h"
#include "qkv/core/storage.h"
#include "flash_attention_internal.h"

namespace qkv::kernels {
namespace flash {

Buffer::~Buffer() { qkv::aligned_free(p_); }

float* Buffer::get(std::size_t n) {
  if (n > cap_) {
    qkv::aligned_free(p_);
    p_ = nullptr;
    cap_ = 0;
    p_ = static_cast<float*>(qkv::aligned_alloc_bytes(n * sizeof(float), "flash_attention workspace"));
    cap_ = n;
  }
  return p_;
}

ThreadWorkspace& thread_workspace() {
  thread_local ThreadWorkspace ws;
  return ws;
}

CallWorkspace& call_workspace() {
  thread_local CallWorkspace ws;
  return ws;
}

static bool use_rows(const AttnParams& p) {
  if (p.softcap > 0 || p.sinks) return false;  // the row kernel has no soft-cap nor sinks (the tiled one has)
  return p.kernel == AttnKernel::Rows ||
         (p.kernel == AttnKernel::Auto && p.Lk <= kRowsKernelMaxKeys && p.D <= kRowsKernelMaxDim);
}

}  // namespace flash

void flash_attention_forward(float* O, float* LSE, const float* Q, const float* K, const float* V,
                             const AttnParams& p) {
  // O   [B,H,Lq,Dv]  strides o_*
  // LSE [B,H,Lq]     contiguous
  // Q   [B,H,Lq,D]   strides q_*
  // K   [B,H,Lk,D]   strides k_*
  // V   [B,H,Lk,Dv]  strides v_*
  if (flash::use_rows(p)) {
    switch (active_isa()) {
      case Isa::Avx512: return flash::rows_forward_avx512(O, LSE, Q, K, V, p);
      case Isa::Avx2: return flash::rows_forward_avx2(O, LSE, Q, K, V, p);
      case Isa::Scalar: return flash::rows_forward_scalar(O, LSE, Q, K, V, p);
    }
  }
  switch (active_isa()) {
    case Isa::Avx512: return flash::forward_avx512(O, LSE, Q, K, V, p);
    case Isa::Avx2: return flash::forward_avx2(O, LSE, Q, K, V, p);
    case Isa::Scalar: break;
  }
  flash::forward_scalar(O, LSE, Q, K, V, p);
}

void flash_attention_backward(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                              const float* V, const float* O, const float* LSE, const AttnParams& p) {
  if (p.softcap > 0) throw ValueError("flash_attention_backward: soft-capped scores have no backward (softcap must be 0)");
  if (p.sinks) throw ValueError("flash_attention_backward: attention sinks have no backward (sinks must be null)");
  // dQ, Q  [B,H,Lq,D]   strides q_*
  // dK, K  [B,H,Lk,D]   strides k_*
  // dV, V  [B,H,Lk,Dv]  strides v_*
  // dO, O  [B,H,Lq,Dv]  strides o_*
  // LSE    [B,H,Lq]     contiguous
  if (flash::use_rows(p)) {
    switch (active_isa()) {
      case Isa::Avx512: return flash::rows_backward_avx512(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
      case Isa::Avx2: return flash::rows_backward_avx2(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
      case Isa::Scalar: return flash::rows_backward_scalar(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
    }
  }
  switch (active_isa()) {
    case Isa::Avx512: return flash::backward_avx512(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
    case Isa::Avx2: return flash::backward_avx2(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
    case Isa::Scalar: break;
  }
  flash::backward_scalar(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}

FlashTileSizes flash_attention_tile_sizes() {
  switch (active_isa()) {
    case Isa::Avx512: return flash::tiles_avx512();
    case Isa::Avx2: return flash::tiles_avx2();
    case Isa::Scalar: break;
  }
  return flash::tiles_scalar();
}

}  // namespace qkv::kernels
