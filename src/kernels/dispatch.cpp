#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "qkv/core/env.h"
#include "qkv/kernels/cpu.h"

namespace qkv::kernels {
namespace {

// F16C (half <-> float conversions; every AVX2 CPU has it, the AVX2 kernels use it). From CPUID
// leaf 1, as clang 14's __builtin_cpu_supports does not know "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return Isa::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()) return Isa::Avx2;
  return Isa::Scalar;
}

Isa initial_cap() {
  const auto env = env_choice("QKV_ISA", {"scalar", "avx2", "avx512"});  // ValueError if invalid
  if (!env) return Isa::Avx512;
  if (*env == "scalar") return Isa::Scalar;
  if (*env == "avx2") return Isa::Avx2;
  return Isa::Avx512;
}

std::atomic<int> g_active{-1};

}  // namespace

Isa detected_isa() {
  static const Isa d = detect();
  return d;
}

Isa active_isa() {
  int a = g_active.load(std::memory_order_relaxed);
  if (a < 0) {
    a = static_cast<int>(detected_isa()) < static_cast<int>(initial_cap()) ? static_cast<int>(detected_isa())
                                                                           : static_cast<int>(initial_cap());
    g_active.store(a, std::memory_order_relaxed);
  }
  return static_cast<Isa>(a);
}

void set_isa(Isa isa) {
  int a = static_cast<int>(isa);
  if (a > static_cast<int>(detected_isa())) a = static_cast<int>(detected_isa());
  g_active.store(a, std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace qkv::kernels
