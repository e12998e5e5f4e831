# GELU kernels (part of qkv_core). Paths relative to src/. activation_avx512.cpp selects its
# ISA with `#pragma GCC target` (or SIMDe in the emulated test build); chosen at run time.
set(QKV_ACTIVATION_SOURCES
  kernels/activation.cpp
  kernels/activation_avx512.cpp
)
