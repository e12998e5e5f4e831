# train/: the shared training loop (schedule, accumulation, clipping, non-finite steps,
# resume) and language-model training (token files, batches, GPT-2 gradients, one
# AdamW step against PyTorch, bitwise resume through the saved folder).
qkv_add_test(test_train SOURCES train/test_loop.cpp train/test_lm.cpp train/test_lm_parity.cpp LIBS qkv nlohmann_json::nlohmann_json)
