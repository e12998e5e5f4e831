// Test-only stand-in for src/kernels/dispatch.cpp in test_gemm_avx512_emulated:
// reports an AVX-512 CPU so the GEMM driver picks the AVX-512 kernels, which
// that binary compiles on SIMDe (portable emulation of the intrinsics). Linked
// before qkv_core, so the archive's dispatch.cpp.o is never pulled in.
#include <atomic>

#include "qkv/kernels/cpu.h"

namespace qkv::kernels {
namespace {
std::atomic<int> g_active{static_cast<int>(Isa::Avx512)};
}  // namespace

Isa detected_isa() { return Isa::Avx512; }
Isa active_isa() { return static_cast<Isa>(g_active.load(std::memory_order_relaxed)); }
void set_isa(Isa isa) { g_active.store(static_cast<int>(isa), std::memory_order_relaxed); }
const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace qkv::kernels
