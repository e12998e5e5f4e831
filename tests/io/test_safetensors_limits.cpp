// Resource limits of the safetensors reader: a header may declare huge shapes. Either the
// file does not hold their bytes (FormatError, nothing allocated), or it does (a sparse
// file claiming hundreds of GiB): then the reader maps it without reading it, and loading
// its tensors is refused up front with a ResourceError naming the file, the bytes needed
// and the bytes available, and the process goes on.
#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "qkv/core/memory.h"
#include "qkv/io/tensors.h"
#include "safetensors_test_util.h"

namespace qkv::io::test {
namespace {

// The resident set of this process now (VmRSS of /proc/self/status), in MiB.
double rss_mb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0.0;
}

TEST(SafetensorsLimits, HugeShapesWithoutTheirBytesAreFormatErrors) {
  rejected(make_file(R"({"w":{"dtype":"F32","shape":[262144,262144],"data_offsets":[0,274877906944]}})"),
           {"tensor 'w'", "274877906944", "truncated"});
  rejected(make_file(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", zeros(8)),
           {"more bytes than fit in 64 bits"});
}

// The file is mapped, not read: open() and open_header() parse its header in a few pages
// of memory; loading its tensors into memory (load_safetensors) is refused before anything
// is read or allocated.
TEST(SafetensorsLimits, ASparseFileLargerThanMemoryIsRefusedBeforeReading) {
  const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                     ("qkv_sparse_" + std::to_string(::getpid()) + ".safetensors");
  const std::uint64_t data = std::uint64_t{1} << 38;  // 256 GiB of float32 [262144, 262144]
  const Bytes head = make_file(R"({"w":{"dtype":"F32","shape":[262144,262144],"data_offsets":[0,274877906944]}})");
  {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(head.data()),
                                                static_cast<std::streamsize>(head.size()));
  }
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(head.size() + data)), 0) << "no sparse file on this filesystem";
  ::close(fd);
  const double rss0 = rss_mb();
  {
    const SafetensorsFile mapped = SafetensorsFile::open(path.string());
    ASSERT_EQ(mapped.tensors().size(), 1u);
    EXPECT_EQ(mapped.file_size(), head.size() + data);
    ASSERT_TRUE(mapped.mapping());
    EXPECT_TRUE(mapped.mapping()->is_mapped());
    EXPECT_EQ(mapped.data(mapped.at("w")), mapped.mapping()->data() + head.size());  // a view, not touched
    const SafetensorsFile header = SafetensorsFile::open_header(path.string());
    EXPECT_EQ(header.at("w").nbytes(), data);
    EXPECT_FALSE(header.has_data());
  }
  EXPECT_LT(rss_mb() - rss0, 16.0) << "the tensor data was read";
  try {
    load_safetensors(path.string());
    ADD_FAILURE() << "a 256 GiB file was loaded";
  } catch (const qkv::ResourceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs 256.0 GiB"), std::string::npos) << msg;
    EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  }
  std::filesystem::remove(path);
  // Still working: a small file parses.
  const SafetensorsFile ok = SafetensorsFile::parse(
      make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", zeros(8)), "ok.safetensors");
  EXPECT_EQ(ok.tensors().size(), 1u);
}

}  // namespace
}  // namespace qkv::io::test
