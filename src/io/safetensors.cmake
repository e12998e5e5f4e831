set(QKV_SAFETENSORS_SOURCES
  io/safetensors.cpp
  io/safetensors_writer.cpp
)
