// The GGML type table of kernels/quant.h: names, block sizes and row sizes.
#include <array>
#include <cctype>
#include <string>

#include "qkv/core/error.h"
#include "qkv/kernels/quant.h"

namespace qkv::kernels {
namespace {

constexpr std::array<QTypeTraits, 11> kTraits = {{
    {QType::F32, "F32", 1, 4},
    {QType::F16, "F16", 1, 2},
    {QType::Q4_0, "Q4_0", 32, 18},
    {QType::Q4_1, "Q4_1", 32, 20},
    {QType::Q5_0, "Q5_0", 32, 22},
    {QType::Q5_1, "Q5_1", 32, 24},
    {QType::Q8_0, "Q8_0", 32, 34},
    {QType::Q4_K, "Q4_K", 256, 144},
    {QType::Q5_K, "Q5_K", 256, 176},
    {QType::Q6_K, "Q6_K", 256, 210},
    {QType::BF16, "BF16", 1, 2},
}};

// ggml.h's enum ggml_type, by id ("" where an id was removed or never assigned).
constexpr std::array<const char*, 40> kGgmlNames = {
    "F32",     "F16",    "Q4_0",    "Q4_1",  "",       "",       "Q5_0",   "Q5_1",  "Q8_0",  "Q8_1",
    "Q2_K",    "Q3_K",   "Q4_K",    "Q5_K",  "Q6_K",   "Q8_K",   "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
    "IQ4_NL",  "IQ3_S",  "IQ2_S",   "IQ4_XS", "I8",    "I16",    "I32",    "I64",   "F64",   "IQ1_M",
    "BF16",    "",       "",        "",      "TQ1_0",  "TQ2_0",  "",       "",      "",      "MXFP4",
};

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

std::string ggml_type_name(std::uint32_t id) {
  if (id < kGgmlNames.size() && kGgmlNames[id][0] != '\0') return kGgmlNames[id];
  return "type " + std::to_string(id);
}

std::int64_t qtype_row_bytes(QType t, std::int64_t n) {
  const QTypeTraits tr = qtype_traits(t);
  if (n < 0 || n % tr.block)
    throw ValueError(std::string("qtype_row_bytes: a row of ") + tr.name + " needs a multiple of " +
                     std::to_string(tr.block) + " values, got " + std::to_string(n));
  return n / tr.block * tr.block_bytes;
}

}  // namespace qkv::kernels
