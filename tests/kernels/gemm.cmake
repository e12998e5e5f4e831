qkv_add_test(test_gemm SOURCES kernels/test_gemm.cpp kernels/test_gemm_fused.cpp LIBS qkv_gemm)

# Quantized block types: dequantize/quantize against gguf-py's fixtures.
qkv_add_test(test_quant SOURCES kernels/test_quant.cpp LIBS qkv_gemm qkv_safetensors)
qkv_add_test(test_qgemm SOURCES kernels/test_qgemm.cpp kernels/test_qgemm_decoders.cpp LIBS qkv_gemm)

# Optional: the GEMM and quantized-weight tests (AVX-512 instances only) with the AVX-512
# micro-kernels, decoders, VNNI tile and packer compiled on SIMDe, and gemm_emulated_cpu.cpp as a
# CPU stand-in that reports AVX-512, so the AVX-512 path also runs on CPUs without it. One binary,
# so the kernel family is compiled on SIMDe once.
qkv_add_avx512_emulated_test(test_gemm_avx512_emulated
  KERNELS gemm.cmake KERNELS_VAR QKV_GEMM_SOURCES
  DEFINE QKV_GEMM_AVX512_EMULATED
  WHAT "the AVX-512 GEMM and quantized-weight kernels"
  SOURCES kernels/gemm_emulated_cpu.cpp kernels/test_gemm.cpp kernels/test_gemm_fused.cpp kernels/test_qgemm.cpp
          kernels/test_qgemm_decoders.cpp)

# The fused GEMM epilogue calls the GELU kernel of the active ISA: the emulated test reports
# AVX-512, so it compiles that kernel on SIMDe too (on an AVX2-only CPU the library's AVX-512
# GELU would stop it with SIGILL).
if(TARGET test_gemm_avx512_emulated)
  include(${PROJECT_SOURCE_DIR}/src/kernels/activation.cmake)
  set(act_sources ${QKV_ACTIVATION_SOURCES})
  list(TRANSFORM act_sources PREPEND ${PROJECT_SOURCE_DIR}/src/)
  target_sources(test_gemm_avx512_emulated PRIVATE ${act_sources})
  target_compile_definitions(test_gemm_avx512_emulated PRIVATE QKV_ACT_AVX512_EMULATED=1)
endif()
