// Storage: one owned, 64-byte aligned buffer shared by every view of it.
// Buffers of 2 MiB or more are 2 MiB aligned and advised MADV_HUGEPAGE: on
// this VM a fresh 4 KiB page costs ~11 us to touch, a huge page far less.
#pragma once
#include <cstddef>
#include <memory>

namespace qkv {

class Storage {
 public:
  // Throws AllocError (naming `what`) if the allocation fails.
  explicit Storage(std::size_t nbytes, const char* what = "tensor");
  // Memory owned by someone else (a memory-mapped file, say): nothing is allocated or freed;
  // `owner` is kept alive as long as this storage is, so the memory stays valid.
  Storage(void* data, std::size_t nbytes, std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::shared_ptr<const void> owner_;  // set for external memory (then data_ is not ours to free)
};

// Aligned allocation used by Storage and by workspaces. Blocks come from the engine's
// block cache when one of the same size class is free (see storage.cpp), else from the
// system. Free with aligned_free(p, nbytes) to return the block to the cache (bounded by
// $QKV_CACHE_MB, default 1024 or an eighth of the physical memory if less; 0 disables it), or aligned_free(p) to give it back to the system.
// All of these may be called from any number of threads at once (the cache takes a mutex).
void* aligned_alloc_bytes(std::size_t nbytes, const char* what);
// False in AddressSanitizer builds: there every block is allocated and freed on its own, with
// exactly the bytes asked for, so ASan sees each block's bounds and every use after free.
bool block_cache_enabled();
void aligned_free(void* p);
void aligned_free(void* p, std::size_t nbytes);
// Returns every cached block to the system (memory measurements, low-memory situations).
void release_cached_memory();
// Bytes held by the cache now.
std::size_t cached_memory_bytes();

}  // namespace qkv
