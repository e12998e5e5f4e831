# GGUF reader / writer (library qkv_gguf). Paths relative to src/.
set(QKV_GGUF_SOURCES
  io/gguf.cpp
  io/gguf_value.cpp
  io/gguf_writer.cpp
)
