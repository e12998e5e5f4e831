# Attention kernels: naive reference + FlashAttention-2-style tiled kernel.
# The tiled kernel body (kernels/flash_attention_impl.h) is compiled once per
# ISA; the AVX2 / AVX-512 units select their ISA with #pragma GCC target, so
# they build without -march flags (QKV_NATIVE=OFF) and are only run when the
# CPU supports them (kernels/flash_attention.cpp dispatches at run time).
set(QKV_ATTENTION_SOURCES
  kernels/attention_ref.cpp
  kernels/flash_attention.cpp
  kernels/flash_attention_scalar.cpp
  kernels/flash_attention_avx2.cpp
  kernels/flash_attention_avx512.cpp
  kernels/decode_attention.cpp
  kernels/half.cpp
)
# Scalar expressions (vector tails, the portable ISA) are never fused into FMAs behind our back:
# a float16 cache's decode (values widened as they are loaded) then gives bitwise the float
# kernel's results on the same values, whatever the compiler inlines (kernels/half.h).
# (Absolute paths: tests/ includes this file too, for test_attention_avx512_emulated.)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/flash_attention_scalar.cpp
  ${CMAKE_CURRENT_LIST_DIR}/flash_attention_avx2.cpp ${CMAKE_CURRENT_LIST_DIR}/flash_attention_avx512.cpp
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
