// Tensors <-> safetensors files (the strict reader and atomic writer of
// io/safetensors.h underneath). F32, F64, I64 and BOOL load as qkv dtypes;
// F16 and BF16 load converted to float32; other dtypes are a FormatError.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/io/safetensors.h"

namespace qkv::io {

struct LoadedTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file (data offset) order
  std::map<std::string, std::string> metadata;
  // The tensor named `name`; FormatError naming the file if absent.
  const Tensor& at(const std::string& name) const;
  bool contains(const std::string& name) const;
  std::string source;
};

LoadedTensors load_safetensors(const std::string& path);
// The same from a file's bytes (SafetensorsFile::parse); `source` names it in messages.
LoadedTensors load_safetensors_bytes(std::vector<std::uint8_t> bytes, const std::string& source);
// Tensors of any layout; written contiguous in the given order. Atomic.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// One file tensor -> a qkv Tensor.
Tensor to_tensor(const SafetensorsFile& f, const StTensorInfo& info);

}  // namespace qkv::io
