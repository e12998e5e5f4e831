// Seeded mutation fuzzing of the GGUF reader (the libFuzzer target fuzz/fuzz_gguf.cpp does the
// same at scale): every mutated file either parses into a self-consistent result or throws a
// qkv::FormatError. Anything else (another exception, a crash, a sanitizer report) fails.
#include <random>

#include "gguf_samples.h"
#include "gguf_test_util.h"

namespace qkv::io::test {
namespace {

// What a successful parse promises: tensors tile the data section within the file.
void check_consistent(const GGUFFile& f, const Bytes& bytes) {
  ASSERT_EQ(f.file_size(), bytes.size());
  ASSERT_LE(f.data_offset(), bytes.size() + f.alignment());
  for (const GGUFTensorInfo& t : f.tensors()) {
    ASSERT_EQ(t.offset % f.alignment(), 0u);
    ASSERT_LE(f.data_offset() + t.offset + t.nbytes, bytes.size()) << t.name;
    const kernels::QTypeTraits tr = kernels::qtype_traits(t.type);
    ASSERT_EQ(t.row_length() % tr.block, 0) << t.name;
    ASSERT_EQ(t.nbytes, static_cast<std::uint64_t>(t.numel() / tr.block * tr.block_bytes)) << t.name;
    ASSERT_EQ(f.find(t.name), &t);
    if (t.nbytes) {
      ASSERT_EQ(f.data(t), f.mapping()->data() + f.data_offset() + t.offset);
    }
  }
  for (const GGUFKeyValue& kv : f.metadata()) ASSERT_EQ(f.find_value(kv.key), &kv.value);
}

Bytes sample_bytes() {
  const TempFile file("fuzz_base.gguf");
  const SampleTensors s = sample_tensors();
  write_gguf(file.path(), sample_metadata(), s.tensors);
  std::ifstream in(file.path(), std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

TEST(GgufFuzz, MutatedWriterOutputNeverCrashes) {
  const Bytes base = sample_bytes();
  ASSERT_NO_THROW(GGUFFile::parse(base, "base.gguf"));
  std::mt19937_64 rng(20241203);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % b.size();
      switch (rng() % 6) {
        case 0: b[at] ^= static_cast<std::uint8_t>(1u << (rng() % 8)); break;  // flip a bit
        case 1: b[at] = static_cast<std::uint8_t>(rng()); break;               // any byte
        case 2: b.resize(at); break;                                            // truncate
        case 3:                                                                 // a huge u64 here
          for (std::size_t k = 0; k < 8 && at + k < b.size(); ++k) b[at + k] = k == 7 ? 0x7F : 0xFF;
          break;
        case 4: b.insert(b.begin() + static_cast<std::ptrdiff_t>(at), static_cast<std::uint8_t>(rng())); break;
        case 5:                                                                 // a small count
          if (at + 8 <= b.size())
            for (std::size_t k = 0; k < 8; ++k) b[at + k] = k == 0 ? static_cast<std::uint8_t>(rng() % 64) : 0;
          break;
      }
      if (b.empty()) break;
    }
    try {
      const GGUFFile f = GGUFFile::parse(b, "mutated.gguf");
      ++accepted;
      check_consistent(f, b);
    } catch (const qkv::FormatError&) {
      ++rejected;
    }
  }
  std::printf("[ fuzz     ] accepted %d, rejected %d\n", accepted, rejected);
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(accepted, 10) << "mutations in tensor bytes and padding keep the file valid";
}

}  // namespace
}  // namespace qkv::io::test
