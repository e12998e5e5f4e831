// The tensors of a GGUF file being written (internal header of models/: the GPT-2 and the
// decoder writers), and the row permutation of llama.cpp's RoPE layout.
#pragma once
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/io/gguf_writer.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/kernels/quant.h"

namespace qkv::models::gguf_out {

using i64 = std::int64_t;
using io::GGUFMeta;
using kernels::QType;

// llama.cpp's general.file_type (enum llama_ftype) of a model whose matrices are mostly `t`.
inline std::uint32_t file_type(QType t) {
  switch (t) {
    case QType::F32: return 0;
    case QType::F16: return 1;
    case QType::Q4_0: return 2;
    case QType::Q4_1: return 3;
    case QType::Q8_0: return 7;
    case QType::Q5_0: return 8;
    case QType::Q5_1: return 9;
    case QType::Q4_K: return 15;  // Q4_K_M
    case QType::Q5_K: return 17;  // Q5_K_M
    case QType::Q6_K: return 18;
    case QType::BF16: return 32;
  }
  return 0;
}

// The tensors of one file being written, and the buffers their converted bytes live in.
struct Tensors {
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<io::GGUFTensorData> list;
  std::map<QType, i64> count;  // matrices by type (general.file_type)

  void add_bytes(const std::string& name, QType type, std::vector<std::int64_t> dims, std::vector<std::uint8_t> b) {
    bufs.push_back(std::move(b));
    list.push_back({.name = name, .type = type, .dims = std::move(dims), .data = bufs.back().data(),
                    .nbytes = bufs.back().size()});
  }
  void add_vector(const std::string& name, const float* v, i64 n) {
    std::vector<std::uint8_t> b(static_cast<std::size_t>(n) * 4);
    std::memcpy(b.data(), v, b.size());
    add_bytes(name, QType::F32, {n}, std::move(b));
  }
  // A matrix [rows, cols] of float rows (row stride ld) converted to `type`.
  void add_float_matrix(const std::string& name, const float* x, i64 rows, i64 cols, i64 ld, QType type) {
    check_block(name, type, cols);
    const i64 rb = kernels::qtype_row_bytes(type, cols);
    std::vector<std::uint8_t> b(static_cast<std::size_t>(rows * rb));
    for (i64 r = 0; r < rows; ++r) kernels::quantize_row(type, x + r * ld, b.data() + r * rb, cols);
    add_bytes(name, type, {cols, rows}, std::move(b));
    ++count[type];
  }
  // A weight matrix in place or converted; perm[r] = the source row of row r (empty: identity).
  void add_matrix(const std::string& name, const kernels::QMatrix& m, std::optional<QType> type,
                  const std::vector<i64>& perm) {
    const QType t = type.value_or(m.type);
    const auto* src = static_cast<const std::uint8_t*>(m.data);
    auto row = [&](i64 r) { return src + (perm.empty() ? r : perm[static_cast<std::size_t>(r)]) * m.row_bytes; };
    ++count[t];
    if (t == m.type && perm.empty() && m.row_bytes == kernels::qtype_row_bytes(t, m.cols)) {
      list.push_back({.name = name, .type = t, .dims = {m.cols, m.rows}, .data = m.data,
                      .nbytes = static_cast<std::uint64_t>(m.rows * m.row_bytes)});
      return;
    }
    check_block(name, t, m.cols);
    const i64 rb = kernels::qtype_row_bytes(t, m.cols);
    std::vector<std::uint8_t> b(static_cast<std::size_t>(m.rows * rb));
    std::vector<float> f(static_cast<std::size_t>(m.cols));
    for (i64 r = 0; r < m.rows; ++r) {
      if (t == m.type) {
        std::memcpy(b.data() + r * rb, row(r), static_cast<std::size_t>(rb));
      } else {
        kernels::dequantize_row(m.type, row(r), f.data(), m.cols);
        kernels::quantize_row(t, f.data(), b.data() + r * rb, m.cols);
      }
    }
    add_bytes(name, t, {m.cols, m.rows}, std::move(b));
  }
  static void check_block(const std::string& name, QType t, i64 cols) {
    if (cols % kernels::qtype_traits(t).block)
      throw ValueError("convert: " + name + " has rows of " + std::to_string(cols) + " values, not a multiple of " +
                       kernels::qtype_name(t) + "'s block of " + std::to_string(kernels::qtype_traits(t).block) +
                       " (choose f16, bf16 or f32)");
  }
  QType majority() const {
    QType best = QType::F32;
    i64 n = -1;
    for (const auto& [t, c] : count)
      if (c > n) best = t, n = c;
    return best;
  }
};

// Rows of q / k moved between Hugging Face's order (pairs (i, i + D/2) of each head) and
// llama.cpp's (pairs (2i, 2i + 1)): llama.cpp's convert_hf_to_gguf permute, or its inverse.
inline std::vector<i64> rope_permutation(i64 heads, i64 D, bool to_interleaved) {
  std::vector<i64> p(static_cast<std::size_t>(heads * D));
  for (i64 h = 0; h < heads; ++h)
    for (i64 j = 0; j < 2; ++j)
      for (i64 i = 0; i < D / 2; ++i) {
        const i64 half = h * D + j * (D / 2) + i, inter = h * D + 2 * i + j;
        if (to_interleaved) p[static_cast<std::size_t>(inter)] = half;
        else p[static_cast<std::size_t>(half)] = inter;
      }
  return p;
}

inline std::vector<float> permuted(const float* v, const std::vector<i64>& perm, i64 n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (i64 r = 0; r < n; ++r) out[static_cast<std::size_t>(r)] = v[perm.empty() ? r : perm[static_cast<std::size_t>(r)]];
  return out;
}

inline GGUFMeta u32(i64 v) { return GGUFMeta::u32(static_cast<std::uint32_t>(v)); }

}  // namespace qkv::models::gguf_out
