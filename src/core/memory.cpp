#include "qkv/core/memory.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "qkv/core/error.h"
#include "qkv/core/storage.h"

namespace qkv {
namespace {

constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

// "MemAvailable:   21312344 kB" -> bytes; kNone when the file or the line is missing.
std::uint64_t meminfo_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return static_cast<std::uint64_t>(kb) * 1024;
  }
  return kNone;
}

// One unsigned number from a file ("max" or anything else unreadable: kNone).
std::uint64_t read_u64(const std::string& path) {
  std::ifstream in(path);
  unsigned long long v = 0;
  if (!(in >> v)) return kNone;
  return static_cast<std::uint64_t>(v);
}

// Room left under the cgroup v2 memory limit of this process, kNone without a limit.
std::uint64_t cgroup_room() {
  std::string dir = "/sys/fs/cgroup";
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);)
    if (line.rfind("0::", 0) == 0) {
      const std::string rel = line.substr(3);
      std::ifstream probe(dir + rel + "/memory.max");
      if (probe) dir += rel;
      break;
    }
  const std::uint64_t max = read_u64(dir + "/memory.max");
  if (max == kNone) return kNone;
  const std::uint64_t cur = read_u64(dir + "/memory.current");
  if (cur == kNone) return max;
  return cur >= max ? 0 : max - cur;
}

std::uint64_t sat_mul(std::uint64_t a, std::uint64_t b, bool& overflow) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    overflow = true;
    return kNone;
  }
  return r;
}

}  // namespace

std::uint64_t available_memory_bytes() {
  std::uint64_t avail = meminfo_available();
  if (avail == kNone) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    avail = pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : kNone;
  }
  const std::uint64_t room = cgroup_room();
  if (room < avail) avail = room;
  if (avail == kNone) return kNone;  // nothing known: no limit
  return avail + cached_memory_bytes();
}

std::string format_bytes(std::uint64_t bytes) {
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  double v = static_cast<double>(bytes) / 1024;
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

void check_allocation(std::uint64_t bytes, const std::string& what) {
  const std::uint64_t avail = available_memory_bytes();
  if (bytes <= avail) return;
  throw ResourceError(what + ": needs " + format_bytes(bytes) + " (" + std::to_string(bytes) +
                      " bytes) of memory, but only " + format_bytes(avail) + " is available");
}

MemoryEstimate& MemoryEstimate::add(std::initializer_list<std::int64_t> shape, std::int64_t copies,
                                    std::int64_t itemsize) {
  bool over = false;
  std::uint64_t n = static_cast<std::uint64_t>(copies < 0 ? 0 : copies);
  n = sat_mul(n, static_cast<std::uint64_t>(itemsize < 0 ? 0 : itemsize), over);
  bool zero = n == 0;
  for (std::int64_t d : shape) {
    if (d <= 0) zero = true;
    else n = sat_mul(n, static_cast<std::uint64_t>(d), over);
  }
  if (zero) return *this;  // an empty tensor needs nothing whatever its other dims
  if (over) overflow_ = true;
  return add_bytes(n);
}

MemoryEstimate& MemoryEstimate::add_bytes(std::uint64_t b) {
  if (__builtin_add_overflow(bytes_, b, &bytes_)) overflow_ = true, bytes_ = kNone;
  if (b == kNone) overflow_ = true;
  return *this;
}

MemoryEstimate& MemoryEstimate::add(const MemoryEstimate& other) {
  if (other.overflow_) overflow_ = true;
  return add_bytes(other.bytes_);
}

MemoryEstimate& MemoryEstimate::scale(std::int64_t times) {
  bytes_ = sat_mul(bytes_, static_cast<std::uint64_t>(times < 0 ? 0 : times), overflow_);
  return *this;
}

void MemoryEstimate::check(const std::string& what) const {
  if (!overflow_ && bytes_ < kCheckedAllocationBytes) return;  // small: not worth reading /proc
  if (overflow_)
    throw ResourceError(what + ": needs more than 16.0 EiB of memory (its size overflows 64 bits), but only " +
                        format_bytes(available_memory_bytes()) + " is available");
  check_allocation(bytes_, what);
}

}  // namespace qkv
