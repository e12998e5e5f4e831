# train/: the shared training loop (schedule, accumulation, clipping, non-finite steps,
# resume) and language-model training (token files, batches, GPT-2 gradients, one
# AdamW step against PyTorch, bitwise resume through the saved folder).
qkv_add_test(test_train SOURCES train/test_loop.cpp train/test_lm.cpp train/test_lm_parity.cpp LIBS qkv nlohmann_json::nlohmann_json)
# Checkpoint faults for every trainer: saves SIGKILLed at every write point and after
# delays, checkpoints truncated at every byte and with flipped bytes (library and CLI).
qkv_add_test(test_train_faults SOURCES train/test_save_killed.cpp train/test_checkpoint_damage.cpp LIBS qkv nlohmann_json::nlohmann_json)
if(TARGET qkv_tool)
  target_compile_definitions(test_train_faults PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>")
  add_dependencies(test_train_faults qkv_tool)
endif()
# Data-parallel training without an MPI job: one process is rank 0 of 1, the ranks' start-up
# check, what ranks read instead of files, the trainers' steps of several micro-batches.
qkv_add_test(test_distributed SOURCES train/test_distributed.cpp LIBS qkv)
# Data-parallel training under mpirun (2 ranks, oversubscribed, as root in CI): bitwise equal
# to one process for every trainer, resume across rank counts, killed and hung ranks, ranks
# that disagree. Only with MPI (QKV_WITH_MPI) and the qkv tool.
if(QKV_WITH_MPI AND TARGET qkv_tool AND MPIEXEC_EXECUTABLE)
  qkv_add_test(test_distributed_mpi SOURCES train/test_distributed_mpi.cpp LIBS qkv)
  target_compile_definitions(test_distributed_mpi PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>"
                                                          QKV_MPIEXEC="${MPIEXEC_EXECUTABLE}")
  add_dependencies(test_distributed_mpi qkv_tool)
endif()
# The machinery inside a job: this binary runs as each of 3 ranks (its own main starts the
# job): collectives of any size, the gradient exchange bitwise equal to the one-process fold,
# the start-up check, heartbeats of a busy rank, a silent rank named after the timeout.
if(QKV_WITH_MPI AND MPIEXEC_EXECUTABLE)
  add_executable(test_distributed_ranks train/test_distributed_ranks.cpp)
  target_link_libraries(test_distributed_ranks PRIVATE qkv GTest::gtest qkv_warnings)
  target_include_directories(test_distributed_ranks PRIVATE ${PROJECT_SOURCE_DIR}/tests ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(test_distributed_ranks PRIVATE ${QKV_ARCH_FLAGS})
  add_test(NAME DistributedRanks.ThreeRanks
           COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none
                   -np 3 $<TARGET_FILE:test_distributed_ranks>)
  set_tests_properties(DistributedRanks.ThreeRanks PROPERTIES TIMEOUT 300)
endif()
