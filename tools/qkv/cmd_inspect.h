// qkv inspect: list the tensors and metadata of a safetensors file.
#pragma once
#include <iosfwd>
#include <string>

namespace qkv::tool {

struct InspectOptions {
  std::string file;
  bool json = false;
};

// Opens the file with the strict reader (qkv::io::SafetensorsFile); a
// missing or corrupt file throws qkv::IOError / FormatError with one line
// naming the problem.
int run_inspect(const InspectOptions& opt, std::ostream& out);

}  // namespace qkv::tool
