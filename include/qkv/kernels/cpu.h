// Run-time choice of the instruction set for fast kernels.
// Detected from CPUID once; $QKV_ISA=scalar|avx2|avx512 caps it (tests use
// this to exercise every path on one machine; set_isa does the same in code).
#pragma once

namespace qkv::kernels {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

// Best ISA this CPU supports (ignores the cap).
Isa detected_isa();
// ISA the fast kernels use now: min(detected, cap).
Isa active_isa();
// Caps the ISA (clamped to what the CPU supports). Not thread-safe with running kernels.
void set_isa(Isa isa);
const char* isa_name(Isa isa);

}  // namespace qkv::kernels
