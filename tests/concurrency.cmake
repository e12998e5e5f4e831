# Concurrency (label `concurrency`; `make test-tsan` runs these and test_parallel under
# ThreadSanitizer): one loaded model serving 8 user threads at once -- an encoder stack, GPT-2
# generation with a KV cache per request, the MiniLM sentence embedder (needs `make models`) --
# and the threaded kernels called from 8 user threads over a 2-thread pool; every result equal
# bit for bit to the same request served alone.
qkv_add_test(test_concurrent SOURCES infer/test_concurrent.cpp LIBS qkv LABELS concurrency)
qkv_add_test(test_concurrent_kernels SOURCES kernels/test_concurrent_kernels.cpp LIBS qkv_gemm qkv_attention_kernels
             LABELS concurrency)
# The continuous-batching scheduler (infer/scheduler.h): 16 client threads, each request's tokens
# those it gets alone; cancellation, chunked prefill, the queue bound, shutdown.
qkv_add_test(test_scheduler SOURCES infer/test_scheduler.cpp LIBS qkv LABELS concurrency)
