// Helpers shared by the safetensors reader and writer (not a public header).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qkv::io::detail {

// The format's limit on the JSON header length N (same as the Rust crate).
inline constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

// True if [p, p+n) is well-formed UTF-8 (no overlong forms, no surrogates,
// nothing above U+10FFFF). On failure *bad_at is the offset of the first
// byte of the bad sequence.
bool utf8_valid(const unsigned char* p, std::size_t n, std::size_t* bad_at = nullptr);
inline bool utf8_valid(std::string_view s, std::size_t* bad_at = nullptr) {
  return utf8_valid(reinterpret_cast<const unsigned char*>(s.data()), s.size(), bad_at);
}

// A name quoted for a one-line error message: 'name', with control
// characters, quotes, backslashes and non-UTF-8 bytes escaped and very long
// names shortened, so a hostile name can neither break the line nor flood it.
std::string msg_quote(std::string_view s);

}  // namespace qkv::io::detail
