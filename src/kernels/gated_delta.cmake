# Gated DeltaNet kernels (part of qkv_core). Paths relative to src/. The kernel body
# (kernels/gated_delta_impl.h) is compiled once per ISA: gated_delta_avx2.cpp and
# gated_delta_avx512.cpp select theirs with `#pragma GCC target` (AVX-512: or SIMDe in the emulated
# test build), so they build without -march flags; gated_delta.cpp dispatches at run time.
set(QKV_GATED_DELTA_SOURCES
  kernels/gated_delta.cpp
  kernels/gated_delta_scalar.cpp
  kernels/gated_delta_avx2.cpp
  kernels/gated_delta_avx512.cpp
)
