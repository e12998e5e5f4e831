// Token files (memory-mapped ids) and corpus tokenization for language-model training.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/train/lm.h"

namespace qkv::train {
namespace {

constexpr char kMagic[8] = {'Q', 'K', 'V', 'T', 'O', 'K', '0', '1'};
constexpr std::size_t kHeader = 64;

void put_u64(std::string& s, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
void put_u32(std::string& s, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint32_t get_u32(const unsigned char* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct Fnv {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void bytes(std::string_view s) {
    for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xFF)) * 0x100000001b3ull;
  }
};

}  // namespace

TokenFile TokenFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IOError("token file: cannot open '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    throw IOError("token file: cannot stat '" + path + "'");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size < kHeader) {
    ::close(fd);
    throw FormatError("token file '" + path + "': " + std::to_string(size) + " bytes, shorter than its 64-byte header");
  }
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw IOError("token file: cannot map '" + path + "': " + std::strerror(errno));
  return from_mapping(std::shared_ptr<void>(m, [size](void* p) { ::munmap(p, size); }), size, path);
}

TokenFile TokenFile::from_bytes(std::string bytes, const std::string& name) {
  auto owned = std::make_shared<std::string>(std::move(bytes));
  const std::uint64_t size = owned->size();
  if (size < kHeader)
    throw FormatError("token file '" + name + "': " + std::to_string(size) + " bytes, shorter than its 64-byte header");
  void* data = owned->data();
  return from_mapping(std::shared_ptr<void>(owned, data), size, name);
}

TokenFile TokenFile::from_mapping(std::shared_ptr<void> map, std::uint64_t size, const std::string& path) {
  TokenFile t;
  t.map_ = std::move(map);
  t.path_ = path;
  const auto* h = static_cast<const unsigned char*>(t.map_.get());
  auto bad = [&](const std::string& what) { return FormatError("token file '" + path + "': " + what); };
  if (std::memcmp(h, kMagic, 8) != 0) throw bad("not a qkv token file (no QKVTOK01 magic)");
  t.key_ = get_u64(h + 8);
  const std::uint64_t count = get_u64(h + 16);
  const std::uint32_t width = get_u32(h + 24);
  t.text_bytes_ = get_u64(h + 32);
  t.vocab_ = get_u64(h + 40);
  if (width != 2 && width != 4) throw bad("token width " + std::to_string(width) + " is not 2 or 4");
  if (count > (size - kHeader) / width || kHeader + count * width != size)
    throw bad("header says " + std::to_string(count) + " tokens of " + std::to_string(width) + " bytes, the file has " +
              std::to_string(size - kHeader) + " bytes after the header");
  if (t.vocab_ == 0 || t.vocab_ > (width == 2 ? 65536u : 0xFFFFFFFFull)) throw bad("vocab_size " + std::to_string(t.vocab_) + " does not fit its width");
  t.width_ = static_cast<int>(width);
  t.count_ = static_cast<std::int64_t>(count);
  t.data_ = h + kHeader;
  for (std::int64_t i = 0; i < t.count_; ++i)
    if (static_cast<std::uint64_t>(t[i]) >= t.vocab_)
      throw bad("token " + std::to_string(i) + " is id " + std::to_string(t[i]) + ", outside the vocabulary of " +
                std::to_string(t.vocab_));
  return t;
}

std::string TokenFile::encode(const std::vector<std::int64_t>& ids, std::uint64_t key, std::uint64_t text_bytes,
                              std::uint64_t vocab_size) {
  const std::uint32_t width = vocab_size <= 65536 ? 2 : 4;
  std::string out(kHeader + ids.size() * width, '\0');
  std::memcpy(out.data(), kMagic, 8);
  put_u64(out, 8, key);
  put_u64(out, 16, ids.size());
  put_u32(out, 24, width);
  put_u64(out, 32, text_bytes);
  put_u64(out, 40, vocab_size);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto v = static_cast<std::uint64_t>(ids[i]);
    if (v >= vocab_size) throw ValueError("token file: id " + std::to_string(ids[i]) + " outside the vocabulary");
    for (std::uint32_t b = 0; b < width; ++b) out[kHeader + i * width + b] = static_cast<char>((v >> (8 * b)) & 0xFF);
  }
  return out;
}

void TokenFile::write(const std::string& path, const std::vector<std::int64_t>& ids, std::uint64_t key,
                      std::uint64_t text_bytes, std::uint64_t vocab_size) {
  io::write_file_atomic(path, encode(ids, key, text_bytes, vocab_size), "token file");
}

std::uint64_t corpus_key(const std::vector<std::string>& texts, const tokenize::Tokenizer& bpe) {
  Fnv f;
  f.u64(texts.size());
  for (const std::string& t : texts) {
    f.u64(t.size());
    f.bytes(t);
  }
  f.u64(static_cast<std::uint64_t>(bpe.vocab_size()));
  for (std::int64_t id = 0; id < bpe.vocab_size(); ++id) {
    const std::string b = bpe.token_text(id);
    f.u64(b.size());
    f.bytes(b);
  }
  // The merges decide the ids as much as the vocabulary: a probe through encode covers them.
  for (std::int64_t id : bpe.encode_ordinary(" the quick brown fox, and the Lord said unto them: 1611!\n"))
    f.u64(static_cast<std::uint64_t>(id));
  return f.h;
}

CorpusTokens tokenize_corpus(const std::vector<std::string>& files, const tokenize::Tokenizer& bpe,
                             const std::string& cache_path, const std::string& write_path, bool write_cache) {
  if (files.empty()) throw ValueError("train lm: no text files given");
  std::vector<std::string> texts;
  std::uint64_t bytes = 0;
  for (const std::string& f : files) {
    texts.push_back(io::read_file(f, "train lm"));
    bytes += texts.back().size();
  }
  if (bytes == 0) throw ValueError("train lm: the text files are empty");
  const std::uint64_t key = corpus_key(texts, bpe);
  CorpusTokens out;
  {
    struct stat st {};
    if (::stat(cache_path.c_str(), &st) == 0) {
      try {
        TokenFile t = TokenFile::open(cache_path);
        if (t.key() == key && t.vocab_size() == static_cast<std::uint64_t>(bpe.vocab_size())) {
          out.tokens = std::move(t);
          out.reused = true;
          return out;
        }
      } catch (const Error&) {
        // A damaged or foreign cache is rebuilt below.
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::int64_t> ids;
  const auto eos = bpe.eos_id();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    std::vector<std::int64_t> part;
    try {
      part = bpe.encode_ordinary(texts[i]);
    } catch (const ValueError& e) {
      throw ValueError("train lm: " + files[i] + ": " + e.what());
    }
    ids.insert(ids.end(), part.begin(), part.end());
    if (eos) ids.push_back(*eos);
  }
  const auto vocab = static_cast<std::uint64_t>(bpe.vocab_size());
  if (write_cache) {
    const std::string& to = write_path.empty() ? cache_path : write_path;
    TokenFile::write(to, ids, key, bytes, vocab);
    out.tokens = TokenFile::open(to);
  } else {
    out.tokens = TokenFile::from_bytes(TokenFile::encode(ids, key, bytes, vocab), cache_path + " (in memory)");
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace qkv::train
