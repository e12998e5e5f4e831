# The gradient exchange of data-parallel training alone (run under mpirun; docs/distributed.md).
if(QKV_WITH_MPI)
  add_executable(bench_grad_exchange ${CMAKE_CURRENT_LIST_DIR}/bench_grad_exchange.cpp)
  target_link_libraries(bench_grad_exchange PRIVATE qkv qkv_warnings)
  target_include_directories(bench_grad_exchange PRIVATE ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(bench_grad_exchange PRIVATE ${QKV_ARCH_FLAGS})
endif()
