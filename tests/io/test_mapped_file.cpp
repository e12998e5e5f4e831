// io/mapped_file.h: whole-file read-only mappings, bytes in memory behind the same handle, and
// prefix reads that read nothing else of the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "qkv/core/error.h"
#include "qkv/io/mapped_file.h"

namespace qkv::io {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("qkv_mapped_" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
};

void expect_io_error(const std::function<void()>& call, const std::string& path, const std::string& says) {
  try {
    call();
    ADD_FAILURE() << "no error for " << path;
  } catch (const qkv::IOError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": cannot read weights: ", 0), 0u) << msg;
    EXPECT_NE(msg.find(says), std::string::npos) << msg;
  }
}

TEST(MappedFile, MapsTheWholeFileAndOutlivesItsPath) {
  const Scratch s;
  const std::string p = s.write("a.bin", "hello, mapping");
  std::shared_ptr<const MappedFile> m = MappedFile::open(p, "weights");
  EXPECT_TRUE(m->is_mapped());
  EXPECT_EQ(m->size(), 14u);
  EXPECT_EQ(m->source(), p);
  EXPECT_EQ(std::memcmp(m->data(), "hello, mapping", 14), 0);
  m->prefetch(0, 1000);  // a hint, clamped to the file
  fs::remove(p);         // the mapping keeps the bytes
  EXPECT_EQ(std::memcmp(m->data(), "hello, mapping", 14), 0);
}

TEST(MappedFile, EmptyFilesAndBytesInMemory) {
  const Scratch s;
  const auto empty = MappedFile::open(s.write("empty.bin", ""), "weights");
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_NE(empty->data(), nullptr);
  const auto mem = MappedFile::from_bytes({1, 2, 3}, "label");
  EXPECT_FALSE(mem->is_mapped());
  EXPECT_EQ(mem->size(), 3u);
  EXPECT_EQ(mem->data()[2], 3);
  EXPECT_EQ(mem->source(), "label");
  EXPECT_NE(MappedFile::from_bytes({}, "none")->data(), nullptr);
}

TEST(MappedFile, ErrorsNameThePathAndTheReason) {
  const Scratch s;
  const std::string missing = (s.dir / "missing.bin").string();
  expect_io_error([&] { MappedFile::open(missing, "weights"); }, missing, "No such file or directory");
  expect_io_error([&] { read_file_prefix(missing, 8, "weights"); }, missing, "No such file or directory");
  expect_io_error([&] { MappedFile::open(s.dir.string(), "weights"); }, s.dir.string(), "it is a directory");
  expect_io_error([&] { read_file_prefix("/dev/null", 8, "weights"); }, "/dev/null", "not a regular file");
}

TEST(MappedFile, PrefixReadsReadOnlyTheFirstBytes) {
  const Scratch s;
  const std::string p = s.write("p.bin", "0123456789");
  FilePrefix a = read_file_prefix(p, 4, "weights");
  EXPECT_EQ(a.file_size, 10u);
  EXPECT_EQ(std::string(a.bytes.begin(), a.bytes.end()), "0123");
  FilePrefix b = read_file_prefix(p, 100, "weights");
  EXPECT_EQ(b.bytes.size(), 10u);
  EXPECT_EQ(regular_file_size(p, "weights"), 10u);
  // A 1 TiB sparse file: its size, and only the bytes asked for.
  const std::string big = s.write("sparse.bin", "head");
  fs::resize_file(big, std::uintmax_t{1} << 40);
  FilePrefix c = read_file_prefix(big, 4, "weights");
  EXPECT_EQ(c.file_size, std::uint64_t{1} << 40);
  EXPECT_EQ(std::string(c.bytes.begin(), c.bytes.end()), "head");
}

}  // namespace
}  // namespace qkv::io
