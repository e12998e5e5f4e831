// GGUF writer: version 3 files that llama.cpp, gguf-py and io::GGUFFile read (layout in
// io/gguf.h), written atomically.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "qkv/io/gguf.h"
#include "qkv/kernels/quant.h"

namespace qkv::io {

// An owned metadata value to write: a scalar, a string, or an array (of scalars, strings or
// arrays). Values compare equal when their types and bits are equal.
class GGUFMeta {
 public:
  static GGUFMeta u8(std::uint8_t v);
  static GGUFMeta i8(std::int8_t v);
  static GGUFMeta u16(std::uint16_t v);
  static GGUFMeta i16(std::int16_t v);
  static GGUFMeta u32(std::uint32_t v);
  static GGUFMeta i32(std::int32_t v);
  static GGUFMeta u64(std::uint64_t v);
  static GGUFMeta i64(std::int64_t v);
  static GGUFMeta f32(float v);
  static GGUFMeta f64(double v);
  static GGUFMeta boolean(bool v);
  static GGUFMeta string(std::string v);
  // Arrays. `elem` is an integer type or BOOL (int_array), F32 or F64 (float_array); every
  // value must fit it (ValueError naming the element otherwise).
  static GGUFMeta int_array(GGUFType elem, const std::vector<std::int64_t>& values);
  static GGUFMeta float_array(GGUFType elem, const std::vector<double>& values);
  static GGUFMeta string_array(std::vector<std::string> values);
  // Each element must itself be an array (ValueError otherwise).
  static GGUFMeta array_of_arrays(std::vector<GGUFMeta> arrays);
  // A copy of a value read from a file (bit for bit).
  static GGUFMeta from(const GGUFValue& v);

  GGUFType type() const { return type_; }
  GGUFType element_type() const { return elem_; }  // arrays
  std::uint64_t size() const;                      // arrays: element count
  bool operator==(const GGUFMeta&) const = default;

 private:
  friend class GGUFEncoder;
  GGUFType type_ = GGUFType::U8;
  GGUFType elem_ = GGUFType::U8;
  std::vector<std::uint64_t> bits_;   // fixed-size scalars (1) and their arrays: the bytes, zero-extended
  std::vector<std::string> strings_;  // STRING (1) and arrays of STRING
  std::vector<GGUFMeta> arrays_;      // arrays of arrays
};

// Metadata in the order it is written; keys must be unique.
using GGUFMetadata = std::vector<std::pair<std::string, GGUFMeta>>;

// A tensor to write: nbytes bytes of `type` in GGML's layout.
struct GGUFTensorData {
  std::string name;
  kernels::QType type = kernels::QType::F32;
  std::vector<std::int64_t> dims;  // GGUF order, innermost first: a PyTorch [out, in] weight is {in, out}
  const void* data = nullptr;
  std::uint64_t nbytes = 0;        // must be numel / block x block bytes
};

// Writes a GGUF v3 file: the metadata in the given order, then the tensor infos and the data
// in the given order, each tensor at an offset aligned to general.alignment (a u32 power of
// two from 1 to 65536 when the metadata has it, else 32) and zero-padded to it.
//
// Validates everything first (keys and names valid UTF-8 and unique, tensor names under 64
// bytes as llama.cpp requires, at most 4 dims, none negative, the row length a multiple of
// the type's block, nbytes = the type's bytes for the dims, data non-null when nbytes > 0,
// arrays nested at most kGGUFMaxArrayDepth deep). Then writes atomically (io::AtomicFile: a
// temp file in the same directory, fsync, rename over path, fsync of the directory; write
// points "gguf: temp created", "gguf: header written", "gguf: tensor written" per tensor,
// "gguf: fsynced", ...). IOError "<path>: cannot write GGUF file: ..." on any failure; the
// previous file at path is untouched then.
void write_gguf(const std::string& path, const GGUFMetadata& metadata, const std::vector<GGUFTensorData>& tensors);

// Every metadata entry of a file, copied (for rewriting a file with changes).
GGUFMetadata metadata_of(const GGUFFile& f);

}  // namespace qkv::io
