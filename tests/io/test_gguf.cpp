// The GGUF reader on valid files: what the writer wrote reads back identical (metadata of every
// type, tensors of every type, in place in the mapping), header-only opens agree with full
// ones, version 2 files read, and the typed getters name the key and the type found.
#include <cstring>
#include <limits>

#include "gguf_samples.h"
#include "gguf_test_util.h"
#include "qkv/io/gguf_writer.h"

namespace qkv::io::test {
namespace {

// The sample file written to a scratch path.
struct SampleFile {
  TempFile file{"sample.gguf"};
  SampleTensors tensors = sample_tensors();
  GGUFMetadata metadata = sample_metadata();
  SampleFile() { write_gguf(file.path(), metadata, tensors.tensors); }
};

void expect_same_tensors(const GGUFFile& f, const SampleTensors& s, bool with_data) {
  ASSERT_EQ(f.tensors().size(), s.tensors.size());
  for (std::size_t i = 0; i < s.tensors.size(); ++i) {
    const GGUFTensorData& want = s.tensors[i];
    const GGUFTensorInfo& got = f.tensors()[i];
    SCOPED_TRACE(want.name);
    EXPECT_EQ(got.name, want.name);
    EXPECT_EQ(got.type, want.type);
    EXPECT_EQ(got.dims, want.dims);
    EXPECT_EQ(got.shape, Shape(want.dims.rbegin(), want.dims.rend()));
    EXPECT_EQ(got.nbytes, want.nbytes);
    EXPECT_EQ(got.offset % f.alignment(), 0u);
    EXPECT_EQ(f.find(want.name), &got);
    if (with_data && want.nbytes) {
      EXPECT_EQ(std::memcmp(f.data(got), want.data, want.nbytes), 0) << "the bytes differ";
    }
  }
}

TEST(GgufRead, WhatTheWriterWritesReadsBackIdentical) {
  const SampleFile s;
  const GGUFFile f = GGUFFile::open(s.file.path());
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.data_offset() % 32, 0u);
  EXPECT_EQ(metadata_of(f), s.metadata) << "metadata differs after the round trip";
  expect_same_tensors(f, s.tensors, true);
  // Written again from what was read: the same bytes.
  const TempFile again("again.gguf");
  std::vector<GGUFTensorData> views;
  for (const GGUFTensorInfo& t : f.tensors()) views.push_back({t.name, t.type, t.dims, f.data(t), t.nbytes});
  write_gguf(again.path(), metadata_of(f), views);
  const GGUFFile g = GGUFFile::open(again.path());
  ASSERT_EQ(g.file_size(), f.file_size());
  EXPECT_EQ(std::memcmp(g.mapping()->data(), f.mapping()->data(), f.file_size()), 0);
}

TEST(GgufRead, TensorsAreViewsIntoTheMapping) {
  const SampleFile s;
  std::shared_ptr<const MappedFile> keep;
  const std::uint8_t* p = nullptr;
  {
    const GGUFFile f = GGUFFile::open(s.file.path());
    ASSERT_TRUE(f.mapping());
    EXPECT_TRUE(f.mapping()->is_mapped());
    const GGUFTensorView v = f.view("token_embd.weight");
    EXPECT_EQ(v.type, kernels::QType::Q8_0);
    EXPECT_EQ(v.nbytes, 5u * 2 * 34);
    EXPECT_EQ(v.data, f.mapping()->data() + f.data_offset() + v.info->offset);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(v.data) % 32, 0u) << "aligned in memory as in the file";
    keep = f.mapping();
    p = v.data;
  }
  // The mapping outlives the GGUFFile it came from.
  EXPECT_EQ(std::memcmp(p, s.tensors.tensors[0].data, 5 * 2 * 34), 0);
}

TEST(GgufRead, HeaderOnlyAgreesWithTheFullOpen) {
  const SampleFile s;
  const GGUFFile full = GGUFFile::open(s.file.path());
  const GGUFFile head = GGUFFile::open_header(s.file.path());
  EXPECT_FALSE(head.has_data());
  EXPECT_EQ(head.mapping(), nullptr);
  EXPECT_EQ(head.file_size(), full.file_size());
  EXPECT_EQ(head.data_offset(), full.data_offset());
  EXPECT_EQ(metadata_of(head), metadata_of(full));
  expect_same_tensors(head, s.tensors, false);
  try {
    head.data(head.at("half"));
    ADD_FAILURE() << "data() after open_header";
  } catch (const qkv::ValueError& e) {
    expect_message(e.what(), s.file.path(), {"tensor 'half'", "open_header"});
  }
}

TEST(GgufRead, HeaderOnlyReadsMoreWhenTheMetadataIsLong) {
  // 100k strings (~1.1 MB of metadata): several growing prefixes, the same result.
  std::vector<std::string> tokens;
  for (int i = 0; i < 100000; ++i) tokens.push_back("tok" + std::to_string(i));
  const TempFile file("long.gguf");
  const float w[4] = {1, 2, 3, 4};
  write_gguf(file.path(), {{"tokenizer.ggml.tokens", GGUFMeta::string_array(tokens)}},
             {{"w", kernels::QType::F32, {4}, w, 16}});
  const GGUFFile head = GGUFFile::open_header(file.path());
  const auto& got = head.get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(got.size(), tokens.size());
  EXPECT_EQ(got[99999], "tok99999");
  EXPECT_EQ(head.at("w").offset, 0u);
  EXPECT_EQ(head.data_offset(), GGUFFile::open(file.path()).data_offset());
}

TEST(GgufRead, VersionTwoReadsAsVersionThree) {
  const SampleFile s;
  Bytes bytes;
  {
    const GGUFFile f = GGUFFile::open(s.file.path());
    bytes.assign(f.mapping()->data(), f.mapping()->data() + f.file_size());
  }
  bytes[4] = 2;  // the version: v2 and v3 share the layout (v3 added big-endian files)
  const GGUFFile f = GGUFFile::parse(bytes, "v2.gguf");
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(metadata_of(f), s.metadata);
  expect_same_tensors(f, s.tensors, true);
}

TEST(GgufRead, TypedGetters) {
  const SampleFile s;
  const GGUFFile f = GGUFFile::open(s.file.path());
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_int("s.u8"), 255);
  EXPECT_EQ(f.get_int("s.i8"), -128);
  EXPECT_EQ(f.get_int("s.u32"), 4294967295ll);
  EXPECT_EQ(f.get_int("s.i64"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(f.value("s.u64").as_uint(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_FLOAT_EQ(static_cast<float>(f.get_float("s.f32")), 1e-5f);
  EXPECT_EQ(f.get_float("s.f64"), -1.0 / 3.0);
  EXPECT_TRUE(f.get_bool("s.true"));
  EXPECT_FALSE(f.get_bool("s.false"));
  EXPECT_EQ(f.get_string("s.empty_string"), "");
  EXPECT_EQ(f.get_string_array("a.strings")[1], "\u0120the");
  EXPECT_EQ(f.get_int_array("a.i32"), (std::vector<std::int64_t>{3, -1, 0, 2147483647}));
  EXPECT_EQ(f.get_int_array("a.u64"), (std::vector<std::int64_t>{0, 1ll << 62}));
  EXPECT_EQ(f.get_float_array("a.f32"), (std::vector<double>{0.5, -2.25, static_cast<double>(1e30f)}));
  EXPECT_TRUE(f.get_int_array("a.empty").empty());
  const GGUFValue& nested = f.value("a.nested");
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ(nested.array_at(0)->element(1)->as_int(), 2);
  EXPECT_EQ(nested.array_at(1)->size(), 0u);
  EXPECT_EQ(nested.array_at(3), nullptr);
  EXPECT_EQ(f.value("a.deep").array_at(0)->array_at(0)->element(0)->as_float(), 1.0);
  EXPECT_EQ(f.find_int("no.such.key"), std::nullopt);
  EXPECT_EQ(f.find_string("general.architecture"), "llama");
  EXPECT_EQ(f.value("a.strings").describe(), "an array of 5 string");
}

TEST(GgufRead, GetterErrorsNameTheKeyAndTheTypeFound) {
  const SampleFile s;
  const GGUFFile f = GGUFFile::open(s.file.path());
  auto fails = [&](auto&& call, std::initializer_list<std::string> want) {
    try {
      call();
      ADD_FAILURE() << "no error";
    } catch (const qkv::FormatError& e) {
      expect_message(e.what(), s.file.path(), want);
    }
  };
  fails([&] { f.get_int("llama.block_count"); }, {"GGUF metadata has no key 'llama.block_count'"});
  fails([&] { f.get_int("general.architecture"); },
        {"GGUF key 'general.architecture' is a string 'llama', expected an integer"});
  fails([&] { f.find_int("s.f32"); }, {"GGUF key 's.f32' is an f32 9.99999975e-06, expected an integer"});
  fails([&] { f.get_int("s.u64"); }, {"GGUF key 's.u64' is a u64 18446744073709551615", "fits in int64"});
  fails([&] { f.get_float("s.u32"); }, {"GGUF key 's.u32' is a u32 4294967295, expected an f32 or f64"});
  fails([&] { f.get_bool("s.u8"); }, {"GGUF key 's.u8' is a u8 255, expected a bool"});
  fails([&] { f.get_string("a.strings"); }, {"GGUF key 'a.strings' is an array of 5 string, expected a string"});
  fails([&] { f.get_string_array("a.i32"); }, {"GGUF key 'a.i32' is an array of 4 i32, expected an array of string"});
  fails([&] { f.get_int_array("a.f32"); }, {"GGUF key 'a.f32' is an array of 3 f32, expected an array of integers"});
  fails([&] { f.get_float_array("s.true"); }, {"GGUF key 's.true' is a bool true, expected an array of f32 or f64"});
  fails([&] { f.at("blk.9.attn_q.weight"); }, {"no tensor named 'blk.9.attn_q.weight'", "14 tensors"});
}

TEST(GgufRead, AFileWithNoTensorsAndNoMetadata) {
  const TempFile file("nothing.gguf");
  write_gguf(file.path(), {}, {});
  const GGUFFile f = GGUFFile::open(file.path());
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.file_size(), 32u);  // 24 bytes of header, padded
}

TEST(GgufRead, OpenErrorsNameThePath) {
  const std::string missing = "/nonexistent/dir/model.gguf";
  for (int header_only = 0; header_only < 2; ++header_only) {
    try {
      header_only ? GGUFFile::open_header(missing) : GGUFFile::open(missing);
      ADD_FAILURE() << "opened a missing file";
    } catch (const qkv::FormatError& e) {
      ADD_FAILURE() << "a missing file is an IOError, not a FormatError: " << e.what();
    } catch (const qkv::IOError& e) {
      expect_message(e.what(), missing, {"cannot read GGUF file", "No such file"});
    }
    try {
      header_only ? GGUFFile::open_header("/tmp") : GGUFFile::open("/tmp");
      ADD_FAILURE() << "opened a directory";
    } catch (const qkv::IOError& e) {
      expect_message(e.what(), "/tmp", {"it is a directory"});
    }
  }
  const TempFile empty("empty.gguf");
  empty.write({});
  try {
    GGUFFile::open(empty.path());
    ADD_FAILURE() << "an empty file";
  } catch (const qkv::FormatError& e) {
    expect_message(e.what(), empty.path(), {"0 bytes, shorter than the 4-byte magic"});
  }
}

}  // namespace
}  // namespace qkv::io::test
