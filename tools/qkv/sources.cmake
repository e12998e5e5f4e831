# Sources of the qkv tool (paths relative to tools/qkv). One file per subcommand:
# a new subcommand is a new .cpp that registers itself with QKV_TOOL_COMMAND
# (see command.h) plus one line here.
set(QKV_TOOL_SOURCES
  main.cpp
  command.cpp
  format.cpp
  progress.cpp
  output.cpp
  interrupt.cpp
  cmd_worked_example.cpp
  cmd_trace.cpp
  cmd_variance.cpp
  cmd_inspect.cpp
  cmd_inspect_gguf.cpp
  bench_util.cpp
  cmd_bench.cpp
  cmd_bench_generate.cpp
  cmd_generate.cpp
  cmd_chat.cpp
  sampling_flags.cpp
  cmd_tokenize.cpp
  cmd_tokenize_train.cpp
  cmd_convert.cpp
  model_dir.cpp
  cmd_demo.cpp
  cmd_heatmap.cpp
  cmd_train.cpp
  cmd_train_classify.cpp
  cmd_train_seq2seq.cpp
  cmd_train_lm.cpp
  cmd_embed.cpp
  cmd_search.cpp
  cmd_bench_embed.cpp
  embed_index.cpp
)
