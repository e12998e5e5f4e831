// Atomic whole-file writes for the viz writers (internal).
#pragma once
#include <string>
#include <string_view>

namespace qkv::viz::detail {

// Writes `bytes` to `path` atomically: a temp file next to it, fsync, rename
// over the target, fsync of the directory. IOError naming `path` (and what
// failed) on any error; the temp file is removed then.
void write_file_atomic(const std::string& path, std::string_view bytes, const char* who);

}  // namespace qkv::viz::detail
