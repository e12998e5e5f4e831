# viz: PNG heatmaps (decoded with libpng), the HTML explorer (loaded in
# headless Chromium when installed) and the `qkv heatmap` command.
find_package(PNG REQUIRED)
qkv_add_test(test_viz SOURCES viz/test_viz.cpp
                        viz/test_text_attention.cpp  # real models' maps vs transformers (TextAttention*)
              LIBS qkv PNG::PNG nlohmann_json::nlohmann_json)
if(TARGET qkv_tool)
  target_compile_definitions(test_viz PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>")
  add_dependencies(test_viz qkv_tool)
endif()
