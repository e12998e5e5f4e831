// The GGUF writer: byte-identical to gguf-py's writer on the same contents, every validation
// error named before anything is written, atomic under SIGKILL at every write point, and
// sample files (with a JSON description) for tests/reference/check_gguf_with_gguf_py.py.
#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "gguf_samples.h"
#include "gguf_test_util.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf_writer.h"

namespace qkv::io::test {
namespace {

namespace fs = std::filesystem;
using kernels::QType;

Bytes file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

std::vector<GGUFTensorData> views_of(const GGUFFile& f) {
  std::vector<GGUFTensorData> v;
  for (const GGUFTensorInfo& t : f.tensors()) v.push_back({t.name, t.type, t.dims, f.data(t), t.nbytes});
  return v;
}

// ------------------------------------------------ gguf-py's file (fixture) ----

TEST(GgufReference, ReadsWhatGgufPyWrote) {
  const GGUFFile f = GGUFFile::open(QKV_FIXTURE_DIR "/gguf_ref.gguf");
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("general.name"), "gguf-py reference");
  EXPECT_EQ(f.value("t.u8").type(), GGUFType::U8);
  EXPECT_EQ(f.get_int("t.u8"), 200);
  EXPECT_EQ(f.get_int("t.i8"), -100);
  EXPECT_EQ(f.get_int("t.u16"), 60000);
  EXPECT_EQ(f.get_int("t.i16"), -30000);
  EXPECT_EQ(f.get_int("t.u32"), 4000000000ll);
  EXPECT_EQ(f.get_int("t.i32"), -2000000000);
  EXPECT_EQ(f.get_float("t.f32"), static_cast<double>(0.1f));
  EXPECT_EQ(f.value("t.u64").as_uint(), ~std::uint64_t{0});
  EXPECT_EQ(f.get_int("t.i64"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(f.get_float("t.f64"), 1.0 / (1 << 30));
  EXPECT_TRUE(f.get_bool("t.bool"));
  EXPECT_EQ(f.get_string("t.string"), "h\u00e9llo \u6f22\u5b57 \U0001f600");
  EXPECT_EQ(f.get_string_array("t.strings"), (std::vector<std::string_view>{"<s>", "\u0120a", "b c"}));
  EXPECT_EQ(f.value("t.i32s").element_type(), GGUFType::I32);
  EXPECT_EQ(f.get_int_array("t.i32s"), (std::vector<std::int64_t>{1, -2, 3}));
  EXPECT_EQ(f.get_float_array("t.f32s"), (std::vector<double>{0.5, -1.5}));
  EXPECT_EQ(f.value("t.bools").element(1)->as_bool(), false);
  EXPECT_EQ(f.get_int_array("t.u8s"), (std::vector<std::int64_t>{1, 2, 255}));
  const GGUFValue& nested = f.value("t.nested");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested.array_at(0)->element(1)->as_int(), 2);
  EXPECT_EQ(nested.array_at(1)->element(0)->as_int(), 3);
  EXPECT_EQ(f.alignment(), 32u);

  ASSERT_EQ(f.tensors().size(), 6u);
  const GGUFTensorInfo& a = f.at("a.f32");
  EXPECT_EQ(a.dims, (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(a.shape, (Shape{2, 3}));
  float a5;
  std::memcpy(&a5, f.data(a) + 20, 4);
  EXPECT_EQ(a5, 2.5f);
  EXPECT_EQ(f.at("c.q8_0").type, QType::Q8_0);
  EXPECT_EQ(f.at("c.q8_0").shape, (Shape{3, 64}));
  EXPECT_EQ(f.at("c.q8_0").nbytes, 3u * 2 * 34);
  EXPECT_EQ(f.at("d.q4_1").nbytes, 2u * 20);
  EXPECT_EQ(f.at("e.q4_k").nbytes, 144u);
  EXPECT_EQ(f.at("e.q4_k").rows(), 1);
  EXPECT_EQ(f.at("f.bf16").type, QType::BF16);
  EXPECT_EQ(f.data(f.at("f.bf16"))[1], 0x3F);
}

TEST(GgufReference, WritesTheBytesGgufPyWrites) {
  const Bytes want = file_bytes(QKV_FIXTURE_DIR "/gguf_ref.gguf");
  const GGUFFile f = GGUFFile::open(QKV_FIXTURE_DIR "/gguf_ref.gguf");
  const TempFile out("ours.gguf");
  write_gguf(out.path(), metadata_of(f), views_of(f));
  const Bytes got = file_bytes(out.path());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "qkv's writer and gguf-py's differ";
}

// ------------------------------------------------------------ validation ----

TEST(GgufWrite, BadInputsAreNamedAndNothingIsWritten) {
  const TempFile target("target.gguf");
  const float w[8] = {};
  write_gguf(target.path(), {{"a", GGUFMeta::u32(1)}}, {{"w", QType::F32, {8}, w, 32}});
  const Bytes before = file_bytes(target.path());
  auto rejected = [&](const GGUFMetadata& m, const std::vector<GGUFTensorData>& t,
                      std::initializer_list<std::string> want) {
    try {
      write_gguf(target.path(), m, t);
      ADD_FAILURE() << "written";
    } catch (const qkv::IOError& e) {
      expect_message(e.what(), target.path(), want);
      EXPECT_NE(std::string(e.what()).find("cannot write GGUF file"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(file_bytes(target.path()) == before) << "the target changed";
  };
  const std::uint8_t q[2 * 20] = {};
  rejected({{"k", GGUFMeta::u8(1)}, {"k", GGUFMeta::u8(2)}}, {}, {"duplicate metadata key 'k'"});
  rejected({{"bad\xff", GGUFMeta::u8(1)}}, {}, {"metadata key 'bad\\xff' is not valid UTF-8"});
  rejected({{"s", GGUFMeta::string("\xc0\x80")}}, {}, {"metadata key 's' is not valid UTF-8"});
  rejected({{"t", GGUFMeta::string_array({"ok", "\xff"})}}, {}, {"metadata key 't': element 1 is not valid UTF-8"});
  rejected({{"general.alignment", GGUFMeta::u64(32)}}, {}, {"'general.alignment' must be a u32"});
  rejected({{"general.alignment", GGUFMeta::u32(24)}}, {}, {"'general.alignment' is 24", "power of two"});
  GGUFMeta deep = GGUFMeta::int_array(GGUFType::U8, {1});
  for (int i = 0; i < kGGUFMaxArrayDepth; ++i) deep = GGUFMeta::array_of_arrays({deep});
  rejected({{"deep", deep}}, {}, {"metadata key 'deep'", "nested more than 8 deep"});
  rejected({}, {{"w", QType::F32, {8}, w, 32}, {"w", QType::F32, {8}, w, 32}}, {"duplicate tensor name 'w'"});
  rejected({}, {{std::string(64, 'n'), QType::F32, {8}, w, 32}}, {"the name is 64 bytes; llama.cpp allows at most 63"});
  rejected({}, {{"w", QType::F32, {1, 1, 1, 1, 8}, w, 32}}, {"tensor 'w' has 5 dims"});
  rejected({}, {{"w", QType::F32, {-8}, w, 32}}, {"tensor 'w': dims [-8] have a negative dim"});
  rejected({}, {{"w", QType::F32, {1ll << 62, 8}, w, 32}}, {"tensor 'w'", "more elements than fit in int64"});
  rejected({}, {{"q", QType::Q4_1, {48, 1}, q, 30}}, {"tensor 'q': row length 48 is not a multiple of Q4_1's block of 32"});
  rejected({}, {{"q", QType::Q4_1, {32, 2}, q, 36}}, {"tensor 'q': nbytes is 36 but Q4_1 dims [32,2] need 40"});
  rejected({}, {{"w", QType::F32, {8}, nullptr, 32}}, {"tensor 'w': data is null"});
  rejected({}, {{"w\xff", QType::F32, {8}, w, 32}}, {"is not valid UTF-8"});
  rejected({}, {{"w", static_cast<QType>(31), {256}, w, 32}}, {"tensor 'w': unknown type id 31"});  // removed from GGML
  for (const auto& e : fs::directory_iterator(fs::path(target.path()).parent_path()))
    EXPECT_EQ(e.path().filename().string().find(fs::path(target.path()).filename().string() + ".tmp"),
              std::string::npos)
        << "a temp file was left: " << e.path();
}

TEST(GgufWrite, MetaValuesRefuseWhatTheirTypeCannotHold) {
  EXPECT_THROW(GGUFMeta::int_array(GGUFType::U8, {256}), qkv::ValueError);
  EXPECT_THROW(GGUFMeta::int_array(GGUFType::I8, {-129}), qkv::ValueError);
  EXPECT_THROW(GGUFMeta::int_array(GGUFType::BOOL, {2}), qkv::ValueError);
  EXPECT_THROW(GGUFMeta::int_array(GGUFType::F32, {1}), qkv::ValueError);
  EXPECT_THROW(GGUFMeta::float_array(GGUFType::I32, {1.0}), qkv::ValueError);
  EXPECT_THROW(GGUFMeta::array_of_arrays({GGUFMeta::u8(1)}), qkv::ValueError);
  try {
    GGUFMeta::int_array(GGUFType::U16, {1, 70000});
  } catch (const qkv::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("element 1: 70000 does not fit in u16"), std::string::npos) << e.what();
  }
}

TEST(GgufWrite, GeneralAlignmentSetsTheLayout) {
  const SampleTensors s = sample_tensors();
  for (std::uint32_t align : {1u, 8u, 64u, 4096u}) {
    SCOPED_TRACE(align);
    const TempFile file("aligned.gguf");
    write_gguf(file.path(), {{"general.alignment", GGUFMeta::u32(align)}}, s.tensors);
    const GGUFFile f = GGUFFile::open(file.path());
    EXPECT_EQ(f.alignment(), align);
    EXPECT_EQ(f.data_offset() % align, 0u);
    for (std::size_t i = 0; i < s.tensors.size(); ++i) {
      const GGUFTensorInfo& t = f.tensors()[i];
      EXPECT_EQ(t.offset % align, 0u);
      if (t.nbytes) {
        EXPECT_EQ(std::memcmp(f.data(t), s.tensors[i].data, t.nbytes), 0) << t.name;
      }
    }
  }
}

// ------------------------------------------------------------- atomicity ----

int g_kill_at = 0, g_points = 0;
void kill_at_point(const char*) {
  if (++g_points == g_kill_at) ::raise(SIGKILL);
}

TEST(GgufWrite, KilledAtEveryWritePointLeavesTheOldFileOrTheNew) {
  const fs::path dir = fs::temp_directory_path() / ("qkv_gguf_kill_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "model.gguf").string();
  const float old_w[4] = {1, 2, 3, 4};
  write_gguf(path, {{"step", GGUFMeta::u32(1)}}, {{"w", QType::F32, {4}, old_w, 16}});
  const Bytes old_bytes = file_bytes(path);
  const SampleTensors s = sample_tensors();
  const GGUFMetadata new_meta = sample_metadata();
  // temp created, header written, one per tensor, fsynced, closed, renamed, dir fsynced
  const int points = 2 + static_cast<int>(s.tensors.size()) + 4;
  int saw_old = 0, saw_new = 0;
  for (int k = 1; k <= points + 1; ++k) {
    SCOPED_TRACE("killed at write point " + std::to_string(k));
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      g_kill_at = k;
      set_write_point_hook(kill_at_point);
      try {
        write_gguf(path, new_meta, s.tensors);
      } catch (...) {
        ::_exit(3);
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    if (k <= points)
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
    else
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    const GGUFFile f = GGUFFile::open(path);  // a complete file, old or new
    if (f.find_int("step") == 1) {
      ++saw_old;
      EXPECT_TRUE(file_bytes(path) == old_bytes);
    } else {
      ++saw_new;
      EXPECT_EQ(metadata_of(f), new_meta);
      EXPECT_EQ(f.tensors().size(), s.tensors.size());
      write_gguf(path, {{"step", GGUFMeta::u32(1)}}, {{"w", QType::F32, {4}, old_w, 16}});  // back to old
    }
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().string() != path) fs::remove(e.path());  // a killed save may leave its temp file
  }
  std::printf("[ killed   ] %d kills before the rename left the old file, %d after it the new one\n", saw_old,
              saw_new);
  EXPECT_EQ(saw_old, points - 2) << "the rename is the commit point";  // killed at "renamed" or later: new
  fs::remove_all(dir);
}

// ------------------------------------------- samples for gguf-py (script) ----

nlohmann::json json_of(const GGUFValue& v) {
  nlohmann::json j = {{"type", gguf_type_name(v.type())}};
  if (v.is_array()) {
    j["elem"] = gguf_type_name(v.element_type());
    nlohmann::json items = nlohmann::json::array();
    for (std::uint64_t i = 0; i < v.size(); ++i)
      items.push_back(v.element_type() == GGUFType::ARRAY ? json_of(*v.array_at(i))["value"]
                                                          : json_of(*v.element(i))["value"]);
    j["value"] = items;
  } else if (auto s = v.as_string()) {
    j["value"] = std::string(*s);
  } else if (auto b = v.as_bool()) {
    j["value"] = *b;
  } else if (auto x = v.as_float()) {
    j["value"] = *x;
  } else if (v.type() == GGUFType::U64) {
    j["value"] = *v.as_uint();
  } else {
    j["value"] = *v.as_int();
  }
  return j;
}

// Writes the sample file (and one with alignment 64) with a JSON description of what it holds
// into $QKV_GGUF_SAMPLES (tests/reference/check_gguf_with_gguf_py.py sets it and loads them
// with gguf-py); without it, into a scratch folder, checking qkv reads the description back.
TEST(GgufWrite, SamplesForGgufPy) {
  const char* env = std::getenv("QKV_GGUF_SAMPLES");
  const fs::path dir = env ? fs::path(env) : fs::temp_directory_path() / ("qkv_gguf_samples_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const SampleTensors s = sample_tensors();
  for (std::uint32_t align : {32u, 64u}) {
    GGUFMetadata meta = sample_metadata();
    if (align != 32) meta.emplace_back("general.alignment", GGUFMeta::u32(align));
    const std::string name = "sample_align" + std::to_string(align);
    write_gguf((dir / (name + ".gguf")).string(), meta, s.tensors);
    const GGUFFile f = GGUFFile::open((dir / (name + ".gguf")).string());
    nlohmann::json j = {{"metadata", nlohmann::json::array()}, {"tensors", nlohmann::json::array()}};
    for (const GGUFKeyValue& kv : f.metadata()) {
      nlohmann::json e = json_of(kv.value);
      e["key"] = std::string(kv.key);
      j["metadata"].push_back(e);
    }
    for (const GGUFTensorInfo& t : f.tensors()) {
      std::string hex;
      static const char* digits = "0123456789abcdef";
      for (std::uint64_t i = 0; i < t.nbytes; ++i) {
        hex += digits[f.data(t)[i] >> 4];
        hex += digits[f.data(t)[i] & 15];
      }
      j["tensors"].push_back({{"name", t.name}, {"type", kernels::qtype_name(t.type)}, {"dims", t.dims},
                              {"offset", t.offset}, {"nbytes", t.nbytes}, {"hex", hex}});
    }
    std::ofstream(dir / (name + ".json")) << j.dump(1) << '\n';
    EXPECT_EQ(j["metadata"].size(), meta.size());
    EXPECT_EQ(j["tensors"].size(), s.tensors.size());
  }
  if (!env) fs::remove_all(dir);
}

}  // namespace
}  // namespace qkv::io::test
