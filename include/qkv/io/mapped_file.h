// Read-only bytes of a file: the whole file memory-mapped, or bytes already in memory, behind
// one shared handle so that views into it (tensor data, metadata strings) keep it alive.
//
// A mapping reads nothing up front: a page is read from the file (or the page cache) the
// first time it is touched, so parsing a header maps a multi-GiB weight file in microseconds
// and a few pages of memory. The mapping is MAP_PRIVATE and copy-on-write: a tensor viewing it
// may be written (only that page is copied, for this process; the file never changes). Modifying the file
// while it is mapped (truncating it in place) makes later reads of the lost pages fault, so
// writers replace files by rename (io/files.h), which leaves a mapped old file intact.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qkv::io {

class MappedFile {
 public:
  // Maps the whole file at `path` read-only. IOError "<path>: cannot read <what>: <reason>"
  // if it is missing, unreadable, a directory or not a regular file, or the mapping fails.
  // An empty file is fine (size() 0, data() a valid non-null pointer).
  static std::shared_ptr<const MappedFile> open(const std::string& path, const std::string& what = "file");
  // Bytes already in memory (owned from now on), under the name `source` (a path or label).
  static std::shared_ptr<const MappedFile> from_bytes(std::vector<std::uint8_t> bytes, std::string source);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  // [data(), data() + size()): never null. Page-aligned for a mapping.
  const std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  // The path given to open(), or the source given to from_bytes().
  const std::string& source() const { return source_; }
  // True for a file mapping, false for bytes in memory.
  bool is_mapped() const { return mapped_; }
  // Asks the kernel to read [offset, offset + length) ahead (madvise WILLNEED; clamped to the
  // file; a no-op for bytes in memory). Useful before streaming weights once.
  void prefetch(std::uint64_t offset, std::uint64_t length) const;
  // Gives back this process's pages wholly inside [offset, offset + length) (madvise DONTNEED;
  // clamped to the file; a no-op for bytes in memory): they leave the resident set and a later
  // read maps them from the file again, as before. For ranges nothing has written (a private
  // mapping's written pages would read the file's bytes again): weights copied elsewhere.
  void release(std::uint64_t offset, std::uint64_t length) const;

 private:
  MappedFile() = default;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
  bool mapped_ = false;
  std::vector<std::uint8_t> owned_;  // from_bytes
  std::string source_;
};

// The first min(max_bytes, file size) bytes of a file, read with pread (nothing else of the
// file is read or mapped), and the file's size. IOError as MappedFile::open.
struct FilePrefix {
  std::vector<std::uint8_t> bytes;
  std::uint64_t file_size = 0;
};
FilePrefix read_file_prefix(const std::string& path, std::uint64_t max_bytes, const std::string& what = "file");

// The size of a regular file (IOError as MappedFile::open).
std::uint64_t regular_file_size(const std::string& path, const std::string& what = "file");

}  // namespace qkv::io
