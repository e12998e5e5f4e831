// Whole-file reads and atomic whole-file writes.
#pragma once
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

}  // namespace qkv::io
