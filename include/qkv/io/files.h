// Whole-file reads and atomic whole-file writes.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace qkv::io {

// Writes `bytes` to `path` atomically: a temp file next to it, fsync, rename
// over the target, fsync of the directory. IOError naming `who`, `path` (and what
// failed) on any error; the temp file is removed then, the old file is untouched.
void write_file_atomic(const std::string& path, std::string_view bytes, const char* who);

// The whole file as bytes. IOError naming `who` and `path` if it is missing, not a
// regular file or unreadable.
std::string read_file(const std::string& path, const char* who);

// A file written in pieces and committed atomically: the bytes go to a new temp file
// "<path>.tmp.<pid>.<random>" in the target's directory; commit() fsyncs it, renames it over
// `path` and fsyncs the directory. Until commit() returns the target is untouched; a writer
// destroyed before (an exception) closes and removes its temp file. Each step calls
// write_point("<points>: temp created" / ": fsynced" / ": closed" / ": renamed" /
// ": dir fsynced"); callers add their own points between writes. Errors are IOError
// "<path>: cannot write <what>: <step> failed: <reason>".
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string what, std::string points);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(const void* data, std::uint64_t len);
  // Writes `len` zero bytes.
  void write_zeros(std::uint64_t len);
  // Bytes written so far.
  std::uint64_t size() const { return written_; }
  void commit();
  // "<path>: cannot write <what>: " (for the caller's own validation errors).
  std::string error_prefix() const { return path_ + ": cannot write " + what_ + ": "; }

 private:
  void point(const char* step) const;
  std::string path_, what_, points_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::uint64_t written_ = 0;
};

// Fault injection for tests: every atomic write (write_file_atomic, AtomicFile and so
// write_safetensors, write_gguf) calls the hook at each point it reaches, in order:
//   "<who>: temp created", "header written" (safetensors, gguf), "tensor written" (one per
//   tensor) or "data written", "fsynced", "closed", "renamed", "dir fsynced".
// A test's hook may raise(SIGKILL) at the k-th call to kill a save exactly there.
// nullptr (the default) disables it; not for use outside tests (not thread-safe to set).
using WritePointHook = void (*)(const char* point);
void set_write_point_hook(WritePointHook hook);
void write_point(const char* point);  // calls the hook, if any (used by the writers)

}  // namespace qkv::io
