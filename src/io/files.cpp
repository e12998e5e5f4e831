// Atomic whole-file writes: temp file next to the target -> write -> fsync ->
// rename over the target -> fsync(directory). A reader never sees half a file.
#include "qkv/io/files.h"

#include <sys/stat.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "qkv/core/error.h"

namespace qkv::io {

namespace {

[[noreturn]] void fail(const char* who, const std::string& path, const std::string& what, int err) {
  throw IOError(std::string(who) + ": cannot write '" + path + "': " + what + ": " + std::strerror(err));
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes, const char* who) {
  if (path.empty()) throw IOError(std::string(who) + ": empty output path");
  static std::atomic<unsigned> counter{0};
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(who, path, "cannot create a temp file there", errno);
  write_point("file: temp created");
  auto abandon = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(who, path, what, err);
  };
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      abandon("write failed", errno);
    }
    if (w == 0) abandon("write made no progress", ENOSPC);
    p += w;
    left -= static_cast<std::size_t>(w);
  }
  write_point("file: data written");
  while (::fsync(fd) != 0)
    if (errno != EINTR) abandon("fsync failed", errno);
  write_point("file: fsynced");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(who, path, "close failed", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(who, path, "rename of the temp file failed", err);
  }
  write_point("file: renamed");
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {  // best effort: the file is complete either way
    while (::fsync(dfd) != 0 && errno == EINTR) {
    }
    ::close(dfd);
  }
  write_point("file: dir fsynced");
}

std::string read_file(const std::string& path, const char* who) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IOError(std::string(who) + ": cannot open '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw IOError(std::string(who) + ": '" + path + "' is not a regular file");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IOError(std::string(who) + ": cannot open '" + path + "': " + std::strerror(errno));
  std::string out;
  out.resize(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (true) {
    if (got == out.size()) out.resize(out.size() + 4096);  // the file may have grown
    const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IOError(std::string(who) + ": cannot read '" + path + "': " + std::strerror(err));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

}  // namespace qkv::io
