// Strict safetensors reader: valid files (including PyTorch's), and one test
// per rejection rule of REFERENCES.md section 3, each building the corrupt
// bytes itself and checking the FormatError names the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>

#include "safetensors_test_util.h"

namespace qkv::io::test {
namespace {

// A valid two-tensor header: a F32 [2] at [0,8), b U8 [3] at [8,11).
const std::string kAB =
    R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";

// ------------------------------------------------------------- valid files --

TEST(SafetensorsRead, MinimalValidFile) {
  Bytes data = bytes_of<float>({1.5f, -2.0f});
  data.insert(data.end(), {7, 8, 9});
  const SafetensorsFile f = SafetensorsFile::parse(make_file(kAB, data), "ok.safetensors");
  ASSERT_EQ(f.tensors().size(), 2u);
  const StTensorInfo& a = f.at("a");
  EXPECT_EQ(a.dtype, StDType::F32);
  EXPECT_EQ(a.shape, (Shape{2}));
  EXPECT_EQ(a.begin, 0u);
  EXPECT_EQ(a.end, 8u);
  float v[2];
  std::memcpy(v, f.data(a), 8);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(tensor_bytes(f, f.at("b")), (Bytes{7, 8, 9}));
  EXPECT_EQ(f.header_size() % 8, 0u);
  EXPECT_EQ(f.file_size(), 8 + f.header_size() + 11);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.source(), "ok.safetensors");
}

TEST(SafetensorsRead, EmptyHeaderObjectAndEmptyMetadataAreValid) {
  EXPECT_TRUE(SafetensorsFile::parse(make_file("{}"), "x").tensors().empty());
  const SafetensorsFile f = SafetensorsFile::parse(make_file(R"({"__metadata__":{}})"), "x");
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST(SafetensorsRead, ScalarsAndEmptyTensorsAreValid) {
  // rank 0 (1 element), [0,4] and [3,0] (0 bytes), all at sensible offsets;
  // two empty tensors share offset 4 with the start of nothing.
  const std::string h =
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("e1":{"dtype":"F32","shape":[0,4],"data_offsets":[4,4]},)"
      R"("e0":{"dtype":"I64","shape":[3,0],"data_offsets":[4,4]}})";
  const SafetensorsFile f = SafetensorsFile::parse(make_file(h, bytes_of<float>({3.25f})), "x");
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "s");
  EXPECT_EQ(f.tensors()[1].name, "e0");  // ties at [4,4] ordered by name
  EXPECT_EQ(f.tensors()[2].name, "e1");
  EXPECT_EQ(f.at("s").shape, Shape{});
  EXPECT_EQ(f.at("s").numel(), 1);
  EXPECT_EQ(f.at("e1").numel(), 0);
  EXPECT_EQ(f.at("e0").nbytes(), 0u);
  float s;
  std::memcpy(&s, f.data(f.at("s")), 4);
  EXPECT_EQ(s, 3.25f);
}

TEST(SafetensorsRead, HeaderOrderNeedNotBeOffsetOrder) {
  const std::string h =
      R"({"late":{"dtype":"U8","shape":[2],"data_offsets":[3,5]},"early":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  const SafetensorsFile f = SafetensorsFile::parse(make_file(h, {1, 2, 3, 4, 5}), "x");
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "early");
  EXPECT_EQ(f.tensors()[1].name, "late");
  EXPECT_EQ(tensor_bytes(f, f.at("late")), (Bytes{4, 5}));
}

TEST(SafetensorsRead, WhitespaceAndUnpaddedHeadersAreAccepted) {
  // Other writers pretty-print or do not pad; the format does not require it.
  const std::string h = "\n { \"__metadata__\" : { \"k\" : \"v\" } ,\n\t\"a\" : { \"dtype\" : \"U8\" , "
                        "\"shape\" : [ 1 ] , \"data_offsets\" : [ 0 , 1 ] } }\r\n";
  const SafetensorsFile f = SafetensorsFile::parse(make_file(h, {42}, /*pad=*/false), "x");
  EXPECT_EQ(f.metadata().at("k"), "v");
  EXPECT_EQ(tensor_bytes(f, f.at("a")), Bytes{42});
}

TEST(SafetensorsRead, FindAndAt) {
  const SafetensorsFile f = SafetensorsFile::parse(make_file(kAB, zeros(11)), "model.safetensors");
  EXPECT_NE(f.find("a"), nullptr);
  EXPECT_EQ(f.find("zzz"), nullptr);
  try {
    f.at("encoder.missing.weight");
    FAIL() << "at() of a missing tensor must throw";
  } catch (const qkv::FormatError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("encoder.missing.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  }
}

TEST(SafetensorsRead, DTypeTable) {
  const std::pair<StDType, std::size_t> sizes[] = {
      {StDType::BOOL, 1}, {StDType::U8, 1},  {StDType::I8, 1},   {StDType::I16, 2}, {StDType::U16, 2},
      {StDType::F16, 2},  {StDType::BF16, 2}, {StDType::I32, 4}, {StDType::U32, 4}, {StDType::F32, 4},
      {StDType::F64, 8},  {StDType::I64, 8}, {StDType::U64, 8}};
  for (auto [dt, size] : sizes) {
    EXPECT_EQ(st_dtype_size(dt), size) << st_dtype_name(dt);
    EXPECT_EQ(st_dtype_from_name(st_dtype_name(dt)), dt);
  }
  EXPECT_STREQ(st_dtype_name(StDType::BF16), "BF16");
  EXPECT_STREQ(st_dtype_name(StDType::BOOL), "BOOL");
  EXPECT_FALSE(st_dtype_from_name("f32"));
  EXPECT_FALSE(st_dtype_from_name("F8_E4M3"));
}

TEST(SafetensorsRead, OpenMissingFileIsIOErrorNamingThePath) {
  const std::string p = "/nonexistent-qkv-dir/model.safetensors";
  try {
    SafetensorsFile::open(p);
    FAIL() << "open of a missing file must throw";
  } catch (const qkv::FormatError& e) {
    FAIL() << "a missing file is an IOError, not a FormatError: " << e.what();
  } catch (const qkv::IOError& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  ScratchDir dir;
  EXPECT_THROW(SafetensorsFile::open(dir.path()), qkv::IOError);  // a directory
}

TEST(SafetensorsRead, OpenReadsAFileAndNamesItInErrors) {
  ScratchDir dir;
  write_all(dir / "ok.safetensors", make_file(kAB, zeros(11)));
  EXPECT_EQ(SafetensorsFile::open(dir / "ok.safetensors").tensors().size(), 2u);
  write_all(dir / "cut.safetensors", make_file(kAB, zeros(10)));
  try {
    SafetensorsFile::open(dir / "cut.safetensors");
    FAIL() << "truncated file must be rejected";
  } catch (const qkv::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "cut.safetensors"), std::string::npos) << e.what();
  }
}

// --------------------------------------- PyTorch's `safetensors` reference --

// tests/fixtures/safetensors_ref.safetensors, written by
// tests/reference/make_safetensors_fixture.py with safetensors.numpy.save_file.
TEST(ReferenceFile, ReadsWhatPythonWrote) {
  const SafetensorsFile f = SafetensorsFile::open(QKV_FIXTURE_DIR "/safetensors_ref.safetensors");
  EXPECT_EQ((8 + f.header_size()) % 8, 0u);
  EXPECT_EQ(f.metadata().size(), 1u);
  EXPECT_EQ(f.metadata().at("config"), "{\"d_model\": 16, \"note\": \"tab\\t \xc3\xa9\"}");
  ASSERT_EQ(f.tensors().size(), 7u);

  const StTensorInfo& w = f.at("w");
  EXPECT_EQ(w.dtype, StDType::F32);
  EXPECT_EQ(w.shape, (Shape{2, 3}));
  float wv[6];
  std::memcpy(wv, f.data(w), sizeof wv);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(wv[i], i * 0.5f - 1.0f);

  EXPECT_EQ(tensor_bytes(f, f.at("ids")), bytes_of<std::int64_t>({-3, 0, 7}));
  EXPECT_EQ(f.at("half").dtype, StDType::F16);
  EXPECT_EQ(tensor_bytes(f, f.at("half")), bytes_of<std::uint16_t>({0x3E00, 0xC000}));  // 1.5, -2.0
  EXPECT_EQ(f.at("mask").dtype, StDType::BOOL);
  EXPECT_EQ(tensor_bytes(f, f.at("mask")), (Bytes{1, 0, 0, 1}));
  EXPECT_EQ(f.at("scalar").shape, Shape{});
  EXPECT_EQ(tensor_bytes(f, f.at("scalar")), Bytes{42});
  EXPECT_EQ(f.at("empty").shape, (Shape{0, 4}));
  EXPECT_EQ(f.at("empty").nbytes(), 0u);
  EXPECT_EQ(tensor_bytes(f, f.at("d")), bytes_of<double>({3.141592653589793}));
}

// Our writer, given the same tensors in the order the Python writer lays them
// out (dtype descending, then name), produces the identical file.
TEST(ReferenceFile, WriterReproducesPythonBytes) {
  const Bytes ref = read_all(QKV_FIXTURE_DIR "/safetensors_ref.safetensors");
  ASSERT_FALSE(ref.empty());
  const SafetensorsFile f = SafetensorsFile::parse(ref, "ref");
  std::vector<StTensorView> views;
  for (const StTensorInfo& t : f.tensors()) views.push_back({t.name, t.dtype, t.shape, f.data(t), t.nbytes()});
  ScratchDir dir;
  write_safetensors(dir / "ours.safetensors", views, f.metadata());
  const Bytes ours = read_all(dir / "ours.safetensors");
  EXPECT_EQ(std::string(ours.begin(), ours.end()), std::string(ref.begin(), ref.end()));
}

// ------------------------------------------------- one test per rejection --

TEST(SafetensorsReject, FileShorterThan8Bytes) {
  for (std::size_t n = 0; n < 8; ++n) rejected(Bytes(n, 0), {"shorter than the 8-byte"});
}

TEST(SafetensorsReject, HeaderLengthOverLimit) {
  rejected(make_raw(100'000'001, "{}"), {"header length 100000001", "exceeds the limit"});
  rejected(make_raw(std::numeric_limits<std::uint64_t>::max(), "{}"), {"exceeds the limit"});
}

TEST(SafetensorsReject, HeaderLengthPastEndOfFile) {
  rejected(make_raw(64, "{}      "), {"header length 64", "runs past the end", "only 8 bytes"});
  rejected(make_raw(1, ""), {"runs past the end"});
}

TEST(SafetensorsReject, HeaderNotUtf8) {
  rejected(make_file("{\"__metadata__\":{\"k\":\"\xff\"}}"), {"not valid UTF-8", "0xff"});
  rejected(make_file("{\"\xc0\xaf\":1}"), {"not valid UTF-8"});      // overlong '/'
  rejected(make_file("{\"\xed\xa0\x80\":1}"), {"not valid UTF-8"});  // UTF-16 surrogate
  rejected(make_file("{\"\xe2\x82\":1}"), {"not valid UTF-8"});      // cut sequence
}

TEST(SafetensorsReject, HeaderNotJson) {
  rejected(make_file(R"({"a":{"dtype":"F32")"), {"not valid JSON"});  // cut short
  rejected(make_file("{'a':1}"), {"not valid JSON"});
  rejected(make_file("{} x"), {"not valid JSON"});                                  // trailing garbage
  rejected(make_raw(8, std::string("{}\0\0\0\0\0\0", 8)), {"not valid JSON", "NUL byte at header offset 2"});
  rejected(make_raw(8, std::string("{}\0 junk", 8)), {"NUL byte"});  // nlohmann alone stops at the NUL
  rejected(make_file("{/*c*/}"), {"not valid JSON"});                               // no comments
  rejected(make_file("{\"__metadata__\":{\"k\":\"a\tb\"}}"), {"not valid JSON"});  // raw tab in string
  rejected(make_raw(0, ""), {"header is empty"});
  rejected(make_file("\xef\xbb\xbf{}"), {"byte-order mark"});
}

TEST(SafetensorsReject, HeaderNotAnObject) {
  rejected(make_file("[]"), {"not a JSON object", "array"});
  rejected(make_file("\"F32\""), {"not a JSON object", "string"});
  rejected(make_file("12"), {"not a JSON object", "number"});
  rejected(make_file("null"), {"not a JSON object", "null"});
  // Hostile nesting is rejected at the first bracket, without recursion.
  rejected(make_file(std::string(1'000'000, '[')), {"not a JSON object"});
}

TEST(SafetensorsReject, MetadataNotAnObject) {
  rejected(make_file(R"({"__metadata__":["k","v"]})"), {"__metadata__ is not an object", "array"});
  rejected(make_file(R"({"__metadata__":null})"), {"__metadata__ is not an object", "null"});
  rejected(make_file(R"({"__metadata__":"k=v"})"), {"__metadata__ is not an object", "string"});
}

TEST(SafetensorsReject, MetadataValueNotAString) {
  rejected(make_file(R"({"__metadata__":{"epoch":3}})"), {"__metadata__ value for key 'epoch' is not a string"});
  rejected(make_file(R"({"__metadata__":{"cfg":{"d":1}}})"), {"key 'cfg' is not a string", "object"});
  rejected(make_file(R"({"__metadata__":{"ok":"x","flag":true}})"), {"key 'flag'", "boolean"});
  rejected(make_file("{\"__metadata__\":{\"deep\":" + std::string(100'000, '[') + "}}"), {"key 'deep'", "array"});
}

TEST(SafetensorsReject, DuplicateMetadataKeyOrBlock) {
  rejected(make_file(R"({"__metadata__":{"k":"1","k":"2"}})"), {"__metadata__ has the key 'k' twice"});
  rejected(make_file(R"({"__metadata__":{},"__metadata__":{}})"), {"\"__metadata__\" twice"});
}

TEST(SafetensorsReject, EntryNotAnObject) {
  rejected(make_file(R"({"w":[0,4]})"), {"tensor 'w'", "not an object", "array"});
  rejected(make_file(R"({"w":"F32"})"), {"tensor 'w'", "not an object", "string"});
}

TEST(SafetensorsReject, EntryMissingKey) {
  rejected(make_file(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", zeros(4)), {"tensor 'w'", "missing key \"dtype\""});
  rejected(make_file(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", zeros(4)), {"tensor 'w'", "missing key \"shape\""});
  rejected(make_file(R"({"w":{"dtype":"F32","shape":[1]}})", zeros(4)), {"tensor 'w'", "missing key \"data_offsets\""});
  rejected(make_file(R"({"w":{}})"), {"tensor 'w'", "missing key"});
}

TEST(SafetensorsReject, EntryExtraKey) {
  rejected(make_file(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"strides":[1]}})", zeros(4)),
           {"tensor 'w'", "unexpected key 'strides'"});
}

TEST(SafetensorsReject, EntryDuplicateKey) {
  // serde (the Rust reader) rejects this too; nlohmann's DOM would keep the last.
  rejected(make_file(R"({"w":{"dtype":"F64","shape":[1],"dtype":"F32","data_offsets":[0,4]}})", zeros(4)),
           {"tensor 'w'", "key 'dtype' appears twice"});
}

TEST(SafetensorsReject, UnknownDType) {
  auto with = [](const std::string& dt) {
    return make_file(R"({"w":{"dtype":")" + dt + R"(","shape":[1],"data_offsets":[0,4]}})", zeros(4));
  };
  rejected(with("F9"), {"tensor 'w'", "unknown dtype 'F9'"});
  rejected(with("f32"), {"unknown dtype 'f32'"});
  rejected(with(""), {"unknown dtype ''"});
  rejected(with("F8_E4M3"), {"tensor 'w'", "'F8_E4M3'", "does not support"});
  rejected(make_file(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", zeros(4)),
           {"tensor 'w'", "dtype is not a string"});
}

TEST(SafetensorsReject, ShapeNotAListOfNonNegativeIntegers) {
  auto with = [](const std::string& shape) {
    return make_file(R"({"w":{"dtype":"U8","shape":)" + shape + R"(,"data_offsets":[0,2]}})", zeros(2));
  };
  rejected(with("[-2]"), {"tensor 'w'", "negative dimension -2"});
  rejected(with("[2.0]"), {"tensor 'w'", "shape is not a list of non-negative integers", "2.0"});
  rejected(with("[1e0]"), {"shape is not a list"});
  rejected(with("[\"2\"]"), {"shape is not a list", "string"});
  rejected(with("[[2]]"), {"shape is not a list", "array"});
  rejected(with("[null]"), {"shape is not a list", "null"});
  rejected(with("2"), {"tensor 'w'", "shape is not a list"});
  rejected(with("{}"), {"shape is not a list", "object"});
  rejected(with("[9223372036854775808]"), {"tensor 'w'", "dimension 9223372036854775808 is too large"});
  rejected(with("[184467440737095516160]"), {"tensor 'w'", "not an integer that fits in 64 bits"});
}

TEST(SafetensorsReject, ElementCountTimesSizeOverflows) {
  // 2^32 * 2^32 elements overflow u64; so does 2^62 elements of 8 bytes.
  rejected(make_file(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
           {"tensor 'w'", "more bytes than fit in 64 bits"});
  rejected(make_file(R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})"),
           {"tensor 'w'", "more bytes than fit in 64 bits"});
  // A zero dim anywhere makes the product 0: valid, not an overflow (the Rust reader agrees).
  EXPECT_NO_THROW(SafetensorsFile::parse(
      make_file(R"({"w":{"dtype":"F64","shape":[9223372036854775807,0,9223372036854775807],"data_offsets":[0,0]}})"), "x"));
}

TEST(SafetensorsReject, DataOffsetsNotTwoNonNegativeIntegers) {
  auto with = [](const std::string& off) {
    return make_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":)" + off + "}}", zeros(4));
  };
  rejected(with("[4]"), {"tensor 'w'", "data_offsets has 1 value;"});
  rejected(with("[]"), {"data_offsets has 0 values"});
  rejected(with("[0,4,8]"), {"tensor 'w'", "more than two values"});
  rejected(with("[-1,3]"), {"tensor 'w'", "data_offsets is not a list of two non-negative integers", "-1"});
  rejected(with("[0,4.0]"), {"data_offsets is not a list", "4.0"});
  rejected(with("\"0,4\""), {"data_offsets is not a list", "string"});
  rejected(with("[0,18446744073709551616]"), {"not an integer that fits in 64 bits"});
}

TEST(SafetensorsReject, DataOffsetsRunBackwards) {
  rejected(make_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})", zeros(4)),
           {"tensor 'w'", "data_offsets [4,0] run backwards"});
}

TEST(SafetensorsReject, ByteCountDoesNotMatchShape) {
  rejected(make_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", zeros(20)),
           {"tensor 'w'", "[0,20] hold 20 bytes", "F32 [2,3] needs 24"});
  rejected(make_file(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,0]}})"), {"tensor 's'", "needs 8"});
}

TEST(SafetensorsReject, HoleAtStart) {
  rejected(make_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", zeros(8)),
           {"hole", "first tensor 'w' begins at data offset 4"});
}

TEST(SafetensorsReject, HoleBetweenTensors) {
  rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                     zeros(10)),
           {"hole", "bytes [4,6]", "tensor 'a'", "tensor 'b'"});
}

TEST(SafetensorsReject, OverlappingTensors) {
  rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                     zeros(6)),
           {"tensor 'b' data_offsets [2,6] overlap tensor 'a'"});
  // The same bytes claimed twice by two names.
  rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                     zeros(4)),
           {"overlap"});
}

TEST(SafetensorsReject, TruncatedData) {
  Bytes full = make_file(kAB, zeros(11));
  for (std::size_t cut = 1; cut <= 11; ++cut) {
    Bytes b(full.begin(), full.end() - static_cast<std::ptrdiff_t>(cut));
    rejected(b, {"tensor 'b' ends at data offset 11", "truncated"});
  }
}

TEST(SafetensorsReject, TrailingBytes) {
  rejected(make_file(kAB, zeros(12)), {"1 trailing byte after the last tensor 'b'"});
  rejected(make_file("{}", zeros(3)), {"3 trailing bytes", "lists no tensors"});
}

TEST(SafetensorsReject, DuplicateTensorNames) {
  // Offsets that would tile perfectly: only the duplicate is wrong. A DOM
  // parser keeping the last key would silently accept this file.
  rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                     zeros(8)),
           {"duplicate tensor name 'a'"});
  // Byte-identical duplicate entries, too.
  const std::string e = R"("w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]})";
  rejected(make_file("{" + e + "," + e + "}", zeros(4)), {"duplicate tensor name 'w'"});
}

TEST(SafetensorsReject, HostileNamesStayOnOneShortLine) {
  // Control characters and quotes are escaped; long names are shortened.
  std::string msg = rejected(
      make_file("{\"evil\\nname\\u0001'\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}"),
      {"tensor 'evil\\nname\\x01\\''", "unknown dtype"});
  const std::string longname(100'000, 'n');
  msg = rejected(make_file("{\"" + longname + "\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}"),
                 {"(100000 bytes)"});
  EXPECT_LT(msg.size(), 600u);
  // A 5000-digit number: rejected (as a JSON number overflow), message kept short.
  msg = rejected(make_file("{\"a\":{\"dtype\":\"U8\",\"shape\":[" + std::string(5000, '9') + "]}}"),
                 {"header"});
  EXPECT_LT(msg.size(), 600u);
}

}  // namespace
}  // namespace qkv::io::test
