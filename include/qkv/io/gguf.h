// GGUF, llama.cpp's model file: a strict, memory-mapped reader.
//
// File layout (REFERENCES.md section 6; little-endian):
//   "GGUF", version u32 (2 or 3), tensor_count u64, kv_count u64
//   kv_count x { key: string, type u32, value }        string = u64 length + UTF-8 bytes
//   tensor_count x { name: string, n_dims u32 (<= 4), dims u64[n_dims] innermost first,
//                    type u32 (GGML type id), offset u64 (from the data section) }
//   padding to general.alignment (default 32), then the data section: each tensor at its
//   offset (a multiple of the alignment), padded to the alignment.
// Value types: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool, 8 string,
// 9 array (element type u32 + count u64 + elements; arrays may nest), 10 u64, 11 i64, 12 f64.
//
// The reader trusts nothing read from the file. Each of these is a FormatError with one line
// naming the file and the item (the metadata key or entry, the tensor): bad magic or version
// (1 is refused: its counts were 32-bit), a count or a length that runs past the end of the
// file (every count is bounded by the bytes left before anything is allocated for it), an
// unknown value type, a bool that is not 0 or 1, a string that is not UTF-8, arrays nested
// more than kGGUFMaxArrayDepth deep, a duplicate key or tensor name, general.alignment not a
// u32 power of two in [1, 65536], more than 4 dims, a dim or element count beyond int64, a
// tensor type id that is no GGML type ("tensor 'w' has unknown type id 1000"), a row length that
// is not a multiple of the type's block, an offset that is not aligned, tensors that overlap or
// leave a hole beyond the alignment padding, data past the end of the file (truncated) or bytes
// after the last tensor's padding. Tensors of any GGML type are read and listed, those qkv does
// not compute with (IQ2_XXS, NVFP4, ...) included; their data is refused (data(), view(): a
// FormatError naming the tensor, its type and the types qkv computes with), so a model holding one
// fails to load with that message.
//
// Nothing is copied: strings and arrays of the metadata are views into the file's bytes, and
// a tensor's data is a pointer into the mapping (valid while the GGUFFile or a copy of its
// mapping() lives).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/core/shape.h"
#include "qkv/io/mapped_file.h"
#include "qkv/kernels/quant.h"

namespace qkv::io {

// The metadata value types (their numeric values are the file format's).
enum class GGUFType : std::uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
// "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64",
// "f64" (gguf-py's names in lower case); "type N" for an id that is none of them.
std::string gguf_type_name(GGUFType t);
// Bytes of one value of a fixed-size type; 0 for STRING and ARRAY (and unknown ids).
std::size_t gguf_type_size(GGUFType t);

inline constexpr int kGGUFMaxArrayDepth = 8;       // arrays inside arrays, at most this deep
inline constexpr std::uint64_t kGGUFMaxAlignment = 65536;
inline constexpr std::uint64_t kGGUFDefaultAlignment = 32;
inline constexpr int kGGUFMaxDims = 4;

// One metadata value as read: views into the file's bytes.
class GGUFValue {
 public:
  GGUFType type() const { return type_; }
  bool is_integer() const;  // u8 ... i64 (not bool)
  bool is_float() const;    // f32, f64
  bool is_array() const { return type_ == GGUFType::ARRAY; }

  // Scalars. Each is nullopt when the value is of another type: as_int for any integer type
  // whose value fits in int64; as_float for f32 and f64 (converted exactly to double).
  std::optional<std::int64_t> as_int() const;
  std::optional<std::uint64_t> as_uint() const;  // any integer type, value >= 0
  std::optional<double> as_float() const;
  std::optional<bool> as_bool() const;
  std::optional<std::string_view> as_string() const;

  // Arrays (nullopt / nullptr / 0 for non-arrays or an index past the end).
  GGUFType element_type() const { return elem_; }  // meaningful for arrays
  std::uint64_t size() const { return is_array() ? count_ : 0; }
  // Element i of an array of scalars or strings, as a scalar value.
  std::optional<GGUFValue> element(std::uint64_t i) const;
  // Element i of an array of arrays.
  const GGUFValue* array_at(std::uint64_t i) const;
  // All strings of an array of strings (views into the file); nullptr for other values.
  const std::vector<std::string_view>* strings() const;
  // The element bytes of an array of fixed-size elements (count x gguf_type_size, not
  // necessarily aligned: memcpy them); nullptr for other values.
  const std::uint8_t* raw_elements() const;
  // "u32 7", "string 'llama'", "array of 49152 string", ... (short, for messages and listings)
  std::string describe() const;

 private:
  friend class GGUFParser;
  GGUFType type_ = GGUFType::U8;
  GGUFType elem_ = GGUFType::U8;
  std::uint64_t count_ = 0;               // arrays: element count
  const std::uint8_t* data_ = nullptr;    // scalar bytes, or an array's first element
  std::string_view str_;                  // STRING
  std::vector<std::string_view> strings_; // ARRAY of STRING
  std::vector<GGUFValue> arrays_;         // ARRAY of ARRAY
};

struct GGUFKeyValue {
  std::string_view key;  // a view into the file's bytes
  GGUFValue value;
};

struct GGUFTensorInfo {
  std::string name;
  // The GGML type as stored: any GGML type id (kernels::ggml_type_block knows its blocks), one of
  // the types qkv computes with (kernels/quant.h) or not (IQ2_XXS, NVFP4, ...: computable() false,
  // and qtype_traits(type) has nothing for it).
  kernels::QType type = kernels::QType::F32;
  std::vector<std::int64_t> dims;  // as stored, innermost first: dims[0] is the row length
  Shape shape;                     // PyTorch order (dims reversed): [out, in] for a Linear weight
  std::uint64_t offset = 0;        // from the start of the data section; a multiple of the alignment
  std::uint64_t nbytes = 0;        // numel / block x block bytes

  bool computable() const { return kernels::qtype_traits(static_cast<std::uint32_t>(type)).has_value(); }
  std::string type_name() const { return kernels::ggml_type_name(static_cast<std::uint32_t>(type)); }  // "Q4_K", "IQ2_XXS"
  std::int64_t numel() const;
  std::int64_t row_length() const { return dims.empty() ? 1 : dims[0]; }
  std::int64_t rows() const;  // numel / row_length (1 for a scalar, 0 when empty)
};

// A tensor's bytes in place: a pointer into the mapping and what the bytes are.
struct GGUFTensorView {
  const GGUFTensorInfo* info = nullptr;
  kernels::QType type = kernels::QType::F32;
  const std::uint8_t* data = nullptr;  // nbytes bytes; aligned to the file's alignment
  std::uint64_t nbytes = 0;
};

class GGUFFile {
 public:
  // Maps the file (nothing is read up front: tensor data is read when first touched) and
  // parses it. IOError naming the path if it is missing, a directory, not a regular file or
  // unreadable; FormatError (see the top of this file) if it is not a valid GGUF file.
  static GGUFFile open(const std::string& path);
  // Reads only the header, metadata and tensor infos (in growing prefixes, at most about
  // twice their size; no tensor data is mapped), checked as open() checks them against the
  // real file size: the same metadata, tensors and errors, but data() throws.
  static GGUFFile open_header(const std::string& path);
  // Parses bytes in memory; source_name (a path or a label) names them in every message.
  static GGUFFile parse(std::vector<std::uint8_t> bytes, std::string source_name);

  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  std::uint64_t file_size() const { return file_size_; }
  const std::string& source() const { return source_; }
  bool has_data() const { return !header_only_; }

  // ---- metadata ----
  const std::vector<GGUFKeyValue>& metadata() const { return kv_; }  // in file order
  const GGUFValue* find_value(std::string_view key) const;           // nullptr if absent
  // The value of `key`; FormatError "<file>: GGUF metadata has no key '<key>'" if absent.
  const GGUFValue& value(std::string_view key) const;
  // Typed getters: FormatError naming the file and the key when it is absent or of another
  // type ("<file>: GGUF key 'llama.block_count' is a string, expected an integer"), or an
  // integer does not fit in int64. find_* return nullopt when the key is absent and throw
  // the same errors when it has the wrong type.
  std::int64_t get_int(std::string_view key) const;  // any integer type
  std::optional<std::int64_t> find_int(std::string_view key) const;
  double get_float(std::string_view key) const;  // f32 or f64
  std::optional<double> find_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::string_view get_string(std::string_view key) const;
  std::optional<std::string_view> find_string(std::string_view key) const;
  // Arrays: strings as views into the file (no copy); integers of any integer element type
  // as int64; floats of f32 / f64 elements as double.
  const std::vector<std::string_view>& get_string_array(std::string_view key) const;
  std::vector<std::int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;

  // ---- tensors ----
  const std::vector<GGUFTensorInfo>& tensors() const { return tensors_; }  // in file order
  const GGUFTensorInfo* find(std::string_view name) const;                  // nullptr if absent
  // FormatError naming the tensor and the file if absent.
  const GGUFTensorInfo& at(std::string_view name) const;
  // The tensor's nbytes bytes in the mapping. ValueError after open_header or for an info
  // that is not this file's; FormatError for a tensor of a type qkv does not compute with
  // ("<file>: tensor 'blk.0.attn_q.weight' has type IQ2_XXS, which qkv cannot compute with (it
  // computes with F32, F16, ...)").
  const std::uint8_t* data(const GGUFTensorInfo& t) const;
  GGUFTensorView view(std::string_view name) const;
  // The whole file's bytes (a mapping after open(), the bytes given to parse()), shared, so
  // views of tensor data can keep it alive; data(t) == mapping()->data() + data_offset() +
  // t.offset. nullptr after open_header.
  std::shared_ptr<const MappedFile> mapping() const { return header_only_ ? nullptr : buffer_; }

 private:
  friend class GGUFParser;
  GGUFFile() = default;
  // "<file>: GGUF key '<key>' is <what it is>, expected <expected>"
  [[noreturn]] void wrong_type(std::string_view key, const GGUFValue& v, const char* expected) const;

  std::shared_ptr<const MappedFile> buffer_;  // the file, or its first bytes after open_header
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = kGGUFDefaultAlignment, data_offset_ = 0, file_size_ = 0;
  bool header_only_ = false;
  std::vector<GGUFKeyValue> kv_;
  std::unordered_map<std::string_view, std::size_t> kv_index_;
  std::vector<GGUFTensorInfo> tensors_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;  // keys view tensors_[i].name
};

// True if the file starts with the GGUF magic (reads 4 bytes; IOError as MappedFile::open).
bool is_gguf_file(const std::string& path);

}  // namespace qkv::io
