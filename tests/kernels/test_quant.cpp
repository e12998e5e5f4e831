// dequantize_row / quantize_row (kernels/quant.h) against gguf-py, bit for bit, on the fixtures
// of tests/reference/make_quant_fixtures.py: random block bytes of every type (scales inf and NaN
// included) and float rows with edge blocks; plus the type table and the errors.
//
// NaN payloads are compared too, with one allowance: where an element is the sum of two NaNs
// (Q4_1 / Q5_1 blocks whose d and m are both inf or NaN: d*q + m), numpy returns either
// operand's NaN depending on the length of the array it runs over (its SIMD loop and its
// remainder loop differ), so there any NaN passes. Every other NaN — one NaN operand, inf*0,
// inf-inf, the subtraction of the k-quants — must have numpy's exact bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "../../src/kernels/quant_internal.h"
#include "qkv/core/error.h"
#include "qkv/io/safetensors.h"
#include "qkv/kernels/quant.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;

const io::SafetensorsFile& fixture() {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::open(std::string(QKV_FIXTURE_DIR) + "/quant/quant_cases.safetensors");
  return f;
}

template <class T>
std::vector<T> read(const std::string& name) {
  const io::StTensorInfo& t = fixture().at(name);
  std::vector<T> v(t.nbytes() / sizeof(T));
  std::memcpy(v.data(), fixture().data(t), t.nbytes());
  return v;
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

bool half_nonfinite(const std::uint8_t* p) { return (detail::load_u16(p) & 0x7C00u) == 0x7C00u; }

const QType kAllTypes[] = {QType::F32,  QType::F16,  QType::BF16, QType::Q8_0, QType::Q4_0,   QType::Q4_1,   QType::Q5_0,
                           QType::Q5_1, QType::Q4_K, QType::Q5_K, QType::Q6_K, QType::Q2_K, QType::Q3_K,
                           QType::IQ4_NL, QType::IQ4_XS, QType::MXFP4};

TEST(Quant, DequantizeEqualsGgufPyBitwise) {
  for (QType t : kAllTypes) {
    const QTypeTraits tr = qtype_traits(t);
    const std::string name = tr.name;
    const std::vector<std::uint8_t> raw = read<std::uint8_t>("deq." + name + ".bytes");
    const std::vector<float> want = read<float>("deq." + name + ".values");
    const i64 n = static_cast<i64>(want.size());
    ASSERT_EQ(static_cast<i64>(raw.size()), qtype_row_bytes(t, n)) << name;
    std::vector<float> got(want.size(), 12345.0f);
    dequantize_row(t, raw.data(), got.data(), n);
    const bool two_scale = t == QType::Q4_1 || t == QType::Q5_1;
    int mismatches = 0, nans = 0, infs = 0, relaxed = 0, payload_differs = 0;
    for (i64 i = 0; i < n; ++i) {
      const std::uint8_t* block = raw.data() + (i / tr.block) * tr.block_bytes;
      infs += std::isinf(want[i]);
      if (std::isnan(want[i])) {
        ++nans;
        const bool both_nan_add = two_scale && half_nonfinite(block) && half_nonfinite(block + 2);
        if (both_nan_add && std::isnan(got[i])) {
          ++relaxed;
          payload_differs += bits(got[i]) != bits(want[i]);
          continue;
        }
      }
      if (bits(got[i]) != bits(want[i]) && mismatches++ < 5)
        ADD_FAILURE() << name << " element " << i << " (block " << i / tr.block << "): got 0x" << std::hex
                      << bits(got[i]) << ", gguf-py 0x" << bits(want[i]) << std::dec << " (" << got[i] << " vs "
                      << want[i] << ")";
    }
    EXPECT_EQ(mismatches, 0) << name;
    if (t == QType::MXFP4)  // its scales are powers of two, never NaN; 2^127 makes the largest codes inf
      EXPECT_GT(infs, 0) << name << ": the fixture should hold infs (exponent 255)";
    else
      EXPECT_GT(nans, 0) << name << ": the fixture should hold NaNs (non-finite scales)";
    std::printf("%-5s %5lld values, %4d NaN (%d under the two-NaN allowance, %d of them another payload)\n",
                name.c_str(), static_cast<long long>(n), nans, relaxed, payload_differs);
  }
}

TEST(Quant, QuantizeEqualsGgufPyBitwise) {
  for (QType t : {QType::F32, QType::F16, QType::BF16, QType::Q8_0, QType::Q4_0, QType::Q4_1, QType::Q5_0,
                  QType::Q5_1, QType::MXFP4}) {
    const std::string name = qtype_name(t);
    const std::vector<float> x = read<float>("q." + name + ".input");
    const std::vector<std::uint8_t> want = read<std::uint8_t>("q." + name + ".bytes");
    const i64 n = static_cast<i64>(x.size());
    ASSERT_EQ(static_cast<i64>(want.size()), qtype_row_bytes(t, n)) << name;
    std::vector<std::uint8_t> got(want.size(), 0xAB);
    quantize_row(t, x.data(), got.data(), n);
    int mismatches = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && mismatches++ < 5)
        ADD_FAILURE() << name << " byte " << i << " (block " << i / qtype_traits(t).block_bytes << "): got "
                      << int(got[i]) << ", gguf-py " << int(want[i]);
    EXPECT_EQ(mismatches, 0) << name;
  }
}

// The k-quant, IQ4 and MXFP4 quantizers (and the 32-weight ones) against ggml's own, bit for bit, on
// the rows of tests/reference/make_kquant_fixtures.py (ggml_quantize_chunk, what llama-quantize
// runs), and MXFP4's on its edge rows (quant_cases' q.MXFP4.input: the exponent's ends, ties, amax
// at and below powers of two, tiny blocks whose exponent wraps around).
TEST(Quant, QuantizeEqualsGgmlBitwise) {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::open(std::string(QKV_FIXTURE_DIR) + "/quant/kquant_cases.safetensors");
  auto get = [&](const std::string& name) {
    const io::StTensorInfo& t = f.at(name);
    std::vector<std::uint8_t> v(t.nbytes());
    std::memcpy(v.data(), f.data(t), t.nbytes());
    return v;
  };
  const std::vector<std::uint8_t> xb = get("input");
  std::vector<float> x(xb.size() / 4);
  std::memcpy(x.data(), xb.data(), xb.size());
  const i64 n = static_cast<i64>(x.size());
  auto check = [&](QType t, const std::vector<float>& in, const std::string& tensor) {
    const QTypeTraits tr = qtype_traits(t);
    const i64 m = static_cast<i64>(in.size());
    const std::vector<std::uint8_t> want = get(tensor);
    ASSERT_EQ(static_cast<i64>(want.size()), qtype_row_bytes(t, m)) << tensor;
    std::vector<std::uint8_t> got(want.size(), 0xAB);
    quantize_row(t, in.data(), got.data(), m);
    int mismatches = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      if (got[i] != want[i] && mismatches++ < 5)
        ADD_FAILURE() << tensor << " byte " << i % tr.block_bytes << " of block " << i / tr.block_bytes << " (row "
                      << i / tr.block_bytes * tr.block / 256 << " of the input): got " << int(got[i]) << ", ggml "
                      << int(want[i]);
    EXPECT_EQ(mismatches, 0) << tensor;
  };
  for (QType t : {QType::Q2_K, QType::Q3_K, QType::Q4_K, QType::Q5_K, QType::Q6_K, QType::IQ4_NL, QType::IQ4_XS,
                  QType::Q8_0, QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1, QType::MXFP4})
    check(t, x, std::string(qtype_name(t)) + ".bytes");
  check(QType::MXFP4, read<float>("q.MXFP4.input"), "MXFP4.edges.bytes");
}

// MXFP4's scale 2^(e - 128) for every exponent byte (subnormal below e = 2), and its code values.
TEST(Quant, Mxfp4ScaleAndCodes) {
  for (int e = 0; e < 256; ++e)
    ASSERT_EQ(bits(detail::e8m0_half(static_cast<std::uint8_t>(e))), bits(std::ldexp(1.0f, e - 128))) << e;
  // Block: e = 130 (d = 4), bytes 1 + j = code j (low nibble, weight j) | code 15 - j (high, weight 16 + j).
  std::uint8_t b[17] = {130};
  for (int j = 0; j < 16; ++j) b[1 + j] = static_cast<std::uint8_t>(j | ((15 - j) << 4));
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  float y[32];
  dequantize_row(QType::MXFP4, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    const float lo = (j < 8 ? 1 : -1) * e2m1[j % 8], hi = (j >= 8 ? 1 : -1) * e2m1[(15 - j) % 8];
    EXPECT_EQ(y[j], 8.0f * lo) << j;  // E2M1 value * 2^(130 - 127)
    EXPECT_EQ(y[16 + j], 8.0f * hi) << j;
  }
  EXPECT_EQ(bits(y[8]), 0u);  // code 8 (E2M1's -0) reads as +0, as ggml's table has it
}

// Hugging Face's MXFP4 pairs (tests/reference/make_mxfp4_hf_fixture.py): mxfp4_blocks_from_hf writes
// llama.cpp's repacked bytes, and they read back as transformers' dequantization, bit for bit but
// for E2M1's -0, which ggml's code 8 reads as +0.
TEST(Quant, Mxfp4FromHuggingFace) {
  static const io::SafetensorsFile f =
      io::SafetensorsFile::open(std::string(QKV_FIXTURE_DIR) + "/quant/mxfp4_hf.safetensors");
  auto get = [&](const std::string& name) {
    const io::StTensorInfo& t = f.at(name);
    std::vector<std::uint8_t> v(t.nbytes());
    std::memcpy(v.data(), f.data(t), t.nbytes());
    return v;
  };
  const std::vector<std::uint8_t> blocks = get("hf.blocks"), scales = get("hf.scales"), want = get("ggml"),
                                  vb = get("values");
  const i64 nb = static_cast<i64>(scales.size());
  ASSERT_EQ(static_cast<i64>(blocks.size()), 16 * nb);
  std::vector<std::uint8_t> got(want.size() + 1, 0xAB);
  mxfp4_blocks_from_hf(blocks.data(), scales.data(), nb, got.data());
  EXPECT_EQ(got.back(), 0xAB) << "wrote past the blocks";
  got.pop_back();
  EXPECT_EQ(got, want);
  std::vector<float> values(vb.size() / 4), y(values.size());
  std::memcpy(values.data(), vb.data(), vb.size());
  dequantize_row(QType::MXFP4, got.data(), y.data(), static_cast<i64>(y.size()));
  int minus_zero = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (bits(values[i]) == 0x80000000u && bits(y[i]) == 0u) {
      ++minus_zero;
      continue;
    }
    ASSERT_EQ(bits(y[i]), bits(values[i])) << "value " << i << " (block " << i / 32 << "): " << y[i] << " vs "
                                           << values[i];
  }
  EXPECT_GT(minus_zero, 0) << "the fixture should hold E2M1's -0";
  mxfp4_blocks_from_hf(blocks.data(), scales.data(), 0, nullptr);  // nothing to write
  EXPECT_THROW(mxfp4_blocks_from_hf(blocks.data(), scales.data(), -1, got.data()), ValueError);
}

// The k-quants, IQ4 types and MXFP4 read back within a fraction of each 256-value block's largest
// magnitude (measured on this row: worst ratios Q2_K 0.315, Q3_K 0.220, Q4_K 0.069, Q5_K 0.031,
// Q6_K 0.016, IQ4_NL 0.081, IQ4_XS 0.091 - about half a quantization step -, MXFP4 0.143 - half its
// top step of 4 d between codes 8 and 12, or a clipped amax; the bounds leave 1.4x):
// the layouts of quantize_row and dequantize_row agree beyond ggml's bytes.
TEST(Quant, KQuantRoundTripWithinTheirSteps) {
  std::vector<float> x(1024);
  for (int i = 0; i < 1024; ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  const std::pair<QType, double> bounds[] = {{QType::Q2_K, 0.45}, {QType::Q3_K, 0.31},    {QType::Q4_K, 0.1},
                                             {QType::Q5_K, 0.045}, {QType::Q6_K, 0.023}, {QType::IQ4_NL, 0.12},
                                             {QType::IQ4_XS, 0.13}, {QType::MXFP4, 0.2}};
  for (const auto& [t, bound] : bounds) {
    std::vector<std::uint8_t> q(static_cast<std::size_t>(qtype_row_bytes(t, 1024)));
    std::vector<float> y(1024);
    quantize_row(t, x.data(), q.data(), 1024);
    dequantize_row(t, q.data(), y.data(), 1024);
    double worst = 0;
    for (int b = 0; b < 4; ++b) {
      double amax = 0, err = 0;
      for (int j = 0; j < 256; ++j) {
        amax = std::max(amax, static_cast<double>(std::fabs(x[256 * b + j])));
        err = std::max(err, static_cast<double>(std::fabs(y[256 * b + j] - x[256 * b + j])));
      }
      worst = std::max(worst, err / amax);
    }
    std::printf("%-6s worst |error| / block amax %.4f\n", qtype_name(t), worst);
    EXPECT_LE(worst, bound) << qtype_name(t);
  }
}

// Every half bit pattern survives half -> float -> half (numpy keeps NaN payloads both ways), and
// the float value of every non-NaN half is the exact one.
TEST(Quant, HalfConversionsAreExactForAllPatterns) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = detail::f16_to_f32(static_cast<std::uint16_t>(h));
    ASSERT_EQ(detail::f32_to_f16(f), h) << std::hex << h;
    const int e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) continue;
    const double v = (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25)) * ((h & 0x8000) ? -1 : 1);
    ASSERT_EQ(static_cast<double>(f), v) << std::hex << h;
  }
}

// Quantize then dequantize: each weight within its block's rounding error (half a step, a whole
// step for the clipped end of the symmetric types, plus the half rounding of the scales) — a
// sanity check of the layout conventions beyond gguf-py's own bytes.
TEST(Quant, RoundTripWithinAStep) {
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  for (QType t : {QType::Q8_0, QType::Q4_0, QType::Q4_1, QType::Q5_0, QType::Q5_1}) {
    std::vector<std::uint8_t> q(static_cast<std::size_t>(qtype_row_bytes(t, 256)));
    std::vector<float> y(256);
    quantize_row(t, x.data(), q.data(), 256);
    dequantize_row(t, q.data(), y.data(), 256);
    for (int b = 0; b < 8; ++b) {
      float lo = x[32 * b], hi = x[32 * b];
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[32 * b + j]);
        hi = std::max(hi, x[32 * b + j]);
      }
      const float amax = std::max(std::fabs(lo), std::fabs(hi));
      float bound = 0;
      switch (t) {
        case QType::Q8_0: bound = 0.6f * amax / 127; break;
        case QType::Q4_0: bound = 1.05f * amax / 8; break;
        case QType::Q5_0: bound = 1.05f * amax / 16; break;
        case QType::Q4_1: bound = 0.6f * (hi - lo) / 15 + 1e-3f * std::fabs(lo); break;
        default: bound = 0.6f * (hi - lo) / 31 + 1e-3f * std::fabs(lo); break;
      }
      for (int j = 0; j < 32; ++j)
        EXPECT_LE(std::fabs(y[32 * b + j] - x[32 * b + j]), bound) << qtype_name(t) << " block " << b << " j " << j;
    }
  }
}

TEST(Quant, ErrorsNameTheTypeAndSize) {
  float buf[64] = {};
  std::uint8_t raw[256] = {};
  try {
    dequantize_row(QType::Q4_K, raw, buf, 32);
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("Q4_K needs a multiple of 256 values, got 32"), std::string::npos)
        << e.what();
  }
  try {
    quantize_row(static_cast<QType>(16), buf, raw, 256);  // IQ2_XXS: qkv does not compute with it
    FAIL() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown type id 16"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_row(QType::Q8_0, buf, raw, 33), ValueError);
  EXPECT_THROW(dequantize_row(QType::F16, raw, buf, -1), ValueError);
  EXPECT_EQ(qtype_row_bytes(QType::Q4_1, 576), 18 * 20);
  EXPECT_EQ(qtype_row_bytes(QType::Q6_K, 512), 2 * 210);
  EXPECT_FALSE(qtype_traits(std::uint32_t{16}).has_value());
  EXPECT_EQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_EQ(ggml_type_name(23), "IQ4_XS");
  EXPECT_EQ(qtype_traits(std::uint32_t{23})->block_bytes, 136);
  EXPECT_EQ(ggml_type_block(39)->block_bytes, 17);  // MXFP4
  EXPECT_EQ(qtype_traits(std::uint32_t{39})->type, QType::MXFP4);
  EXPECT_FALSE(qtype_traits(std::uint32_t{40}).has_value());  // NVFP4
  EXPECT_EQ(qtype_from_name("mxfp4"), QType::MXFP4);
  EXPECT_FALSE(ggml_type_block(31).has_value());
  EXPECT_EQ(ggml_type_name(1000), "type 1000");
  // The table of the types qkv computes with agrees with GGML's.
  for (std::uint32_t id = 0; id < 64; ++id)
    if (const auto tr = qtype_traits(id)) {
      const auto g = ggml_type_block(id);
      ASSERT_TRUE(g.has_value()) << id;
      EXPECT_EQ(std::string(g->name), tr->name);
      EXPECT_EQ(g->block, tr->block);
      EXPECT_EQ(g->block_bytes, tr->block_bytes);
    }
  EXPECT_EQ(qtype_from_name("q5_k"), QType::Q5_K);
}

}  // namespace
}  // namespace qkv::kernels
