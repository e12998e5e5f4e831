qkv_add_test(test_gemm SOURCES kernels/test_gemm.cpp kernels/test_gemm_fused.cpp LIBS qkv_gemm)

# Optional: the same tests with the AVX-512 micro-kernels compiled on SIMDe and
# gemm_emulated_cpu.cpp as a CPU stand-in that reports AVX-512 (AVX-512 instance
# only), so the AVX-512 path also runs on CPUs without it.
qkv_add_avx512_emulated_test(test_gemm_avx512_emulated
  KERNELS gemm.cmake KERNELS_VAR QKV_GEMM_SOURCES
  DEFINE QKV_GEMM_AVX512_EMULATED
  WHAT "the AVX-512 GEMM kernels"
  SOURCES kernels/gemm_emulated_cpu.cpp kernels/test_gemm.cpp kernels/test_gemm_fused.cpp)

# Quantized block types: dequantize/quantize against gguf-py's fixtures.
qkv_add_test(test_quant SOURCES kernels/test_quant.cpp LIBS qkv_gemm qkv_safetensors)
qkv_add_test(test_qgemm SOURCES kernels/test_qgemm.cpp LIBS qkv_gemm)
