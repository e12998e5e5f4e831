qkv_add_test(test_gemm SOURCES kernels/test_gemm.cpp LIBS qkv_gemm)

# Optional: the AVX-512 micro-kernels checked on a CPU without AVX-512, by
# compiling src/kernels/gemm_avx512.cpp on SIMDe (Debian libsimde-dev), a
# portable implementation of the intrinsics, with a CPU stand-in that reports
# AVX-512. Same tests as test_gemm, AVX-512 instance only.
find_path(QKV_SIMDE_INCLUDE simde/x86/avx512.h)
if(QKV_SIMDE_INCLUDE)
  include(${PROJECT_SOURCE_DIR}/src/kernels/gemm.cmake)
  set(_qkv_gemm_emulated_sources ${QKV_GEMM_SOURCES})
  list(TRANSFORM _qkv_gemm_emulated_sources PREPEND ${PROJECT_SOURCE_DIR}/src/)
  qkv_add_test(test_gemm_avx512_emulated
    SOURCES kernels/gemm_emulated_cpu.cpp kernels/test_gemm.cpp ${_qkv_gemm_emulated_sources}
    LIBS qkv_core)
  target_compile_definitions(test_gemm_avx512_emulated PRIVATE QKV_GEMM_AVX512_EMULATED=1)
  target_include_directories(test_gemm_avx512_emulated PRIVATE ${QKV_SIMDE_INCLUDE})
  target_compile_options(test_gemm_avx512_emulated PRIVATE -O2 -Wno-psabi)
else()
  message(STATUS "qkv: simde not found; the AVX-512 GEMM kernels are tested only on AVX-512 CPUs")
endif()
