// Sample GGUF contents for the writer's tests: metadata of every value type (nested arrays,
// string arrays, extreme values) and tensors of every type qkv knows, with pseudo-random
// block bytes (the reader and writer never look inside a block).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qkv/io/gguf_writer.h"

namespace qkv::io::test {

inline GGUFMetadata sample_metadata() {
  using M = GGUFMeta;
  using T = GGUFType;
  return {
      {"general.architecture", M::string("llama")},
      {"general.name", M::string("sample \u00e9\u6f22 \"quoted\"\n")},
      {"s.u8", M::u8(255)},
      {"s.i8", M::i8(-128)},
      {"s.u16", M::u16(65535)},
      {"s.i16", M::i16(-32768)},
      {"s.u32", M::u32(4294967295u)},
      {"s.i32", M::i32(std::numeric_limits<std::int32_t>::min())},
      {"s.u64", M::u64(std::numeric_limits<std::uint64_t>::max())},
      {"s.i64", M::i64(std::numeric_limits<std::int64_t>::min())},
      {"s.f32", M::f32(1e-5f)},
      {"s.f64", M::f64(-1.0 / 3.0)},
      {"s.true", M::boolean(true)},
      {"s.false", M::boolean(false)},
      {"s.empty_string", M::string("")},
      {"a.strings", M::string_array({"<|endoftext|>", "\u0120the", "", "\u00e9t\u00e9", "a b"})},
      {"a.i32", M::int_array(T::I32, {3, -1, 0, 2147483647})},
      {"a.u8", M::int_array(T::U8, {0, 1, 255})},
      {"a.u64", M::int_array(T::U64, {0, 1ll << 62})},
      {"a.bool", M::int_array(T::BOOL, {1, 0, 1})},
      {"a.f32", M::float_array(T::F32, {0.5, -2.25, 1e30})},
      {"a.f64", M::float_array(T::F64, {3.141592653589793})},
      {"a.empty", M::int_array(T::I16, {})},
      {"a.nested", M::array_of_arrays({M::int_array(T::U32, {1, 2}), M::int_array(T::U32, {}),
                                       M::int_array(T::U32, {3})})},
      {"a.nested_strings", M::array_of_arrays({M::string_array({"x", "yz"}), M::string_array({})})},
      {"a.deep", M::array_of_arrays({M::array_of_arrays({M::float_array(T::F32, {1.0})})})},
  };
}

// Owns the bytes of the sample tensors.
struct SampleTensors {
  std::vector<std::vector<std::uint8_t>> bytes;
  std::vector<GGUFTensorData> tensors;
};

inline std::vector<std::uint8_t> pseudo_random_bytes(std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> b(n);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& v : b) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v = static_cast<std::uint8_t>(x);
  }
  return b;
}

// One tensor of every type (dims innermost first), plus a scalar, an empty tensor and a 4-d one.
inline SampleTensors sample_tensors() {
  using Q = kernels::QType;
  struct Spec {
    const char* name;
    Q type;
    std::vector<std::int64_t> dims;
  };
  const std::vector<Spec> specs = {
      {"token_embd.weight", Q::Q8_0, {64, 5}},  {"blk.0.attn_q.weight", Q::Q4_0, {32, 3}},
      {"blk.0.attn_k.weight", Q::Q4_1, {96, 2}}, {"blk.0.attn_v.weight", Q::Q5_0, {32, 1}},
      {"blk.0.ffn_up.weight", Q::Q5_1, {64, 2}}, {"blk.0.ffn_gate.weight", Q::Q4_K, {256, 2}},
      {"blk.0.ffn_down.weight", Q::Q5_K, {256, 1}}, {"output.weight", Q::Q6_K, {512, 1}},
      {"blk.0.attn_norm.weight", Q::F32, {7}},  {"half", Q::F16, {3, 3}},
      {"brain", Q::BF16, {5}},                   {"scalar", Q::F32, {}},
      {"empty", Q::F32, {0, 4}},                 {"four_d", Q::F16, {2, 1, 3, 2}},
  };
  SampleTensors s;
  s.bytes.reserve(specs.size());
  std::uint32_t seed = 1;
  for (const Spec& sp : specs) {
    const kernels::QTypeTraits tr = kernels::qtype_traits(sp.type);
    std::int64_t numel = 1;
    for (std::int64_t d : sp.dims) numel *= d;
    const auto nbytes = static_cast<std::size_t>(numel / tr.block * tr.block_bytes);
    s.bytes.push_back(pseudo_random_bytes(nbytes, seed++));
    s.tensors.push_back({sp.name, sp.type, sp.dims, s.bytes.back().data(), nbytes});
  }
  return s;
}

}  // namespace qkv::io::test
