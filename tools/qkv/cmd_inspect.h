// qkv inspect: list the tensors and metadata of a safetensors or GGUF file.
#pragma once
#include <iosfwd>
#include <string>

namespace qkv::tool {

struct InspectOptions {
  std::string file;
  bool json = false;
  bool full = false;  // GGUF: every array element and whole strings (default: summarised)
};

// Detects the format by its magic ("GGUF": GGUF, else safetensors) and reads only the file's
// header with the strict readers (qkv::io::SafetensorsFile::open_header,
// qkv::io::GGUFFile::open_header): no tensor data is read, whatever the file size. A missing
// or corrupt file throws qkv::IOError / FormatError with one line naming the problem.
int run_inspect(const InspectOptions& opt, std::ostream& out);
// The GGUF part (cmd_inspect_gguf.cpp).
int run_inspect_gguf(const InspectOptions& opt, std::ostream& out);

}  // namespace qkv::tool
