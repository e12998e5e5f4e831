// Strict parsing of qkv's environment variables (qkv/core/env.h).
#include "qkv/core/env.h"

#include <cerrno>
#include <cstdlib>

#include "qkv/core/error.h"

namespace qkv {

std::optional<std::int64_t> env_integer(const char* name, std::int64_t lo, std::int64_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v, &end, 10);
  if (end == v || *end != '\0' || errno == ERANGE || x < lo || x > hi)
    throw ValueError(std::string(name) + "='" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                     std::to_string(hi) + "]; set it to one, or unset it for the default");
  return x;
}

std::optional<std::string> env_choice(const char* name, const std::vector<std::string>& choices) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  std::string list;
  for (const std::string& c : choices) {
    if (c == v) return c;
    list += (list.empty() ? "" : ", ") + c;
  }
  throw ValueError(std::string(name) + "='" + v + "' is not one of " + list + "; set it to one, or unset it for the default");
}

void check_environment() {
  env_integer("QKV_NUM_THREADS", 1, 1024);
  env_choice("QKV_ISA", {"scalar", "avx2", "avx512"});
  env_integer("QKV_CACHE_MB", 0, std::int64_t{1} << 40);
}

}  // namespace qkv
