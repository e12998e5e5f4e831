// Read-only file mappings and prefix reads (io/mapped_file.h).
#include "qkv/io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "qkv/core/error.h"

namespace qkv::io {

namespace {

const std::uint8_t kEmpty[1] = {0};  // data() of an empty file

IOError io_fail(const std::string& path, const std::string& what, const std::string& problem, int err) {
  return IOError(path + ": cannot read " + what + ": " + problem + (err ? std::string(": ") + std::strerror(err) : ""));
}

// An open descriptor of a regular file, closed on scope exit.
struct OpenFile {
  int fd = -1;
  std::uint64_t size = 0;
  OpenFile(const std::string& path, const std::string& what) {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw io_fail(path, what, "open failed", errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw io_fail(path, what, "fstat failed", err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      throw io_fail(path, what, S_ISDIR(st.st_mode) ? "it is a directory" : "not a regular file", 0);
    }
    size = static_cast<std::uint64_t>(st.st_size);
  }
  ~OpenFile() { ::close(fd); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
};

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path, const std::string& what) {
  const OpenFile f(path, what);
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->source_ = path;
  m->size_ = f.size;
  if (f.size == 0) {
    m->data_ = kEmpty;
    return m;
  }
  if (f.size > std::numeric_limits<std::size_t>::max())
    throw io_fail(path, what, std::to_string(f.size) + " bytes do not fit in the address space", 0);
  // Private and writable: pages are shared with the page cache until written, and a write (to
  // a tensor viewing the weights, say) copies only its page for this process; the file itself
  // never changes.
  // MAP_NORESERVE: no swap is reserved for pages never written (a 256 GiB file maps like a small one).
  void* p = ::mmap(nullptr, static_cast<std::size_t>(f.size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE,
                   f.fd, 0);
  if (p == MAP_FAILED) throw io_fail(path, what, "mmap of " + std::to_string(f.size) + " bytes failed", errno);
  m->data_ = static_cast<const std::uint8_t*>(p);
  m->mapped_ = true;
  return m;
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::vector<std::uint8_t> bytes, std::string source) {
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->owned_ = std::move(bytes);
  m->size_ = m->owned_.size();
  m->data_ = m->owned_.empty() ? kEmpty : m->owned_.data();
  m->source_ = std::move(source);
  return m;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<std::uint8_t*>(data_), static_cast<std::size_t>(size_));
}

void MappedFile::prefetch(std::uint64_t offset, std::uint64_t length) const {
  if (!mapped_ || offset >= size_) return;
  length = std::min(length, size_ - offset);
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t begin = offset / page * page;
  ::madvise(const_cast<std::uint8_t*>(data_) + begin, static_cast<std::size_t>(offset + length - begin),
            MADV_WILLNEED);  // a hint: its failure changes nothing
}

void MappedFile::release(std::uint64_t offset, std::uint64_t length) const {
  if (!mapped_ || offset >= size_) return;
  length = std::min(length, size_ - offset);
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  const std::uint64_t begin = (offset + page - 1) / page * page, end = (offset + length) / page * page;
  if (end > begin)  // a hint for memory: its failure changes nothing
    ::madvise(const_cast<std::uint8_t*>(data_) + begin, static_cast<std::size_t>(end - begin), MADV_DONTNEED);
}

FilePrefix read_file_prefix(const std::string& path, std::uint64_t max_bytes, const std::string& what) {
  const OpenFile f(path, what);
  FilePrefix out;
  out.file_size = f.size;
  const std::uint64_t want = std::min(max_bytes, f.size);
  out.bytes.resize(static_cast<std::size_t>(want));
  std::uint64_t got = 0;
  while (got < want) {
    const std::size_t chunk = static_cast<std::size_t>(std::min<std::uint64_t>(want - got, 1u << 30));
    const ssize_t r = ::pread(f.fd, out.bytes.data() + got, chunk, static_cast<off_t>(got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw io_fail(path, what, "read failed at byte " + std::to_string(got), errno);
    }
    if (r == 0)
      throw io_fail(path, what,
                    "file shrank while being read (" + std::to_string(got) + " of " + std::to_string(want) + " bytes)",
                    0);
    got += static_cast<std::uint64_t>(r);
  }
  return out;
}

std::uint64_t regular_file_size(const std::string& path, const std::string& what) {
  return OpenFile(path, what).size;
}

}  // namespace qkv::io
