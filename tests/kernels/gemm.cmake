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

# The quantized-weight products' AVX-512 decoders, VNNI micro-kernel and packer, the same way.
qkv_add_avx512_emulated_test(test_qgemm_avx512_emulated
  KERNELS gemm.cmake KERNELS_VAR QKV_GEMM_SOURCES
  DEFINE QKV_GEMM_AVX512_EMULATED
  WHAT "the AVX-512 quantized-weight kernels"
  SOURCES kernels/gemm_emulated_cpu.cpp kernels/test_qgemm.cpp)

# The fused GEMM epilogue calls the GELU kernel of the active ISA: the emulated tests report
# AVX-512, so they compile that kernel on SIMDe too (on an AVX2-only CPU the library's AVX-512
# GELU would stop them with SIGILL).
foreach(emulated test_gemm_avx512_emulated test_qgemm_avx512_emulated)
  if(TARGET ${emulated})
    include(${PROJECT_SOURCE_DIR}/src/kernels/activation.cmake)
    set(act_sources ${QKV_ACTIVATION_SOURCES})
    list(TRANSFORM act_sources PREPEND ${PROJECT_SOURCE_DIR}/src/)
    target_sources(${emulated} PRIVATE ${act_sources})
    target_compile_definitions(${emulated} PRIVATE QKV_ACT_AVX512_EMULATED=1)
  endif()
endforeach()
