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
