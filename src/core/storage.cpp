#include "qkv/core/storage.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "qkv/core/env.h"
#include "qkv/core/error.h"
#include "qkv/core/memory.h"

// Under AddressSanitizer every block is its own allocation of exactly the bytes asked for: no
// block cache and no size-class rounding, so ASan sees each tensor's bounds (an overrun into the
// rounded-up tail of its class) and every use after free (a cached block would hide it).
#if defined(__SANITIZE_ADDRESS__)
#define QKV_EXACT_BLOCKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QKV_EXACT_BLOCKS 1
#endif
#endif
#ifndef QKV_EXACT_BLOCKS
#define QKV_EXACT_BLOCKS 0
#endif

namespace qkv {

namespace {
constexpr bool kExactBlocks = QKV_EXACT_BLOCKS;
constexpr std::size_t kHuge = std::size_t{2} << 20;  // 2 MiB
constexpr std::size_t kMaxBytes = std::size_t{1} << 46;  // 64 TiB: anything larger is a bug

// Size classes: multiples of 64 bytes up to 4 KiB, then four classes per power of two
// (at most 25% rounding), multiples of 2 MiB from 2 MiB on.
std::size_t size_class(std::size_t nbytes) {
  if (nbytes <= 4096) return (nbytes + 63) / 64 * 64;
  if (nbytes >= kHuge) return (nbytes + kHuge - 1) / kHuge * kHuge;
  std::size_t p = 4096;
  while (p * 2 < nbytes) p *= 2;  // p < nbytes <= 2p
  const std::size_t q = p / 4;
  return (nbytes + q - 1) / q * q;
}

// The engine's block cache: freed tensor storage and workspaces go back to a free list of
// their size class instead of to the allocator, so a training loop that allocates the same
// shapes every step stops paying for malloc, page faults and zeroing by the kernel (on this
// VM a fresh 4 KiB page costs ~11 us to touch). Bounded: blocks above kMaxCachedBlock and
// anything beyond the total budget go straight back to the system. The budget is 1 GiB, or an
// eighth of the physical memory if that is less: a GPT's training step (6 layers, 4096 tokens,
// vocabulary 4096) frees ~600 MB of activations and three 64 MB logit-sized blocks per step;
// with 256 MB and 32 MB blocks the kernel zeroed pages for 6% of the step's time.
class BlockCache {
 public:
  static constexpr std::size_t kMaxCachedBlock = std::size_t{256} << 20;
  BlockCache() {
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0)
      budget_ = std::max<std::size_t>(std::size_t{64} << 20,
                                      std::min(budget_, static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) / 8));
    // An invalid value keeps the default here (an allocation is no place for a ValueError);
    // the qkv tool refuses it up front (check_environment).
    try {
      if (const auto mb = env_integer("QKV_CACHE_MB", 0, std::int64_t{1} << 40)) budget_ = static_cast<std::size_t>(*mb) << 20;
    } catch (const ValueError&) {
    }
  }
  void* take(std::size_t cls) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(cls);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= cls;
    return p;
  }
  bool give(void* p, std::size_t cls) {
    if (cls > kMaxCachedBlock) return false;
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + cls > budget_) return false;
    free_[cls].push_back(p);
    cached_ += cls;
    return true;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }
  std::size_t cached() {
    std::lock_guard<std::mutex> lock(mu_);
    return cached_;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
  std::size_t budget_ = std::size_t{1} << 30;
};

// Never destroyed: tensors with static storage duration may be freed after main returns.
BlockCache& cache() {
  static BlockCache* c = new BlockCache();
  return *c;
}

}  // namespace

void* aligned_alloc_bytes(std::size_t nbytes, const char* what) {
  if (nbytes > kMaxBytes)
    throw AllocError(std::string(what) + ": refusing to allocate " + std::to_string(nbytes) + " bytes");
  if (nbytes == 0) nbytes = 64;
  const std::size_t cls = kExactBlocks ? nbytes : size_class(nbytes);
  if (!kExactBlocks)
    if (void* p = cache().take(cls)) return p;
  if (cls >= kCheckedAllocationBytes) {
    // Fail before the system hands out pages that cannot all be touched; the cache's blocks
    // count as available, so give them back first when the system alone has too little.
    if (cls > available_memory_bytes() - cache().cached()) cache().release();
    check_allocation(cls, what);
  }
  const std::size_t align = cls >= kHuge ? kHuge : 64;
  // aligned_alloc needs a multiple of the alignment (every class is one); an exact block need not be.
  auto allocate = [&]() -> void* {
    void* q = nullptr;
    if (!kExactBlocks) return std::aligned_alloc(align, cls);
    return ::posix_memalign(&q, align, cls) == 0 ? q : nullptr;
  };
  void* p = allocate();
  if (!p) {
    cache().release();  // the cache may hold what the system now lacks
    p = allocate();
  }
  if (!p)
    throw AllocError(std::string(what) + ": out of memory allocating " + std::to_string(nbytes) + " bytes");
  // Huge pages only over the whole 2 MiB pages the request covers: the class's rounded-up
  // tail stays in 4 KiB pages, untouched unless used (a 2.4 MB weight would otherwise take
  // 4 MB of memory; a GPT-2's weights took 25% more than their size).
  if (align == kHuge) madvise(p, nbytes / kHuge * kHuge, MADV_HUGEPAGE);
  return p;
}

void aligned_free(void* p) { std::free(p); }

void aligned_free(void* p, std::size_t nbytes) {
  if (!p) return;
  if (kExactBlocks || !cache().give(p, size_class(nbytes == 0 ? 64 : nbytes))) std::free(p);
}

bool block_cache_enabled() { return !kExactBlocks; }

void release_cached_memory() { cache().release(); }

std::size_t cached_memory_bytes() { return cache().cached(); }

Storage::Storage(std::size_t nbytes, const char* what) : data_(aligned_alloc_bytes(nbytes, what)), nbytes_(nbytes) {}

Storage::Storage(void* data, std::size_t nbytes, std::shared_ptr<const void> owner)
    : data_(data), nbytes_(nbytes), owner_(std::move(owner)) {
  if (!owner_) throw ValueError("Storage: external memory needs an owner that keeps it alive");
}

Storage::~Storage() {
  if (!owner_) aligned_free(data_, nbytes_);
}

}  // namespace qkv
