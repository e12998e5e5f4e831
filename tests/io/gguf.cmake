# GGUF reader / writer (src/io/gguf*.cpp) and the file mappings under both readers.
qkv_add_test(test_gguf
  SOURCES io/test_gguf.cpp
          io/test_gguf_reject.cpp   # one broken file per rule (GgufReject.*)
          io/test_gguf_write.cpp    # gguf-py's bytes, validation, SIGKILL at every write point
          io/test_gguf_fuzz.cpp     # seeded mutations (GgufFuzz.*)
          io/test_gguf_smollm2.cpp  # the real models/SmolLM2-135M-Instruct.Q4_1.gguf (make models)
          io/test_mapped_file.cpp
  LIBS qkv_gguf nlohmann_json::nlohmann_json)
