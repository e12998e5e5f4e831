#include "qkv/core/storage.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>
#include <string>

#include "qkv/core/error.h"

namespace qkv {

namespace {
constexpr std::size_t kHuge = std::size_t{2} << 20;  // 2 MiB
constexpr std::size_t kMaxBytes = std::size_t{1} << 46;  // 64 TiB: anything larger is a bug
}  // namespace

void* aligned_alloc_bytes(std::size_t nbytes, const char* what) {
  if (nbytes > kMaxBytes)
    throw AllocError(std::string(what) + ": refusing to allocate " + std::to_string(nbytes) + " bytes");
  if (nbytes == 0) nbytes = 64;
  const std::size_t align = nbytes >= kHuge ? kHuge : 64;
  const std::size_t rounded = (nbytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p)
    throw AllocError(std::string(what) + ": out of memory allocating " + std::to_string(nbytes) + " bytes");
  if (align == kHuge) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void aligned_free(void* p) { std::free(p); }

Storage::Storage(std::size_t nbytes, const char* what) : data_(aligned_alloc_bytes(nbytes, what)), nbytes_(nbytes) {}

Storage::~Storage() { aligned_free(data_); }

}  // namespace qkv
