# The libFuzzer targets' inputs replayed as ordinary tests (no libFuzzer needed): each harness of
# fuzz/ is compiled into test_fuzz_replay under its own name and run on its committed seeds
# (fuzz/corpus/<target>/) and on every input a fuzzer ever crashed on (fuzz/regressions/<target>/),
# so a fixed crash stays fixed in `make test` and under the sanitizers of `make test-asan`.
set(QKV_FUZZ_HARNESSES safetensors checkpoint model_folder bpe wordpiece gguf tokenizer chat_template)
set(replay_sources fuzz/test_fuzz_replay.cpp
                   fuzz/test_fuzz_regressions.cpp)  # bugs found by fuzzing, one test each (FuzzRegression.*)
foreach(t ${QKV_FUZZ_HARNESSES})
  list(APPEND replay_sources ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${t}.cpp)
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${t}.cpp
               APPEND PROPERTY COMPILE_DEFINITIONS LLVMFuzzerTestOneInput=qkv_fuzz_${t}_one_input)
endforeach()
# fuzz_openai reads the server's request bodies (serve/, linked from qkv_serve).
list(APPEND replay_sources ${PROJECT_SOURCE_DIR}/fuzz/fuzz_openai.cpp)
set_property(SOURCE ${PROJECT_SOURCE_DIR}/fuzz/fuzz_openai.cpp
             APPEND PROPERTY COMPILE_DEFINITIONS LLVMFuzzerTestOneInput=qkv_fuzz_openai_one_input)
qkv_add_test(test_fuzz_replay SOURCES ${replay_sources} LIBS qkv qkv_serve nlohmann_json::nlohmann_json)
target_include_directories(test_fuzz_replay PRIVATE ${PROJECT_SOURCE_DIR}/fuzz)
