# TinyTextClassifier, its task, checkpoints and `qkv train classify` (run as the built tool).
qkv_add_test(test_classifier SOURCES models/test_classifier.cpp LIBS qkv)
if(TARGET qkv_tool)
  target_compile_definitions(test_classifier PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>")
  add_dependencies(test_classifier qkv_tool)
endif()
