// The environment variables qkv reads, parsed strictly: an invalid value is an error
// naming the variable, never silently replaced by the default.
//   QKV_NUM_THREADS  worker threads, an integer in [1, 1024]   (core/parallel.h)
//   QKV_ISA          the widest instruction set the kernels use: scalar | avx2 | avx512
//   QKV_CACHE_MB     the block cache's budget in MiB, an integer >= 0 (core/storage.h)
// Unset or empty means the default.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace qkv {

// The integer value of `name` in [lo, hi], or nullopt when unset or empty. ValueError
// naming the variable, its value and the range otherwise:
//   "QKV_NUM_THREADS='abc' is not an integer in [1, 1024]"
std::optional<std::int64_t> env_integer(const char* name, std::int64_t lo, std::int64_t hi);
// The value of `name` if it is one of `choices`, nullopt when unset or empty; ValueError
//   "QKV_ISA='foo' is not one of scalar, avx2, avx512"
std::optional<std::string> env_choice(const char* name, const std::vector<std::string>& choices);

// Checks every variable above (what the qkv tool does before any work). ValueError naming
// the first invalid one.
void check_environment();

}  // namespace qkv
