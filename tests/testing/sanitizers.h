// Sanitizer builds (make test-asan, make test-tsan): whether this binary runs under
// AddressSanitizer, and the reduced sizes of the tests that are too slow under a sanitizer.
// `make test-asan` sets QKV_TEST_REDUCED=1; a test reads it with reduced_size() and runs a
// smaller but still failing version of itself (fewer cases, a sample of the bytes, shorter
// runs) -- never skips.
#pragma once
#include <cstdlib>
#include <cstring>

#if defined(__SANITIZE_ADDRESS__)
#define QKV_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QKV_TEST_UNDER_ASAN 1
#endif
#endif
#ifndef QKV_TEST_UNDER_ASAN
#define QKV_TEST_UNDER_ASAN 0
#endif

namespace qkv::testing {

// True in an AddressSanitizer build (its shadow memory makes `ulimit -v` caps unusable).
inline constexpr bool kUnderAsan = QKV_TEST_UNDER_ASAN;

// QKV_TEST_REDUCED set to anything but "" or "0".
inline bool reduced_size() {
  const char* e = std::getenv("QKV_TEST_REDUCED");
  return e && *e && std::strcmp(e, "0") != 0;
}

// `full` normally, `reduced` under QKV_TEST_REDUCED.
template <class T>
T full_or_reduced(T full, T reduced) {
  return reduced_size() ? reduced : full;
}

}  // namespace qkv::testing
