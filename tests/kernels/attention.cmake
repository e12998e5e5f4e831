qkv_add_test(test_attention SOURCES kernels/test_attention.cpp kernels/test_attention_gqa.cpp LIBS qkv_attention_kernels)

# Optional: the same tests with the AVX-512 flash and decode kernels compiled on SIMDe, so
# the AVX-512 path also runs on CPUs without it.
qkv_add_avx512_emulated_test(test_attention_avx512_emulated
  KERNELS attention.cmake KERNELS_VAR QKV_ATTENTION_SOURCES
  DEFINE QKV_FLASH_AVX512_EMULATED
  WHAT "the AVX-512 flash and decode kernels"
  SOURCES kernels/test_attention.cpp kernels/test_attention_gqa.cpp kernels/test_decode_attention.cpp)

# Decode attention over a KV cache (split-K, per-sequence lengths) vs its naive twin.
qkv_add_test(test_decode_attention SOURCES kernels/test_decode_attention.cpp LIBS qkv_attention_kernels)
