// safetensors on raw bytes: a strict reader and an atomic writer.
//
// File layout (REFERENCES.md section 3):
//   [0, 8)        N: u64 little-endian, length of the JSON header
//   [8, 8+N)      UTF-8 JSON object, padded with spaces so (8+N) % 8 == 0
//   [8+N, EOF)    tensor bytes, C order, little-endian, no strides
//   {"__metadata__": {"k": "v"}, "name": {"dtype": "F32", "shape": [2,3], "data_offsets": [0,24]}, ...}
//
// The reader trusts nothing read from the file: every size and offset is
// checked against the bytes present before it is used, and every violation of
// the format throws qkv::FormatError with one line naming the file and the
// tensor or header problem. It never allocates more than a small multiple of
// the file's own size.
//
// No Tensor class is involved: tensors are (name, dtype, shape, bytes).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/shape.h"
#include "qkv/io/mapped_file.h"

namespace qkv::io {

// The dtype strings of the safetensors format that qkv reads and writes.
// (F8_E4M3, F8_E5M2, F8_E8M0, F4, F6_E2M3, F6_E3M2 and C64 exist in the
// format too; the reader rejects them as unsupported.)
enum class StDType { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64 };

// Bytes per element: 1 for BOOL/U8/I8, 2 for I16/U16/F16/BF16, 4, or 8.
std::size_t st_dtype_size(StDType dt);
// The format's dtype string: "BOOL", "U8", ..., "F32", "BF16".
const char* st_dtype_name(StDType dt);
// Inverse of st_dtype_name (exact, case-sensitive); nullopt if unknown.
std::optional<StDType> st_dtype_from_name(std::string_view name);

// One tensor of a parsed file. begin/end are byte offsets within the data
// section (which starts at file offset 8 + header_size()).
struct StTensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  Shape shape;
  std::uint64_t begin = 0, end = 0;

  std::uint64_t nbytes() const { return end - begin; }
  // Product of the dims (1 for a rank-0 scalar, 0 for an empty tensor).
  std::int64_t numel() const { return checked_numel(shape, "safetensors"); }
};

class SafetensorsFile {
 public:
  // Maps the whole file (io/mapped_file.h: nothing is read up front; tensor
  // data is read from the file when first touched) and parses it. IOError
  // naming the path if it is missing, not a regular file or unreadable;
  // FormatError if corrupt.
  static SafetensorsFile open(const std::string& path);
  // Reads only the 8-byte prefix and the N-byte header (nothing of the tensor
  // data is read or mapped) and checks them as open() does, against the real
  // file size: the same tensors, metadata and errors as open(), but data()
  // throws. For `qkv inspect` of files of any size.
  static SafetensorsFile open_header(const std::string& path);
  // Parses bytes already in memory; source_name (a path or a label) is used
  // in every error message.
  static SafetensorsFile parse(std::vector<std::uint8_t> bytes, std::string source_name);

  // The "__metadata__" object (empty if the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Every tensor, in data-offset order (ties between empty tensors by name).
  const std::vector<StTensorInfo>& tensors() const { return tensors_; }
  // nullptr if there is no tensor of that name.
  const StTensorInfo* find(const std::string& name) const;
  // FormatError naming the tensor and the file if absent.
  const StTensorInfo& at(const std::string& name) const;
  // Pointer to the tensor's nbytes() bytes inside the file's mapping (valid
  // while this object or a copy of mapping() lives). Not necessarily aligned
  // for the dtype: copy with std::memcpy rather than casting. ValueError after
  // open_header.
  const std::uint8_t* data(const StTensorInfo& t) const;
  // The whole file's bytes (a mapping after open(), the bytes given to
  // parse()), shared: views of tensor data may hold it to stay valid after
  // this object is gone. data(t) == mapping()->data() + data_offset() + t.begin.
  // nullptr after open_header.
  std::shared_ptr<const MappedFile> mapping() const { return header_only_ ? nullptr : buffer_; }
  // File offset of the data section: 8 + header_size().
  std::uint64_t data_offset() const { return 8 + header_size_; }
  // False after open_header (no tensor data available).
  bool has_data() const { return !header_only_; }

  // N, the length of the JSON header in bytes (padding included).
  std::uint64_t header_size() const { return header_size_; }
  // Total bytes: 8 + header_size() + data bytes.
  std::uint64_t file_size() const { return file_size_; }
  // The path or label given to open()/parse().
  const std::string& source() const { return source_; }

 private:
  SafetensorsFile() = default;
  // buffer holds at least the first 8 + N bytes of a file of `size` bytes (all of it unless
  // header_only).
  static SafetensorsFile parse_buffer(std::shared_ptr<const MappedFile> buffer, std::uint64_t size,
                                      bool header_only);

  std::shared_ptr<const MappedFile> buffer_;
  std::string source_;
  std::uint64_t header_size_ = 0, file_size_ = 0;
  bool header_only_ = false;
  std::map<std::string, std::string> metadata_;
  std::vector<StTensorInfo> tensors_;
  std::unordered_map<std::string, std::size_t> index_;  // name -> position in tensors_
};

// A tensor to write: data points at nbytes bytes in C order, little-endian.
struct StTensorView {
  std::string name;
  StDType dtype = StDType::F32;
  Shape shape;
  const void* data = nullptr;
  std::uint64_t nbytes = 0;
};

// Writes a safetensors file that PyTorch's `safetensors` package reads:
// header {"__metadata__":{...},"name":{"dtype":..,"shape":[..],"data_offsets":[b,e]},...}
// in compact JSON (the metadata object is omitted when empty), padded with
// spaces so (8+N) % 8 == 0; tensor data in the given order with no gaps.
// Callers that want every tensor aligned for its dtype should pass tensors
// in decreasing dtype size (what the Python writer does).
//
// Validates first (nbytes == numel * dtype size, non-negative dims, unique
// names, no tensor named "__metadata__", names and metadata valid UTF-8,
// header <= 100,000,000 bytes). Then writes atomically: a temp file
// "<path>.tmp.<pid>.<random>" in the same directory -> write -> fsync(file)
// -> rename over path -> fsync(directory). Throws qkv::IOError naming the path
// on any failure (invalid tensors, unwritable or missing directory, disk
// full ...); on failure before the rename the previous file at path is
// untouched and the temp file is removed. (A process killed mid-write may
// leave its temp file behind, never a damaged file at path.)
void write_safetensors(const std::string& path, const std::vector<StTensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// A safetensors file written in pieces, for data too large to hold in memory at once (the saved
// log-probabilities of `qkv perplexity`): the tensors' names, dtypes and shapes come first (they
// make the header, the same as write_safetensors writes; StTensorView::data and nbytes are not
// used), then their bytes in that order through write(), in pieces of any size. Validates as
// write_safetensors does and, before creating anything, checks that the file system holding
// `path` has room for the whole file (IOError naming the bytes needed and free). The bytes go to a
// temp file beside `path` (io::AtomicFile): commit() renames it into place; until then the target
// is untouched, and a writer destroyed before commit() removes its temp file.
class AtomicFile;
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::string& path, const std::vector<StTensorView>& tensors,
                          const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;
  // The next bytes of the tensors' data; IOError when more than the declared tensors hold.
  void write(const void* data, std::uint64_t nbytes);
  // Bytes of tensor data still to come.
  std::uint64_t remaining() const { return remaining_; }
  // The size of the whole file (header and data).
  std::uint64_t file_bytes() const { return file_bytes_; }
  // IOError when bytes are missing; else fsync, rename into place, fsync the directory.
  void commit();

 private:
  std::string path_;
  std::unique_ptr<AtomicFile> out_;
  std::uint64_t remaining_ = 0, file_bytes_ = 0;
};

}  // namespace qkv::io
