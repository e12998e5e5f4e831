// The strict GGUF reader on broken files: one file per rule of io/gguf.h, each a FormatError
// naming the file and the item (the metadata key or entry, the tensor), the same through
// parse(), open() and open_header().
#include <limits>

#include "gguf_test_util.h"

namespace qkv::io::test {
namespace {

constexpr std::uint32_t F32 = 0, Q4_1 = 3, Q8_0 = 8;

// A valid file: metadata {a: u32 7}, tensor w F32 [4] at 0 (16 bytes, padded to 32).
GgufBytes valid_head() {
  GgufBytes g = GgufBytes::header(1, 1);
  g.kv_u32("a", 7).tensor("w", {4}, F32, 0).pad();
  return g;
}

TEST(GgufReject, TheValidBaseFileIsAccepted) {
  GgufBytes g = valid_head();
  g.zeros(32);
  const GGUFFile f = GGUFFile::parse(g.b, kGgufSource);
  EXPECT_EQ(f.get_int("a"), 7);
  EXPECT_EQ(f.at("w").nbytes, 16u);
  g.b.resize(g.b.size() - 16);  // without the last tensor's padding: still valid
  EXPECT_NO_THROW(GGUFFile::parse(g.b, kGgufSource));
}

TEST(GgufReject, BadMagicOrTooShort) {
  gguf_rejected({'G', 'G'}, {"2 bytes", "shorter than the 4-byte magic"});
  Bytes safetensors = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  gguf_rejected(safetensors, {"bad magic", "a GGUF file starts with 'GGUF'"});
}

TEST(GgufReject, VersionsOtherThanTwoAndThree) {
  gguf_rejected(GgufBytes::header(0, 0, 1).b, {"GGUF version 1 is not supported", "32-bit"});
  gguf_rejected(GgufBytes::header(0, 0, 4).b, {"unsupported GGUF version 4", "versions 2 and 3"});
  gguf_rejected(GgufBytes::header(0, 0, 0x03000000).b, {"unsupported GGUF version 50331648", "big-endian"});
  EXPECT_NO_THROW(GGUFFile::parse(GgufBytes::header(0, 0, 2).b, kGgufSource));
  EXPECT_NO_THROW(GGUFFile::parse(GgufBytes::header(0, 0, 3).b, kGgufSource));
  gguf_rejected(GgufBytes().raw("GGUF").u32(3).u32(0).b, {"the tensor count runs past the end"});
}

TEST(GgufReject, CountsBoundedByTheBytesLeft) {
  gguf_rejected(GgufBytes::header(0, std::uint64_t{1} << 40).b, {"metadata count 1099511627776 is impossible"});
  gguf_rejected(GgufBytes::header(std::uint64_t{1} << 62, 0).b, {"tensor count 4611686018427387904 is impossible"});
  GgufBytes both = GgufBytes::header(1, 1);
  both.zeros(36);  // room for one or the other, not both (13 + 24 bytes)
  gguf_rejected(both.b, {"1 metadata entries and 1 tensor infos cannot fit"});
}

TEST(GgufReject, LengthsPastTheEnd) {
  GgufBytes key = GgufBytes::header(0, 1);
  key.u64(1000).raw("abcdefghijklm");
  gguf_rejected(key.b, {"metadata entry 0 of 1: the key has length 1000", "runs past the end"});
  GgufBytes value = GgufBytes::header(0, 1);
  value.str("general.name").u32(8).u64(std::uint64_t{1} << 63);
  gguf_rejected(value.b, {"metadata key 'general.name': the string has length 9223372036854775808"});
  GgufBytes array = GgufBytes::header(0, 1);
  array.str("tokenizer.ggml.token_type").u32(9).u32(5).u64(std::uint64_t{1} << 40).zeros(16);
  gguf_rejected(array.b, {"metadata key 'tokenizer.ggml.token_type'", "array of 1099511627776 i32",
                          "runs past the end"});
  GgufBytes strings = GgufBytes::header(0, 1);
  strings.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(3).str("a").str("b").u64(50).raw("c");
  gguf_rejected(strings.b, {"metadata key 'tokenizer.ggml.tokens': array element 2 has length 50"});
  GgufBytes scalar = GgufBytes::header(0, 1);
  scalar.str("x").u32(10).u32(1);  // a u64 with 4 bytes
  gguf_rejected(scalar.b, {"metadata key 'x': the u64 value runs past the end"});
  GgufBytes name = GgufBytes::header(1, 0);
  name.u64(99).zeros(30);
  gguf_rejected(name.b, {"tensor info 0 of 1: the name has length 99"});
  GgufBytes dims = GgufBytes::header(1, 0);
  dims.str("w").u32(4).u64(1).u64(1).zeros(6);
  gguf_rejected(dims.b, {"tensor 'w': dim 2 runs past the end"});
}

TEST(GgufReject, UnknownValueTypesAndBadBools) {
  GgufBytes top = GgufBytes::header(0, 1);
  top.str("general.thing").u32(13).u64(0);
  gguf_rejected(top.b, {"metadata key 'general.thing': unknown value type 13"});
  GgufBytes elem = GgufBytes::header(0, 1);
  elem.str("general.list").u32(9).u32(99).u64(0);
  gguf_rejected(elem.b, {"metadata key 'general.list': array element type: unknown value type 99"});
  GgufBytes b = GgufBytes::header(0, 1);
  b.str("tokenizer.ggml.add_bos_token").u32(7).u8(2);
  gguf_rejected(b.b, {"metadata key 'tokenizer.ggml.add_bos_token': bool value 2 is neither 0 nor 1"});
  GgufBytes ba = GgufBytes::header(0, 1);
  ba.str("flags").u32(9).u32(7).u64(3).u8(1).u8(0).u8(9);
  gguf_rejected(ba.b, {"metadata key 'flags': array element 2: bool value 9"});
}

TEST(GgufReject, StringsThatAreNotUtf8) {
  GgufBytes key = GgufBytes::header(0, 1);
  key.str("bad\xff").u32(4).u32(1);
  gguf_rejected(key.b, {"metadata entry 0 of 1: the key is not valid UTF-8 (byte 0xff at string offset 3)"});
  GgufBytes value = GgufBytes::header(0, 1);
  value.str("general.name").u32(8).str("\xc3(");
  gguf_rejected(value.b, {"metadata key 'general.name': the string is not valid UTF-8"});
  GgufBytes token = GgufBytes::header(0, 1);
  token.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(2).str("ok").str("\xed\xa0\x80");  // a surrogate
  gguf_rejected(token.b, {"metadata key 'tokenizer.ggml.tokens': array element 1 is not valid UTF-8"});
  GgufBytes name = GgufBytes::header(1, 0);
  name.str("w\x80").u32(1).u64(4).u32(F32).u64(0).pad().zeros(16);
  gguf_rejected(name.b, {"tensor info 0 of 1: the name is not valid UTF-8"});
}

TEST(GgufReject, ArraysNestedTooDeep) {
  GgufBytes g = GgufBytes::header(0, 1);
  g.str("deep").u32(9);
  for (int i = 0; i < kGGUFMaxArrayDepth; ++i) g.u32(9).u64(1);  // array of array of ...
  g.u32(4).u64(0);
  gguf_rejected(g.b, {"metadata key 'deep'", "nested more than 8 deep"});
}

TEST(GgufReject, DuplicateKeysAndTensorNames) {
  GgufBytes keys = GgufBytes::header(0, 3);
  keys.kv_u32("a", 1).kv_str("b", "x").kv_u32("a", 2);
  gguf_rejected(keys.b, {"duplicate metadata key 'a' (entries 0 and 2)"});
  GgufBytes names = GgufBytes::header(2, 0);
  names.tensor("w", {8}, F32, 0).tensor("w", {8}, F32, 32).pad().zeros(64);
  gguf_rejected(names.b, {"duplicate tensor name 'w' (tensor infos 0 and 1)"});
}

TEST(GgufReject, Alignment) {
  GgufBytes type = GgufBytes::header(0, 1);
  type.str("general.alignment").u32(10).u64(32);
  gguf_rejected(type.b, {"metadata key 'general.alignment' is a u64 32, expected a u32"});
  for (std::uint32_t a : {0u, 48u, 131072u}) {
    GgufBytes g = GgufBytes::header(0, 1);
    g.kv_u32("general.alignment", a);
    gguf_rejected(g.b, {"metadata key 'general.alignment' is " + std::to_string(a), "power of two from 1 to 65536"});
  }
  // A valid alignment of 64: the data section and the offsets follow it.
  GgufBytes ok = GgufBytes::header(2, 1);
  ok.kv_u32("general.alignment", 64).tensor("a", {4}, F32, 0).tensor("b", {4}, F32, 64).pad(64).zeros(80);
  const GGUFFile f = GGUFFile::parse(ok.b, kGgufSource);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  GgufBytes off = GgufBytes::header(2, 1);
  off.kv_u32("general.alignment", 64).tensor("a", {4}, F32, 0).tensor("b", {4}, F32, 32).pad(64).zeros(80);
  gguf_rejected(off.b, {"tensor 'b': offset 32 is not a multiple of the alignment 64"});
}

TEST(GgufReject, TensorDims) {
  GgufBytes five = GgufBytes::header(1, 0);
  five.tensor("blk.0.x", {1, 1, 1, 1, 1}, F32, 0).pad().zeros(32);
  gguf_rejected(five.b, {"tensor 'blk.0.x' has 5 dims; GGUF allows at most 4"});
  GgufBytes big = GgufBytes::header(1, 0);
  big.tensor("w", {std::uint64_t{1} << 63}, F32, 0).pad().zeros(32);
  gguf_rejected(big.b, {"tensor 'w': dim 0 is 9223372036854775808, beyond int64"});
  GgufBytes product = GgufBytes::header(1, 0);
  product.tensor("w", {std::uint64_t{1} << 32, std::uint64_t{1} << 32}, F32, 0).pad().zeros(32);
  gguf_rejected(product.b, {"tensor 'w': dims [4294967296,4294967296] hold more elements than fit in int64"});
  // Elements that fit in int64 but bytes that do not (found by fuzz_gguf: 2^62 + 1 F32 elements
  // wrapped to 4 bytes in u64, and the tensor was accepted with 4 bytes of data).
  GgufBytes bytes = GgufBytes::header(1, 0);
  bytes.tensor("w", {(std::uint64_t{1} << 62) + 1}, F32, 0).pad().zeros(32);
  gguf_rejected(bytes.b, {"tensor 'w': dims [4611686018427387905] of type F32 take more bytes than fit in int64"});
  // An empty tensor's other dims may be anything; numel() is 0, not an overflow (found by fuzz_gguf).
  GgufBytes empty = GgufBytes::header(1, 0);
  empty.tensor("e", {std::uint64_t{1} << 62, std::uint64_t{1} << 62, 0}, F32, 0).pad();
  const GGUFFile f = GGUFFile::parse(empty.b, kGgufSource);
  EXPECT_EQ(f.at("e").numel(), 0);
  EXPECT_EQ(f.at("e").rows(), 0);
  EXPECT_EQ(f.at("e").nbytes, 0u);
}

TEST(GgufReject, TensorTypes) {
  // A GGML type qkv does not compute with (IQ2_XXS: 66 bytes per 256 values) is read and laid out
  // like any other; its data is refused, naming the tensor, its type and the types qkv computes with.
  GgufBytes iq = GgufBytes::header(2, 0);
  iq.tensor("blk.0.attn_q.weight", {256, 2}, 16, 0).tensor("m", {64}, 40, 160).pad().zeros(160).zeros(36);
  const GGUFFile f = GGUFFile::parse(iq.b, kGgufSource);
  const GGUFTensorInfo& q = f.at("blk.0.attn_q.weight");
  EXPECT_FALSE(q.computable());
  EXPECT_EQ(q.type_name(), "IQ2_XXS");
  EXPECT_EQ(q.nbytes, 132u);
  EXPECT_EQ(f.at("m").type_name(), "NVFP4");
  EXPECT_EQ(f.at("m").nbytes, 36u);
  std::string msg;
  try {
    f.data(q);
  } catch (const FormatError& e) {
    msg = e.what();
  }
  expect_message(msg, kGgufSource,
                 {"tensor 'blk.0.attn_q.weight' has type IQ2_XXS, which qkv cannot compute with",
                  "(it computes with F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, "
                  "IQ4_XS, BF16, MXFP4)"});
  EXPECT_THROW(f.view("m"), FormatError);
  // The types qkv added (issue 37) are computed with.
  GgufBytes xs = GgufBytes::header(1, 0);
  xs.tensor("w", {256, 2}, 23, 0).pad().zeros(272);
  const GGUFFile fx = GGUFFile::parse(xs.b, kGgufSource);
  EXPECT_TRUE(fx.at("w").computable());
  EXPECT_EQ(fx.view("w").type, kernels::QType::IQ4_XS);
  // So is MXFP4 (gpt-oss's experts: 17 bytes per 32 values).
  GgufBytes mx = GgufBytes::header(1, 0);
  mx.tensor("w", {64, 2}, 39, 0).pad().zeros(68);
  const GGUFFile fm = GGUFFile::parse(mx.b, kGgufSource);
  EXPECT_TRUE(fm.at("w").computable());
  EXPECT_EQ(fm.at("w").nbytes, 68u);
  EXPECT_EQ(fm.view("w").type, kernels::QType::MXFP4);
  // An id GGML never assigned (or removed) cannot even be laid out.
  GgufBytes unassigned = GgufBytes::header(1, 0);
  unassigned.tensor("w", {32}, 1000, 0).pad().zeros(32);
  gguf_rejected(unassigned.b, {"tensor 'w' has unknown type id 1000, which is no GGML type qkv knows", "IQ2_XXS"});
  GgufBytes removed = GgufBytes::header(1, 0);
  removed.tensor("w", {32}, 4, 0).pad().zeros(32);
  gguf_rejected(removed.b, {"tensor 'w' has unknown type id 4"});
  GgufBytes row = GgufBytes::header(1, 0);
  row.tensor("blk.3.ffn_up.weight", {48, 2}, Q4_1, 0).pad().zeros(64);
  gguf_rejected(row.b, {"tensor 'blk.3.ffn_up.weight': row length 48", "not a multiple of Q4_1's block of 32"});
}

TEST(GgufReject, OffsetsAndTheDataSection) {
  // Past the end: truncated data, or an offset beyond the file.
  GgufBytes cut = valid_head();
  cut.zeros(15);
  gguf_rejected(cut.b, {"tensor 'w': its 16 bytes at data offset 0 run past the end", "holds 15 bytes", "truncated"});
  GgufBytes far = GgufBytes::header(1, 0);
  far.tensor("w", {4}, F32, std::uint64_t{1} << 40).pad().zeros(32);
  gguf_rejected(far.b, {"tensor 'w'", "data offset 1099511627776 run past the end"});
  // Misaligned.
  GgufBytes mis = GgufBytes::header(1, 0);
  mis.tensor("w", {4}, F32, 8).pad().zeros(32);
  gguf_rejected(mis.b, {"tensor 'w': offset 8 is not a multiple of the alignment 32"});
  // Overlapping: b begins inside a (a is 64 bytes).
  GgufBytes over = GgufBytes::header(2, 0);
  over.tensor("a", {16}, F32, 0).tensor("b", {4}, F32, 32).pad().zeros(64);
  gguf_rejected(over.b, {"tensor 'b' (data offset 32, 16 bytes) overlaps tensor 'a' (data offset 0, 64 bytes)"});
  // Holes: the first tensor not at 0, a gap beyond the padding.
  GgufBytes first = GgufBytes::header(1, 0);
  first.tensor("w", {4}, F32, 32).pad().zeros(64);
  gguf_rejected(first.b, {"hole in the data section: the first tensor 'w' begins at data offset 32, not 0"});
  GgufBytes gap = GgufBytes::header(2, 0);
  gap.tensor("a", {4}, F32, 0).tensor("b", {4}, F32, 64).pad().zeros(96);
  gguf_rejected(gap.b, {"hole in the data section: bytes [32, 64) between tensor 'a' and tensor 'b'"});
  // Trailing bytes beyond the last tensor's padding; with no tensor at all.
  GgufBytes tail = valid_head();
  tail.zeros(33);
  gguf_rejected(tail.b, {"17 trailing bytes after the last tensor 'w'", "allows 16"});
  GgufBytes none = GgufBytes::header(0, 1);
  none.kv_u32("a", 1).pad().zeros(1);
  gguf_rejected(none.b, {"24 trailing bytes after the tensor infos (padding to the alignment 32 allows 23)"});
  // A file of only empty tensors must still reach the data section (fuzz_gguf found this one).
  GgufBytes cut_empty = GgufBytes::header(1, 0);
  cut_empty.tensor("e", {0}, F32, 0);
  gguf_rejected(cut_empty.b, {"the data section begins at byte 64", "the file ends at byte", "tensor 'e'", "truncated"});
  GgufBytes padded_empty = GgufBytes::header(1, 0);
  padded_empty.tensor("e", {0}, F32, 0).pad();
  EXPECT_EQ(GGUFFile::parse(padded_empty.b, kGgufSource).at("e").nbytes, 0u);
  // Infos out of offset order are fine, as are empty tensors.
  GgufBytes order = GgufBytes::header(3, 0);
  order.tensor("b", {8}, F32, 32).tensor("a", {4}, F32, 0).tensor("e", {0, 3}, F32, 64).pad().zeros(64);
  const GGUFFile f = GGUFFile::parse(order.b, kGgufSource);
  EXPECT_EQ(f.tensors()[0].name, "b");
  EXPECT_EQ(f.at("e").nbytes, 0u);
  EXPECT_EQ(f.at("e").shape, (Shape{3, 0}));
}

TEST(GgufReject, ATruncationAtEveryByteIsAFormatError) {
  GgufBytes g = GgufBytes::header(2, 3);
  g.kv_str("general.architecture", "llama").kv_u32("general.alignment", 32);
  g.str("tokenizer.ggml.tokens").u32(9).u32(8).u64(3).str("a").str("bc").str("");
  g.tensor("w", {32, 2}, Q8_0, 0).tensor("n", {3}, F32, 96).pad().zeros(96 + 12);
  ASSERT_NO_THROW(GGUFFile::parse(g.b, kGgufSource));
  for (std::size_t n = 0; n < g.b.size(); ++n) {
    const Bytes cut(g.b.begin(), g.b.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW(GGUFFile::parse(cut, kGgufSource), qkv::FormatError) << "truncated to " << n << " bytes";
  }
}

}  // namespace
}  // namespace qkv::io::test
