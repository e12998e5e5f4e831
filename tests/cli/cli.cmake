# End-to-end tests of the qkv command-line tool: run the built binary and
# check its output and exit codes.
if(TARGET qkv_tool)
  qkv_add_test(test_cli
    SOURCES cli/test_cli.cpp
            cli/test_cli_corrupt.cpp        # corrupt safetensors files, one per rule (CliCorruptFiles.*)
            cli/test_cli_inspect.cpp        # inspect: GGUF files, format by magic, header-only (CliInspectGguf.*)
            cli/test_cli_train_seq2seq.cpp  # train seq2seq, --resume (CliTrainSeq2Seq.*)
    LIBS qkv nlohmann_json::nlohmann_json)
  target_compile_definitions(test_cli PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>")
  add_dependencies(test_cli qkv_tool)
  target_sources(test_cli PRIVATE cli/test_cli_bench.cpp)  # `qkv bench` reports (CliBench.*)
  target_sources(test_cli PRIVATE cli/test_cli_generate.cpp)  # generate / tokenize / bench generate (CliGenerate.*)
  target_sources(test_cli PRIVATE cli/test_cli_train_lm.cpp)  # train lm, --resume, --init-only (CliTrainLM.*)
  target_sources(test_cli PRIVATE cli/test_cli_tokenize_train.cpp)  # tokenize train (CliTokenizeTrain.*)
  target_sources(test_cli PRIVATE cli/test_cli_limits.cpp)  # absurd sizes from flags and configs (CliLimits.*)
  target_sources(test_cli PRIVATE cli/test_cli_messages.cpp)  # numbers, messages, printed commands (CliMessages.*)
  target_sources(test_cli PRIVATE cli/test_cli_outputs.cpp)  # outputs never damaged; Ctrl-C, SIGKILL (CliOutputs.*)
  target_sources(test_cli PRIVATE cli/test_cli_llama.cpp)  # generate --chat, chat, convert to GGUF on the Llama family (CliLlama.*)
  target_sources(test_cli PRIVATE cli/test_cli_arch.cpp)  # every architecture of the registry through the tool (CliArch.*)
  target_sources(test_cli PRIVATE cli/test_cli_speculative.cpp)
  target_sources(test_cli PRIVATE cli/test_cli_perplexity.cpp)  # perplexity: transformers' number, --save-logits, --kl-reference (CliPerplexity.*)  # generate --draft: same tokens, counts, bad drafts (CliSpeculative.*)
endif()
