# Tests of the core engine (tensor, autograd, ops, nn, optim).
qkv_add_test(test_tensor SOURCES core/test_tensor.cpp LIBS qkv)
# Vectorised core kernels (dropout masks, row softmax and log-softmax forward and backward, GELU) against their
# scalar definitions.
qkv_add_test(test_core_kernels SOURCES core/test_dropout_mask.cpp core/test_softmax_kernel.cpp
             core/test_log_softmax_kernel.cpp core/test_gelu_kernel.cpp
             core/test_softmax_backward_kernel.cpp LIBS qkv_core)
# Layer norm rows (forward, backward) against their naive twin and a float64 formula.
qkv_add_test(test_layer_norm_kernel SOURCES core/test_layer_norm_kernel.cpp LIBS qkv_core)
# The Llama family's row kernels (RMSNorm, RoPE, SwiGLU) against their naive twins.
qkv_add_test(test_llama_kernels SOURCES core/test_llama_kernels.cpp LIBS qkv_core)
# parallel_for's static chunks and parallel_claim's run-time balancing; the thread pool under
# them (many calls, exceptions, nesting, concurrent callers, resizing, idle sleep, fork).
qkv_add_test(test_parallel SOURCES core/test_parallel.cpp core/test_thread_pool.cpp core/test_team.cpp LIBS qkv_core
             LABELS concurrency)
# The FMA peak loop of `qkv bench peak` (exact counts and checksum per ISA and thread count).
qkv_add_test(test_fma_peak SOURCES core/test_fma_peak.cpp LIBS qkv_core)
qkv_add_test(test_autograd SOURCES autograd/test_autograd.cpp LIBS qkv)
qkv_add_test(test_gradcheck SOURCES ops/test_gradcheck.cpp nn/test_module_gradcheck.cpp LIBS qkv)
qkv_add_test(test_attention_ops SOURCES ops/test_attention_ops.cpp ops/test_tutorial.cpp ops/test_functional_ops.cpp LIBS qkv)
qkv_add_test(test_bad_inputs SOURCES ops/test_bad_inputs.cpp LIBS qkv)
qkv_add_test(test_nn SOURCES nn/test_nn.cpp optim/test_optim.cpp LIBS qkv)

# The library installs as a CMake package; a tiny consumer builds against it.
# The consumer is built with this build's compiler, and with its sanitizers (a program linking an
# instrumented qkv needs their runtime).
set(consumer_flags "")
if(QKV_SANITIZE)
  set(consumer_flags "-fsanitize=${QKV_SANITIZE}")
endif()
add_test(NAME package_consumer
         COMMAND ${PROJECT_SOURCE_DIR}/tests/package/run_consumer.sh ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
                 ${CMAKE_CXX_COMPILER} "${consumer_flags}")
set_tests_properties(package_consumer PROPERTIES TIMEOUT 600 PASS_REGULAR_EXPRESSION "weights \\[2,4,6,6\\]")
# Resource limits: overflowing or unaffordable sizes (tensors, modules, models, configs) fail up front.
qkv_add_test(test_memory SOURCES core/test_memory.cpp LIBS qkv)

# The GELU kernel tests again with the AVX-512 float path compiled on SIMDe and a CPU stand-in
# that reports AVX-512 (kernels/gemm_emulated_cpu.cpp), so that path also runs without AVX-512.
qkv_add_avx512_emulated_test(test_gelu_avx512_emulated
  KERNELS activation.cmake KERNELS_VAR QKV_ACTIVATION_SOURCES
  DEFINE QKV_ACT_AVX512_EMULATED
  WHAT "the AVX-512 GELU kernel"
  SOURCES kernels/gemm_emulated_cpu.cpp core/test_gelu_kernel.cpp)
