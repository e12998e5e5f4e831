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

// Fault injection for tests: every atomic write (write_file_atomic, write_safetensors)
// calls the hook at each point it reaches, in order:
//   "<who>: temp created", "header written" (safetensors), "tensor written" (one per
//   tensor) or "data written", "fsynced", "closed", "renamed", "dir fsynced".
// A test's hook may raise(SIGKILL) at the k-th call to kill a save exactly there.
// nullptr (the default) disables it; not for use outside tests (not thread-safe to set).
using WritePointHook = void (*)(const char* point);
void set_write_point_hook(WritePointHook hook);
void write_point(const char* point);  // calls the hook, if any (used by the writers)

}  // namespace qkv::io
