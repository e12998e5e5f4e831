// The GGML type table of kernels/quant.h: names, block sizes and row sizes.
#include <array>
#include <cctype>
#include <string>

#include "qkv/core/error.h"
#include "qkv/kernels/quant.h"

namespace qkv::kernels {
namespace {

constexpr std::array<QTypeTraits, 16> kTraits = {{
    {QType::F32, "F32", 1, 4},
    {QType::F16, "F16", 1, 2},
    {QType::Q4_0, "Q4_0", 32, 18},
    {QType::Q4_1, "Q4_1", 32, 20},
    {QType::Q5_0, "Q5_0", 32, 22},
    {QType::Q5_1, "Q5_1", 32, 24},
    {QType::Q8_0, "Q8_0", 32, 34},
    {QType::Q2_K, "Q2_K", 256, 84},
    {QType::Q3_K, "Q3_K", 256, 110},
    {QType::Q4_K, "Q4_K", 256, 144},
    {QType::Q5_K, "Q5_K", 256, 176},
    {QType::Q6_K, "Q6_K", 256, 210},
    {QType::IQ4_NL, "IQ4_NL", 32, 18},
    {QType::IQ4_XS, "IQ4_XS", 256, 136},
    {QType::BF16, "BF16", 1, 2},
    {QType::MXFP4, "MXFP4", 32, 17},
}};

// ggml.h's enum ggml_type by id, with ggml's block sizes (gguf-py's GGML_QUANT_SIZES); name ""
// where an id was removed or never assigned.
constexpr std::array<GgmlBlock, 43> kGgml = {{
    {"F32", 1, 4},       {"F16", 1, 2},        {"Q4_0", 32, 18},     {"Q4_1", 32, 20},    {"", 0, 0},
    {"", 0, 0},          {"Q5_0", 32, 22},     {"Q5_1", 32, 24},     {"Q8_0", 32, 34},    {"Q8_1", 32, 36},
    {"Q2_K", 256, 84},   {"Q3_K", 256, 110},   {"Q4_K", 256, 144},   {"Q5_K", 256, 176},  {"Q6_K", 256, 210},
    {"Q8_K", 256, 292},  {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74},  {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},  {"IQ3_S", 256, 110},  {"IQ2_S", 256, 82},   {"IQ4_XS", 256, 136}, {"I8", 1, 1},
    {"I16", 1, 2},       {"I32", 1, 4},        {"I64", 1, 8},        {"F64", 1, 8},       {"IQ1_M", 256, 56},
    {"BF16", 1, 2},      {"", 0, 0},           {"", 0, 0},           {"", 0, 0},          {"TQ1_0", 256, 54},
    {"TQ2_0", 256, 66},  {"", 0, 0},           {"", 0, 0},           {"", 0, 0},          {"MXFP4", 32, 17},
    {"NVFP4", 64, 36},   {"Q1_0", 128, 18},    {"Q2_0", 64, 18},
}};

}  // namespace

std::optional<QTypeTraits> qtype_traits(std::uint32_t id) {
  for (const QTypeTraits& t : kTraits)
    if (static_cast<std::uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

QTypeTraits qtype_traits(QType t) {
  if (auto tr = qtype_traits(static_cast<std::uint32_t>(t))) return *tr;
  throw ValueError("qtype_traits: unknown type id " + std::to_string(static_cast<std::uint32_t>(t)));
}

const char* qtype_name(QType t) { return qtype_traits(t).name; }

std::optional<QType> qtype_from_name(std::string_view name) {
  for (const QTypeTraits& t : kTraits) {
    const std::string_view n = t.name;
    if (n.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < n.size() && same; ++i)
      same = std::toupper(static_cast<unsigned char>(name[i])) == static_cast<unsigned char>(n[i]);
    if (same) return t.type;
  }
  return std::nullopt;
}

std::optional<GgmlBlock> ggml_type_block(std::uint32_t id) {
  if (id < kGgml.size() && kGgml[id].name[0] != '\0') return kGgml[id];
  return std::nullopt;
}

std::string ggml_type_name(std::uint32_t id) {
  if (auto b = ggml_type_block(id)) return b->name;
  return "type " + std::to_string(id);
}

std::string computable_types_list() {
  std::string s;
  for (std::uint32_t id = 0; id < 64; ++id)
    if (auto tr = qtype_traits(id)) s += (s.empty() ? "" : ", ") + std::string(tr->name);
  return s;
}

std::int64_t qtype_row_bytes(QType t, std::int64_t n) {
  const QTypeTraits tr = qtype_traits(t);
  if (n < 0 || n % tr.block)
    throw ValueError(std::string("qtype_row_bytes: a row of ") + tr.name + " needs a multiple of " +
                     std::to_string(tr.block) + " values, got " + std::to_string(n));
  return n / tr.block * tr.block_bytes;
}

}  // namespace qkv::kernels
