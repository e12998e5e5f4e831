# GELU kernels (part of qkv_core). Paths relative to src/. activation_avx2.cpp and
# activation_avx512.cpp select their ISA with `#pragma GCC target` (AVX-512: or SIMDe in the
# emulated test build); chosen at run time.
set(QKV_ACTIVATION_SOURCES
  kernels/activation.cpp
  kernels/activation_avx2.cpp
  kernels/activation_avx512.cpp
)
