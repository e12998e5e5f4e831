// Seeded mutation fuzzing of the strict reader: every mutated file either
// parses into a self-consistent result or throws a qkv::Error. Anything else
// (another exception type, a crash, a sanitizer report) fails.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "safetensors_test_util.h"

namespace qkv::io::test {
namespace {

// Everything a successful parse promises.
void check_consistent(const SafetensorsFile& f, const Bytes& bytes) {
  ASSERT_EQ(f.file_size(), bytes.size());
  ASSERT_LE(f.header_size(), bytes.size() - 8);
  const std::uint64_t data_len = bytes.size() - 8 - f.header_size();
  std::uint64_t expected = 0;
  for (const StTensorInfo& t : f.tensors()) {
    ASSERT_EQ(t.begin, expected) << t.name;
    ASSERT_LE(t.begin, t.end);
    std::uint64_t need = st_dtype_size(t.dtype);
    for (std::int64_t d : t.shape) {
      ASSERT_GE(d, 0);
      need *= static_cast<std::uint64_t>(d);  // cannot overflow: the reader checked
    }
    ASSERT_EQ(t.nbytes(), need) << t.name;
    ASSERT_EQ(f.find(t.name), &t);
    const std::uint8_t* p = f.data(t);
    // data() points at the tensor's own bytes (ASan checks the range is readable).
    ASSERT_EQ(std::memcmp(p, bytes.data() + 8 + f.header_size() + t.begin, t.nbytes()), 0) << t.name;
    expected = t.end;
  }
  ASSERT_EQ(expected, data_len);
}

Bytes valid_base() {
  ScratchDir dir;
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};
  const std::vector<std::int64_t> ids = {1, -2, 3};
  const std::vector<std::uint8_t> s = {7};
  const std::vector<float> none;
  write_safetensors(dir / "base.safetensors",
                    {{"enc.w", StDType::F32, {2, 3}, w.data(), 24},
                     {"ids", StDType::I64, {3}, ids.data(), 24},
                     {"e", StDType::F32, {0, 5}, none.data(), 0},
                     {"s", StDType::U8, {}, s.data(), 1}},
                    {{"config", "{\"d_model\": 16}"}, {"step", "12"}});
  return read_all(dir / "base.safetensors");
}

std::uint64_t header_len(const Bytes& b) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[static_cast<std::size_t>(i)];
  return n;
}
void set_header_len(Bytes& b, std::uint64_t n) {
  for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
}

// One random mutation. Offsets are biased towards the header, where the
// interesting structure is.
void mutate(Bytes& b, std::mt19937_64& rng) {
  auto pick = [&](std::uint64_t n) { return n == 0 ? 0 : std::uniform_int_distribution<std::uint64_t>(0, n - 1)(rng); };
  const std::uint64_t hdr_end = b.size() >= 8 ? std::min<std::uint64_t>(b.size(), 8 + header_len(b)) : b.size();
  auto pos = [&]() -> std::size_t {
    if (b.empty()) return 0;
    return static_cast<std::size_t>(pick(2) ? pick(std::max<std::uint64_t>(hdr_end, 1)) % b.size() : pick(b.size()));
  };
  static const char kTokens[] = "{}[]\",:0123456789-.eE \\u\x80\xff\xc3";
  switch (pick(9)) {
    case 0:  // bit flip
      if (!b.empty()) b[pos()] ^= static_cast<std::uint8_t>(1u << pick(8));
      break;
    case 1:  // random byte
      if (!b.empty()) b[pos()] = static_cast<std::uint8_t>(pick(256));
      break;
    case 2:  // a JSON-significant byte
      if (!b.empty()) b[pos()] = static_cast<std::uint8_t>(kTokens[pick(sizeof kTokens - 1)]);
      break;
    case 3:  // truncate
      b.resize(static_cast<std::size_t>(pick(b.size() + 1)));
      break;
    case 4: {  // header-length edit
      if (b.size() < 8) break;
      const std::uint64_t n = header_len(b);
      const std::uint64_t choices[] = {n + 1, n - 1, n + 8, n - 8, 0, b.size(), b.size() - 8, 100'000'000,
                                       100'000'001, ~0ull, pick(1ull << 32), n ^ (1ull << pick(64))};
      set_header_len(b, choices[pick(std::size(choices))]);
      break;
    }
    case 5: {  // insert random bytes
      const std::size_t at = static_cast<std::size_t>(pick(b.size() + 1));
      const std::size_t k = 1 + static_cast<std::size_t>(pick(8));
      for (std::size_t i = 0; i < k; ++i) b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(pick(256)));
      break;
    }
    case 6: {  // delete a range
      if (b.empty()) break;
      const std::size_t at = static_cast<std::size_t>(pick(b.size()));
      const std::size_t k = std::min<std::size_t>(b.size() - at, 1 + static_cast<std::size_t>(pick(16)));
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(at + k));
      break;
    }
    case 7: {  // copy a header slice elsewhere in the header, keeping N consistent
      if (b.size() < 8 || hdr_end <= 9) break;
      const std::size_t from = 8 + static_cast<std::size_t>(pick(hdr_end - 8));
      const std::size_t k = std::min<std::size_t>(hdr_end - from, 1 + static_cast<std::size_t>(pick(40)));
      const std::size_t to = 8 + static_cast<std::size_t>(pick(hdr_end - 8));
      Bytes slice(b.begin() + static_cast<std::ptrdiff_t>(from), b.begin() + static_cast<std::ptrdiff_t>(from + k));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(to), slice.begin(), slice.end());
      set_header_len(b, header_len(b) + k);
      break;
    }
    case 8: {  // replace a digit run with a random number, keeping N consistent
      if (b.size() < 8 || hdr_end <= 9) break;
      std::size_t at = 8 + static_cast<std::size_t>(pick(hdr_end - 8));
      while (at < hdr_end && !(b[at] >= '0' && b[at] <= '9')) ++at;
      std::size_t end = at;
      while (end < hdr_end && b[end] >= '0' && b[end] <= '9') ++end;
      if (at == end) break;
      const std::uint64_t nums[] = {0, 1, pick(64), pick(1u << 20), ~0ull, 1ull << 63, (1ull << 63) - 1, pick(~0ull)};
      const std::string v = (pick(4) == 0 ? "-" : "") + std::to_string(nums[pick(std::size(nums))]);
      b.erase(b.begin() + static_cast<std::ptrdiff_t>(at), b.begin() + static_cast<std::ptrdiff_t>(end));
      b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), v.begin(), v.end());
      set_header_len(b, header_len(b) - (end - at) + v.size());
      break;
    }
  }
}

// QKV_FUZZ_SCALE=N runs N times as many iterations (e.g. under a sanitizer).
int scaled(int iterations) {
  const char* env = std::getenv("QKV_FUZZ_SCALE");
  const int k = env ? std::atoi(env) : 1;
  return iterations * (k > 0 ? k : 1);
}

void fuzz(const Bytes& base, std::uint64_t seed, int iterations, int* accepted, int* rejected_count) {
  std::mt19937_64 rng(seed);
  iterations = scaled(iterations);
  for (int it = 0; it < iterations; ++it) {
    Bytes b = base;
    const int k = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < k; ++m) mutate(b, rng);
    try {
      const SafetensorsFile f = SafetensorsFile::parse(b, "fuzz");
      ++*accepted;
      check_consistent(f, b);
      if (::testing::Test::HasFatalFailure()) {
        ADD_FAILURE() << "inconsistent result at iteration " << it << " (seed " << seed << ")";
        return;
      }
    } catch (const qkv::Error& e) {
      ++*rejected_count;
      const std::string msg = e.what();
      if (msg.find('\n') != std::string::npos || msg.size() > 1000) {
        ADD_FAILURE() << "error message not one short line at iteration " << it << ": " << msg.substr(0, 2000);
        return;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << "non-qkv exception at iteration " << it << " (seed " << seed << "): " << e.what();
      return;
    }
  }
}

TEST(SafetensorsFuzz, MutatedWriterOutputNeverCrashes) {
  const Bytes base = valid_base();
  ASSERT_NO_THROW(SafetensorsFile::parse(base, "base"));
  int accepted = 0, rejected_count = 0;
  fuzz(base, 0x5EED0001, 4000, &accepted, &rejected_count);
  // Both outcomes must occur, or the mutations are not exercising the reader.
  EXPECT_GT(accepted, scaled(50));
  EXPECT_GT(rejected_count, scaled(2000));
  std::printf("[ fuzz     ] accepted %d, rejected %d\n", accepted, rejected_count);
}

TEST(SafetensorsFuzz, MutatedPythonFileNeverCrashes) {
  const Bytes base = read_all(QKV_FIXTURE_DIR "/safetensors_ref.safetensors");
  ASSERT_NO_THROW(SafetensorsFile::parse(base, "base"));
  int accepted = 0, rejected_count = 0;
  fuzz(base, 0x5EED0002, 3000, &accepted, &rejected_count);
  EXPECT_GT(accepted, scaled(30));
  EXPECT_GT(rejected_count, scaled(1500));
  std::printf("[ fuzz     ] accepted %d, rejected %d\n", accepted, rejected_count);
}

}  // namespace
}  // namespace qkv::io::test
