# Gated DeltaNet kernels (recurrent, chunked, causal convolution) vs their float64 twins.
qkv_add_test(test_gated_delta SOURCES kernels/test_gated_delta.cpp LIBS qkv_core)

# Optional: the same tests with the AVX-512 file compiled on SIMDe and kernels/gemm_emulated_cpu.cpp
# as a CPU stand-in that reports AVX-512, so the AVX-512 path also runs on CPUs without it.
qkv_add_avx512_emulated_test(test_gated_delta_avx512_emulated
  KERNELS gated_delta.cmake KERNELS_VAR QKV_GATED_DELTA_SOURCES
  DEFINE QKV_GDN_AVX512_EMULATED
  WHAT "the AVX-512 Gated DeltaNet kernels"
  SOURCES kernels/gemm_emulated_cpu.cpp kernels/test_gated_delta.cpp)
