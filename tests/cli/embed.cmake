# qkv embed / search / bench embed end to end on all-MiniLM-L6-v2 (needs `make models`).
if(TARGET qkv_tool)
  qkv_add_test(test_cli_embed SOURCES cli/test_cli_embed.cpp LIBS qkv nlohmann_json::nlohmann_json)
  target_compile_definitions(test_cli_embed PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>")
  add_dependencies(test_cli_embed qkv_tool)
endif()
