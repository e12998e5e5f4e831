qkv_add_test(test_attention SOURCES kernels/test_attention.cpp LIBS qkv_attention_kernels)

# Optional: the same tests with the AVX-512 flash kernels compiled on SIMDe (Debian
# libsimde-dev, portable intrinsics) and a CPU stand-in that reports AVX-512, so the AVX-512
# path also runs on CPUs without it (slower: SIMDe emulates each 512-bit op).
find_path(QKV_SIMDE_INCLUDE simde/x86/avx512.h)
if(QKV_SIMDE_INCLUDE)
  include(${PROJECT_SOURCE_DIR}/src/kernels/attention.cmake)
  set(_qkv_attention_emulated_sources ${QKV_ATTENTION_SOURCES})
  list(TRANSFORM _qkv_attention_emulated_sources PREPEND ${PROJECT_SOURCE_DIR}/src/)
  qkv_add_test(test_attention_avx512_emulated
    SOURCES kernels/test_attention.cpp ${_qkv_attention_emulated_sources}
    LIBS qkv_core)
  target_compile_definitions(test_attention_avx512_emulated PRIVATE QKV_FLASH_AVX512_EMULATED=1)
  target_include_directories(test_attention_avx512_emulated PRIVATE ${QKV_SIMDE_INCLUDE})
  target_compile_options(test_attention_avx512_emulated PRIVATE -O2 -Wno-psabi)
else()
  message(STATUS "qkv: simde not found; the AVX-512 flash kernels are tested only on AVX-512 CPUs")
endif()
