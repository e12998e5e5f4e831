# Strict safetensors reader / atomic writer (src/io/safetensors*.cpp).
qkv_add_test(test_safetensors
  SOURCES io/test_safetensors.cpp
          io/test_safetensors_write.cpp
          io/test_safetensors_fuzz.cpp
          io/test_safetensors_limits.cpp  # huge shapes: FormatError, or mapped and ResourceError before loading
  LIBS qkv)
