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

// Tensors of a mapped file (view_tensor: float32 ones view the file, copy-on-write).
LoadedTensors load_safetensors(const std::string& path);
// The same from a file's bytes (SafetensorsFile::parse); `source` names it in messages.
LoadedTensors load_safetensors_bytes(std::vector<std::uint8_t> bytes, const std::string& source);
// Tensors of any layout; written contiguous in the given order. Atomic.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// One file tensor -> a qkv Tensor.
Tensor to_tensor(const SafetensorsFile& f, const StTensorInfo& info);
// The same without a copy where it can be: for an F32, F64 or I64 tensor of a mapped file whose
// bytes are aligned for the dtype, a tensor viewing the mapping (which it keeps alive;
// copy-on-write, so writing it never changes the file); else to_tensor's converted copy.
Tensor view_tensor(const SafetensorsFile& f, const StTensorInfo& info);

}  // namespace qkv::io
