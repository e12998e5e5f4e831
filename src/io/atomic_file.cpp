// Atomic file writes in pieces (io/files.h: AtomicFile) and the write-point hook of the kill
// tests. Durability: temp file in the same directory -> write -> fsync(file) -> rename over the
// target -> fsync(directory). The rename is the commit point: before it the target is
// untouched, after it the target is the new file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "safetensors_util.h"

namespace qkv::io {

namespace {

WritePointHook g_write_point_hook = nullptr;

std::uint64_t mix64(std::uint64_t x) {  // splitmix64 finaliser
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

// The fault-injection hook of qkv/io/files.h lives here, in the lowest library that writes
// files (qkv_safetensors; write_file_atomic in qkv uses it too).
void set_write_point_hook(WritePointHook hook) { g_write_point_hook = hook; }

void write_point(const char* point) {
  if (g_write_point_hook) g_write_point_hook(point);
}

AtomicFile::AtomicFile(std::string path, std::string what, std::string points)
    : path_(std::move(path)), what_(std::move(what)), points_(std::move(points)) {
  if (path_.empty()) throw IOError("cannot write " + what_ + ": empty path");
  if (path_.back() == '/') throw IOError(error_prefix() + "the path names a directory");
  static std::atomic<std::uint64_t> counter{0};
  for (int attempt = 0; fd_ < 0; ++attempt) {
    const std::uint64_t r =
        mix64(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
              mix64(counter.fetch_add(1) + (static_cast<std::uint64_t>(::getpid()) << 32)));
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%08llx", static_cast<long>(::getpid()),
                  static_cast<unsigned long long>(r & 0xFFFFFFFFull));
    const std::string candidate = path_ + suffix;
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      fd_ = fd;
      tmp_ = candidate;
    } else if (errno != EEXIST || attempt >= 100) {
      throw IOError(error_prefix() + "cannot create temp file " + detail::msg_quote(candidate) + ": " +
                    std::strerror(errno));
    }
  }
  point("temp created");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::point(const char* step) const {
  if (g_write_point_hook) g_write_point_hook((points_ + ": " + step).c_str());
}

void AtomicFile::write(const void* data, std::uint64_t len) {
  if (fd_ < 0) throw IOError(error_prefix() + "write after commit");
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (len > 0) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(len, 1u << 30));
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IOError(error_prefix() + "write to temp file " + detail::msg_quote(tmp_) + " failed: " +
                    std::strerror(errno));
    }
    if (w == 0)
      throw IOError(error_prefix() + "write to temp file " + detail::msg_quote(tmp_) + " made no progress: " +
                    std::strerror(ENOSPC));
    p += w;
    len -= static_cast<std::uint64_t>(w);
    written_ += static_cast<std::uint64_t>(w);
  }
}

void AtomicFile::write_zeros(std::uint64_t len) {
  static const std::uint8_t zeros[4096] = {};
  while (len > 0) {
    const std::uint64_t n = std::min<std::uint64_t>(len, sizeof zeros);
    write(zeros, n);
    len -= n;
  }
}

void AtomicFile::commit() {
  auto sys_fail = [&](const std::string& what, int err) {
    return IOError(error_prefix() + what + ": " + std::strerror(err));
  };
  while (::fsync(fd_) != 0) {
    if (errno != EINTR) throw sys_fail("fsync of temp file " + detail::msg_quote(tmp_) + " failed", errno);
  }
  point("fsynced");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw sys_fail("closing temp file " + detail::msg_quote(tmp_) + " failed", errno);
  point("closed");
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw sys_fail("renaming temp file " + detail::msg_quote(tmp_) + " over it failed", errno);
  committed_ = true;
  point("renamed");
  const std::size_t slash = path_.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path_.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw sys_fail("file written, but opening its directory to fsync it failed", errno);
  int rc;
  while ((rc = ::fsync(dfd)) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a directory (EINVAL): nothing more to do there.
  if (rc != 0 && err != EINVAL) throw sys_fail("file written, but fsync of its directory failed", err);
  point("dir fsynced");
}

}  // namespace qkv::io
