// Memory limits. Every size that comes from a user or a file (CLI flags,
// config.json, safetensors headers, checkpoint metadata) is checked before
// anything is allocated: counts are multiplied without overflow, and the bytes
// they need are compared with the memory the process can still get. A size that
// cannot fit throws ResourceError naming what was asked for, the bytes it
// needs and the bytes available, e.g.
//   "TransformerEncoderBlock (d_model 65536, d_ff 2048, 1 heads): needs 64.0 GiB
//    (68736253952 bytes) of memory, but only 21.3 GiB is available"
// and nothing has been allocated, so the process goes on working.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

namespace qkv {

// Memory the process can still get now, in bytes: MemAvailable of /proc/meminfo
// (free + page-cache pages from sysconf where /proc is absent), capped by the
// cgroup v2 limit (memory.max - memory.current) when one is set, plus what the
// engine's block cache holds (it is emptied before a large allocation fails).
std::uint64_t available_memory_bytes();

// Allocations of this size or more (tensors, Storage, workspaces) are checked against
// available_memory_bytes() before the system is asked for them.
constexpr std::uint64_t kCheckedAllocationBytes = std::uint64_t{64} << 20;

// Throws ResourceError when `bytes` exceed available_memory_bytes(), naming `what`.
void check_allocation(std::uint64_t bytes, const std::string& what);

// "64.0 GiB", "512.0 MiB", "12.0 KiB", "100 bytes".
std::string format_bytes(std::uint64_t bytes);

// An up-front estimate of the bytes a model or a command will allocate, added up
// from tensor shapes with saturating arithmetic: an overflow makes bytes() the
// largest uint64 (and overflowed() true), which check() reports as such.
class MemoryEstimate {
 public:
  // `copies` tensors of this shape, `itemsize` bytes per element (float32 by default).
  MemoryEstimate& add(std::initializer_list<std::int64_t> shape, std::int64_t copies = 1, std::int64_t itemsize = 4);
  MemoryEstimate& add_bytes(std::uint64_t bytes);
  MemoryEstimate& add(const MemoryEstimate& other);
  // The whole estimate `times` over (e.g. weights + gradients + two Adam moments: 4).
  MemoryEstimate& scale(std::int64_t times);
  std::uint64_t bytes() const { return bytes_; }
  bool overflowed() const { return overflow_; }
  // check_allocation(bytes(), what), with "more than 16 EiB (the size overflows 64 bits)" on
  // overflow; estimates under kCheckedAllocationBytes pass without a look at the system.
  void check(const std::string& what) const;

 private:
  std::uint64_t bytes_ = 0;
  bool overflow_ = false;
};

}  // namespace qkv
