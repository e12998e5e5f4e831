set(QKV_SAFETENSORS_SOURCES
  io/safetensors.cpp
  io/safetensors_writer.cpp
  io/atomic_file.cpp
  io/mapped_file.cpp
)
