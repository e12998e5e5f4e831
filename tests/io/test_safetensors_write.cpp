// safetensors writer: round trips, exact byte layout, argument validation,
// and the atomic-replace guarantees (failed or killed saves never damage the
// previous file, and leave no temp file behind when they fail cleanly).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <string>

#include "safetensors_test_util.h"

namespace qkv::io::test {
namespace {

template <class T>
std::vector<T> iota_vec(std::size_t n, T start) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<T>(start + static_cast<T>(i));
  return v;
}

template <class T>
StTensorView view(const std::string& name, StDType dt, Shape shape, const std::vector<T>& v) {
  return StTensorView{name, dt, std::move(shape), v.data(), v.size() * sizeof(T)};
}

std::string header_text(const Bytes& file) {
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<std::size_t>(i)];
  return std::string(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
}

TEST(SafetensorsWrite, RoundTripEveryDTypeScalarEmptyAndMetadata) {
  const auto f32 = iota_vec<float>(6, -2.5f);
  const auto f64 = iota_vec<double>(3, 0.125);
  const auto i64 = iota_vec<std::int64_t>(4, -2);
  const auto i32 = iota_vec<std::int32_t>(2, -7);
  const auto u32 = iota_vec<std::uint32_t>(2, 4000000000u);
  const auto u64 = iota_vec<std::uint64_t>(1, 18000000000000000000ull);
  const auto i16 = iota_vec<std::int16_t>(3, -300);
  const auto u16 = iota_vec<std::uint16_t>(3, 65000);
  const auto f16 = std::vector<std::uint16_t>{0x3C00, 0xC000};   // 1.0, -2.0
  const auto bf16 = std::vector<std::uint16_t>{0x3F80, 0x4040};  // 1.0, 3.0
  const auto i8 = iota_vec<std::int8_t>(5, -2);
  const auto u8 = std::vector<std::uint8_t>{255};
  const auto bools = std::vector<std::uint8_t>{1, 0, 1};
  const std::vector<float> none;
  const std::vector<StTensorView> ts = {
      view("enc.w", StDType::F32, {2, 3}, f32), view("d", StDType::F64, {3}, f64),
      view("ids", StDType::I64, {2, 2}, i64),   view("i32", StDType::I32, {2}, i32),
      view("u32", StDType::U32, {1, 2}, u32),   view("u64", StDType::U64, {}, u64),
      view("i16", StDType::I16, {3}, i16),      view("u16", StDType::U16, {3, 1}, u16),
      view("f16", StDType::F16, {2}, f16),      view("bf16", StDType::BF16, {2}, bf16),
      view("i8", StDType::I8, {5}, i8),         view("scalar", StDType::U8, {}, u8),
      view("mask", StDType::BOOL, {3}, bools),  view("empty", StDType::F32, {0, 4}, none),
      view("empty2", StDType::I64, {3, 0, 2}, none),
  };
  const std::map<std::string, std::string> meta = {
      {"config", R"({"d_model": 16, "heads": 4})"}, {"quote\"and\\slash", "line\nbreak\ttab\x01 \xc3\xa9"}, {"", ""}};
  ScratchDir dir;
  const std::string path = dir / "rt.safetensors";
  write_safetensors(path, ts, meta);
  EXPECT_TRUE(dir.temp_files().empty());

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), ts.size());
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const StTensorInfo& t = f.tensors()[i];  // data-offset order == the given order
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(t.dtype, ts[i].dtype) << t.name;
    EXPECT_EQ(t.shape, ts[i].shape) << t.name;
    EXPECT_EQ(t.begin, off) << t.name;
    EXPECT_EQ(t.nbytes(), ts[i].nbytes) << t.name;
    const auto* p = static_cast<const std::uint8_t*>(ts[i].data);
    EXPECT_EQ(tensor_bytes(f, t), Bytes(p, p + ts[i].nbytes)) << t.name;
    off = t.end;
  }
  EXPECT_EQ((8 + f.header_size()) % 8, 0u);
  EXPECT_EQ(f.file_size(), 8 + f.header_size() + off);
}

TEST(SafetensorsWrite, ExactHeaderBytes) {
  const std::vector<float> w = {1, 2};
  const std::vector<std::uint8_t> s = {9};
  ScratchDir dir;
  write_safetensors(dir / "x.safetensors",
                    {view("w", StDType::F32, {1, 2}, w), view("s", StDType::U8, {}, s)}, {{"k", "v"}});
  const Bytes file = read_all(dir / "x.safetensors");
  const std::string expect =
      R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
      R"("s":{"dtype":"U8","shape":[],"data_offsets":[8,9]}})";
  std::string padded = expect;
  while ((8 + padded.size()) % 8) padded += ' ';
  EXPECT_EQ(header_text(file), padded);
  EXPECT_EQ(file.size(), 8 + padded.size() + 9);
  // The length prefix is little-endian.
  EXPECT_EQ(file[0], padded.size() & 0xFF);
  EXPECT_EQ(file[1], (padded.size() >> 8) & 0xFF);
  for (int i = 2; i < 8; ++i) EXPECT_EQ(file[i], 0);
  // No metadata: no "__metadata__" key at all (what the Python writer does).
  write_safetensors(dir / "y.safetensors", {view("s", StDType::U8, {}, s)});
  EXPECT_EQ(header_text(read_all(dir / "y.safetensors")).rfind(R"({"s":{"dtype")", 0), 0u);
}

TEST(SafetensorsWrite, HeaderPaddedToEightForEveryLength) {
  ScratchDir dir;
  const std::vector<std::uint8_t> b = {1};
  std::string name;
  for (int len = 1; len <= 17; ++len) {
    name += static_cast<char>('a' + len % 26);
    write_safetensors(dir / "p.safetensors", {view(name, StDType::U8, {1}, b)});
    const Bytes file = read_all(dir / "p.safetensors");
    const std::string h = header_text(file);
    EXPECT_EQ((8 + h.size()) % 8, 0u) << len;
    const std::size_t close = h.find_last_of('}');
    EXPECT_LT(h.size() - close - 1, 8u);
    EXPECT_EQ(h.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
    EXPECT_EQ(SafetensorsFile::parse(file, "p").at(name).shape, Shape{1});
  }
}

TEST(SafetensorsWrite, EmptyFileAndOverwrite) {
  ScratchDir dir;
  const std::string p = dir / "m.safetensors";
  write_safetensors(p, {});
  EXPECT_EQ(header_text(read_all(p)), "{}      ");
  const std::vector<float> v = {1, 2, 3};
  write_safetensors(p, {view("v", StDType::F32, {3}, v)});  // replaces the old file
  EXPECT_EQ(SafetensorsFile::open(p).tensors().size(), 1u);
  EXPECT_TRUE(dir.temp_files().empty());
  // A zero dim next to huge ones is 0 bytes, not an overflow; null data is fine for 0 bytes.
  const Shape huge0 = {std::numeric_limits<std::int64_t>::max(), 0, 3};
  write_safetensors(p, {{"z", StDType::F64, huge0, nullptr, 0}});
  EXPECT_EQ(SafetensorsFile::open(p).at("z").shape, huge0);
}

// Invalid arguments: IOError naming the path, thrown before anything is written.
TEST(SafetensorsWrite, RejectsInvalidTensors) {
  ScratchDir dir;
  const std::string p = dir / "v.safetensors";
  const std::vector<float> v = {1, 2, 3};
  auto expect_error = [&](const std::vector<StTensorView>& ts, const std::string& want,
                          const std::map<std::string, std::string>& meta = {}) {
    try {
      write_safetensors(p, ts, meta);
      ADD_FAILURE() << "expected IOError containing " << want;
    } catch (const qkv::IOError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(p), std::string::npos) << msg;
      EXPECT_NE(msg.find(want), std::string::npos) << msg;
    }
    EXPECT_FALSE(std::filesystem::exists(p));
    EXPECT_TRUE(dir.temp_files().empty());
  };
  expect_error({{"w", StDType::F32, {2, 2}, v.data(), 12}}, "tensor 'w': nbytes is 12 but F32 [2,2] needs 16");
  expect_error({{"w", StDType::F64, {3}, v.data(), 12}}, "needs 24");
  expect_error({view("w", StDType::F32, {3}, v), view("w", StDType::F32, {3}, v)}, "duplicate tensor name 'w'");
  expect_error({view("__metadata__", StDType::F32, {3}, v)}, "\"__metadata__\"");
  expect_error({{"w", StDType::F32, {-1, 3}, v.data(), 12}}, "negative dimension");
  expect_error({{"w", StDType::F32, {3}, nullptr, 12}}, "data is null");
  expect_error({{"w", StDType::U8, {1ll << 40, 1ll << 40}, v.data(), 0}}, "more bytes than fit in 64 bits");
  expect_error({view("bad\xff", StDType::F32, {3}, v)}, "not valid UTF-8");
  expect_error({}, "not valid UTF-8", {{"k", "\xc3"}});
}

// ---------------------------------------------------- atomic replacement --

void expect_io_error_naming(const std::string& path) {
  const std::vector<float> v = {1};
  try {
    write_safetensors(path, {view("v", StDType::F32, {1}, v)});
    ADD_FAILURE() << "write to " << path << " should fail";
  } catch (const qkv::IOError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(SafetensorsAtomic, MissingDirectoryIsIOErrorNamingThePath) {
  ScratchDir dir;
  expect_io_error_naming(dir / "no/such/dir/m.safetensors");
  write_all(dir / "plain.txt", {1});
  expect_io_error_naming(dir / "plain.txt/m.safetensors");  // parent is a file
  EXPECT_TRUE(dir.temp_files().empty());
}

TEST(SafetensorsAtomic, UnwritableDirectoryIsIOErrorNamingThePath) {
  ScratchDir dir;
  const std::string ro = dir / "ro";
  ASSERT_EQ(::mkdir(ro.c_str(), 0555), 0);
  ::chmod(ro.c_str(), 0555);
  std::string target = ro + "/m.safetensors";
  // root ignores directory permissions; fall back to a directory the kernel
  // refuses even to root.
  auto can_create = [](const std::string& d) {
    const std::string probe = d + "/.qkv_probe";
    FILE* f = std::fopen(probe.c_str(), "w");
    if (!f) return false;
    std::fclose(f);
    std::remove(probe.c_str());
    return true;
  };
  if (can_create(ro)) {
    target = "/sys/qkv_test.safetensors";
    if (can_create("/sys")) GTEST_SKIP() << "no unwritable directory available (running as root?)";
  }
  expect_io_error_naming(target);
}

TEST(SafetensorsAtomic, TargetIsADirectory) {
  ScratchDir dir;
  const std::string d = dir / "d.safetensors";
  ASSERT_EQ(::mkdir(d.c_str(), 0755), 0);
  expect_io_error_naming(d);  // rename over a directory fails after the temp file was written
  EXPECT_TRUE(std::filesystem::is_directory(d));
  EXPECT_TRUE(dir.temp_files().empty());
  expect_io_error_naming(dir.path() + "/");
}

TEST(SafetensorsAtomic, InvalidWriteLeavesPreviousFileIntact) {
  ScratchDir dir;
  const std::string p = dir / "ckpt.safetensors";
  const std::vector<float> a = {1, 2, 3};
  write_safetensors(p, {view("a", StDType::F32, {3}, a)}, {{"step", "1"}});
  const Bytes before = read_all(p);
  EXPECT_THROW(write_safetensors(p, {{"a", StDType::F32, {4}, a.data(), 12}}), qkv::IOError);
  EXPECT_EQ(read_all(p), before);
  EXPECT_TRUE(dir.temp_files().empty());
}

// A write that fails half-way (the file-size limit makes write() return
// EFBIG after a few KiB) leaves the previous file byte-identical and removes
// its temp file.
TEST(SafetensorsAtomic, FailedMidWriteLeavesPreviousFileIntact) {
  ScratchDir dir;
  const std::string p = dir / "ckpt.safetensors";
  const std::vector<float> small = {1, 2, 3};
  write_safetensors(p, {view("a", StDType::F32, {3}, small)});
  const Bytes before = read_all(p);

  const std::vector<float> big(1 << 16, 0.5f);  // 256 KiB
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 16 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::string msg;
  try {
    write_safetensors(p, {view("a", StDType::F32, {1 << 16}, big)});
  } catch (const qkv::IOError& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);

  EXPECT_NE(msg.find(p), std::string::npos) << "expected an IOError naming the path, got: '" << msg << "'";
  EXPECT_EQ(read_all(p), before);
  EXPECT_EQ(SafetensorsFile::open(p).at("a").shape, Shape{3});
  EXPECT_TRUE(dir.temp_files().empty());
}

// A process killed in the middle of saving (REFERENCES.md section 5 item 13):
// the target is always a complete file, old or new, never a torn one.
TEST(SafetensorsAtomic, KilledSaveNeverDamagesTheTarget) {
  ScratchDir dir;
  const std::string p = dir / "ckpt.safetensors";
  const std::vector<float> old_v = {1, 2, 3};
  write_safetensors(p, {view("a", StDType::F32, {3}, old_v)}, {{"step", "1"}});

  for (int round = 0; round < 3; ++round) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      // Save big checkpoints over and over until killed.
      std::vector<float> big(4 << 20, static_cast<float>(round));  // 16 MiB
      for (int i = 0;; ++i) {
        try {
          write_safetensors(p, {view("a", StDType::F32, {4 << 20}, big)}, {{"step", std::to_string(i + 2)}});
        } catch (...) {
          ::_exit(3);
        }
      }
    }
    // Kill it in the middle of writing data: as soon as any file in the
    // directory (a temp file, or the target itself for a writer that is not
    // atomic) has a size that is neither empty nor a complete file. Give up
    // waiting after 5 s and kill anyway.
    const std::uintmax_t old_size = std::filesystem::file_size(p);
    const auto t0 = std::chrono::steady_clock::now();
    bool mid_write = false;
    while (!mid_write && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5)) {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(dir.path(), ec)) {
        const std::uintmax_t sz = std::filesystem::file_size(e.path(), ec);
        if (!ec && sz > 0 && sz != old_size && sz < (4u << 20) * 4) mid_write = true;
      }
    }
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited on its own with status " << status;

    const SafetensorsFile f = SafetensorsFile::open(p);  // must parse: complete old or new file
    const StTensorInfo& a = f.at("a");
    if (f.metadata().at("step") == "1") {
      EXPECT_EQ(tensor_bytes(f, a), bytes_of<float>({1, 2, 3}));
    } else {
      EXPECT_EQ(a.shape, Shape{4 << 20});
    }
    EXPECT_TRUE(mid_write) << "never saw a save in progress (round " << round << ")";
    for (const std::string& t : dir.temp_files()) std::filesystem::remove(dir / t);  // a killed save may leave one
  }
}

// Optional: PyTorch's `safetensors` package reads what we write. Skipped when
// the Python environment is absent (set QKV_PYTHON to point at one).
TEST(SafetensorsWrite, PythonSafetensorsReadsOurFile) {
  const char* env = std::getenv("QKV_PYTHON");
  const std::string py = env ? env : "/root/qkv-venv/bin/python";
  if (::access(py.c_str(), X_OK) != 0) GTEST_SKIP() << "no python at " << py;
  ScratchDir dir;
  const std::string probe = "\"" + py + "\" -c 'import safetensors, numpy' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) GTEST_SKIP() << "python lacks safetensors/numpy";

  const std::vector<float> w = {0.5f, -1.5f, 2.0f, 3.0f, 4.0f, 5.0f};
  const std::vector<std::int64_t> ids = {7, -1};
  const std::vector<std::uint8_t> m = {1, 0, 1};
  const std::vector<std::uint16_t> bf = {0x3F80};
  const std::vector<double> s = {2.5};
  const std::vector<float> none;
  write_safetensors(dir / "ours.safetensors",
                    {view("m", StDType::BOOL, {3}, m), view("enc.layers.0.w", StDType::F32, {2, 3}, w),
                     view("ids", StDType::I64, {2}, ids), view("bf", StDType::BF16, {1}, bf),
                     view("s", StDType::F64, {}, s), view("e", StDType::F32, {0, 2}, none)},
                    {{"config", "{\"d\": 1}\n\xc3\xa9"}});
  const std::string script = dir / "check.py";
  {
    std::ofstream o(script);
    o << "import sys, numpy as np\n"
         "from safetensors import safe_open\n"
         "p = sys.argv[1]\n"
         "with safe_open(p, 'np') as f:\n"  // numpy has no bfloat16: load all but 'bf'
         "    d = {k: f.get_tensor(k) for k in f.keys() if k != 'bf'}\n"
         "assert d['enc.layers.0.w'].dtype == np.float32 and d['enc.layers.0.w'].shape == (2, 3)\n"
         "assert d['enc.layers.0.w'].tolist() == [[0.5, -1.5, 2.0], [3.0, 4.0, 5.0]]\n"
         "assert d['ids'].tolist() == [7, -1] and d['ids'].dtype == np.int64\n"
         "assert d['m'].dtype == np.bool_ and d['m'].tolist() == [True, False, True]\n"
         "assert d['s'].shape == () and float(d['s']) == 2.5\n"
         "assert d['e'].shape == (0, 2)\n"
         "with safe_open(p, 'np') as f:\n"
         "    assert f.metadata() == {'config': '{\"d\": 1}\\n\\u00e9'}, f.metadata()\n"
         "    assert f.get_slice('bf').get_dtype() == 'BF16' and f.get_slice('bf').get_shape() == [1]\n"
         "assert sorted(d) == ['e', 'enc.layers.0.w', 'ids', 'm', 's'], sorted(d)\n";
  }
  const std::string cmd = "\"" + py + "\" \"" + script + "\" \"" + (dir / "ours.safetensors") + "\"";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
}

// The stream writer: the same bytes as write_safetensors for the same tensors given in pieces;
// too many or too few bytes are refused and leave the previous file and no temp file; a file
// larger than the file system's free space is refused before anything is created.
TEST(SafetensorsStreamWriter, SameBytesAsTheWholeWriterAndRefusesWrongSizes) {
  ScratchDir dir;
  const std::vector<std::int64_t> ids = iota_vec<std::int64_t>(5, 7);
  const std::vector<float> rows = iota_vec<float>(12, 0.5f);
  const std::map<std::string, std::string> meta = {{"format", "x"}};
  write_safetensors(dir / "whole.safetensors", {view("ids", StDType::I64, {5}, ids), view("rows", StDType::F32, {3, 4}, rows)},
                    meta);
  const std::vector<StTensorView> decl = {{"ids", StDType::I64, {5}, nullptr, 0}, {"rows", StDType::F32, {3, 4}, nullptr, 0}};
  {
    SafetensorsStreamWriter w(dir / "stream.safetensors", decl, meta);
    EXPECT_EQ(w.remaining(), 5u * 8 + 12u * 4);
    w.write(ids.data(), 5 * 8);
    for (int r = 0; r < 3; ++r) w.write(rows.data() + r * 4, 16);
    EXPECT_EQ(w.remaining(), 0u);
    EXPECT_THROW(w.write(rows.data(), 1), qkv::IOError);
    w.commit();
    EXPECT_EQ(w.file_bytes(), read_all(dir / "whole.safetensors").size());
  }
  EXPECT_EQ(read_all(dir / "stream.safetensors"), read_all(dir / "whole.safetensors"));

  // A writer that is not given every byte: commit refuses, the old file stays, no temp file.
  const Bytes before = read_all(dir / "stream.safetensors");
  {
    SafetensorsStreamWriter w(dir / "stream.safetensors", decl, meta);
    w.write(ids.data(), 5 * 8);
    try {
      w.commit();
      ADD_FAILURE() << "commit with bytes missing";
    } catch (const qkv::IOError& e) {
      EXPECT_NE(std::string(e.what()).find("48 bytes of the declared tensors were never given"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(read_all(dir / "stream.safetensors"), before);
  EXPECT_TRUE(dir.temp_files().empty());

  // More bytes than any file system holds: refused up front, naming the size.
  try {
    SafetensorsStreamWriter w(dir / "huge.safetensors", {{"x", StDType::F32, {std::int64_t{1} << 40, 1 << 20}, nullptr, 0}});
    ADD_FAILURE() << "a 4 EiB file was started";
  } catch (const qkv::IOError& e) {
    EXPECT_NE(std::string(e.what()).find("free"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(dir.temp_files().empty());
}

}  // namespace
}  // namespace qkv::io::test
