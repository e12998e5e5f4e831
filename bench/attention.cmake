# bench_attention: FlashAttention-style forward / forward+backward GFLOP/s (Google Benchmark).
add_executable(bench_attention bench_attention.cpp)
target_link_libraries(bench_attention PRIVATE qkv_attention_kernels benchmark::benchmark qkv_warnings)
target_compile_options(bench_attention PRIVATE ${QKV_ARCH_FLAGS} -O2)
