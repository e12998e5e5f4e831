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
#include "qkv/models/quant_mix.h"

namespace qkv::models::gguf_out {

using i64 = std::int64_t;
using io::GGUFMeta;
using kernels::QType;

// The tensors of one file being written, and the buffers their converted bytes live in.
struct Tensors {
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<io::GGUFTensorData> list;

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
  // A matrix [rows, cols] of float rows (row stride ld), as F32.
  void add_float_matrix(const std::string& name, const float* x, i64 rows, i64 cols, i64 ld) {
    std::vector<std::uint8_t> b(static_cast<std::size_t>(rows * cols) * 4);
    for (i64 r = 0; r < rows; ++r) std::memcpy(b.data() + r * cols * 4, x + r * ld, static_cast<std::size_t>(cols) * 4);
    add_bytes(name, QType::F32, {cols, rows}, std::move(b));
  }
  // A weight matrix in its stored type, in place or with its rows rearranged: perm[r] = the source
  // row of row r (empty: identity).
  void add_matrix(const std::string& name, const kernels::QMatrix& m, const std::vector<i64>& perm) {
    const i64 rb = kernels::qtype_row_bytes(m.type, m.cols);
    if (perm.empty() && m.row_bytes == rb) {
      list.push_back({.name = name, .type = m.type, .dims = {m.cols, m.rows}, .data = m.data,
                      .nbytes = static_cast<std::uint64_t>(m.rows * m.row_bytes)});
      return;
    }
    const auto* src = static_cast<const std::uint8_t*>(m.data);
    std::vector<std::uint8_t> b(static_cast<std::size_t>(m.rows * rb));
    for (i64 r = 0; r < m.rows; ++r)
      std::memcpy(b.data() + r * rb, src + (perm.empty() ? r : perm[static_cast<std::size_t>(r)]) * m.row_bytes,
                  static_cast<std::size_t>(rb));
    add_bytes(name, m.type, {m.cols, m.rows}, std::move(b));
  }

  // A weight matrix in its stored type with its columns rearranged by blocks of `width`: block j
  // of a row is block perm[j] of the source row. The width must hold whole blocks of the type
  // (ValueError naming the tensor otherwise).
  void add_matrix_column_blocks(const std::string& name, const kernels::QMatrix& m, const std::vector<i64>& perm,
                                i64 width) {
    const kernels::QTypeTraits& tr = kernels::qtype_traits(m.type);
    if (width % tr.block != 0)
      throw ValueError("convert: " + name + ": its columns cannot be rearranged by " + std::to_string(width) +
                       " in type " + kernels::qtype_name(m.type) + " (blocks of " + std::to_string(tr.block) + ")");
    const i64 rb = kernels::qtype_row_bytes(m.type, m.cols), wb = kernels::qtype_row_bytes(m.type, width);
    const auto* src = static_cast<const std::uint8_t*>(m.data);
    std::vector<std::uint8_t> b(static_cast<std::size_t>(m.rows * rb));
    for (i64 r = 0; r < m.rows; ++r)
      for (std::size_t j = 0; j < perm.size(); ++j)
        std::memcpy(b.data() + r * rb + static_cast<i64>(j) * wb, src + r * m.row_bytes + perm[j] * wb,
                    static_cast<std::size_t>(wb));
    add_bytes(name, m.type, {m.cols, m.rows}, std::move(b));
  }

  // The E matrices of a mixture's experts (alike: type, rows, cols) as one 3-D tensor [E, rows,
  // cols] (GGUF dims cols, rows, E): in place when they lie one after the other (a GGUF file's
  // ffn_*_exps read back), else copied together (a folder's tensors of each expert).
  void add_experts(const std::string& name, const std::vector<kernels::QMatrix>& ms) {
    const kernels::QMatrix& m0 = ms.front();
    const i64 rb = kernels::qtype_row_bytes(m0.type, m0.cols), E = static_cast<i64>(ms.size());
    bool adjacent = true;
    for (i64 e = 0; e < E; ++e) {
      const kernels::QMatrix& m = ms[static_cast<std::size_t>(e)];
      if (m.type != m0.type || m.rows != m0.rows || m.cols != m0.cols)
        throw ValueError("convert: " + name + ": the experts' matrices differ in type or shape");
      adjacent = adjacent && m.row_bytes == rb &&
                 static_cast<const std::uint8_t*>(m.data) == static_cast<const std::uint8_t*>(m0.data) + e * m0.rows * rb;
    }
    if (adjacent) {
      list.push_back({.name = name, .type = m0.type, .dims = {m0.cols, m0.rows, E}, .data = m0.data,
                      .nbytes = static_cast<std::uint64_t>(E * m0.rows * rb)});
      return;
    }
    std::vector<std::uint8_t> b(static_cast<std::size_t>(E * m0.rows * rb));
    for (i64 e = 0; e < E; ++e) {
      const kernels::QMatrix& m = ms[static_cast<std::size_t>(e)];
      for (i64 r = 0; r < m.rows; ++r)
        std::memcpy(b.data() + (e * m0.rows + r) * rb, static_cast<const std::uint8_t*>(m.data) + r * m.row_bytes,
                    static_cast<std::size_t>(rb));
    }
    add_bytes(name, m0.type, {m0.cols, m0.rows, E}, std::move(b));
  }

  // The tensors as the mix of quant_mix.h sees them.
  std::vector<QuantMixTensor> mix_tensors() const {
    std::vector<QuantMixTensor> out;
    for (const io::GGUFTensorData& t : list) out.push_back({t.name, t.dims, t.type});
    return out;
  }
  // Tensor i converted to types[i] where that differs from its type: each row dequantized
  // (kernels::dequantize_row) and quantized again (kernels::quantize_row).
  void convert(const std::vector<QType>& types) {
    for (std::size_t i = 0; i < list.size(); ++i) {
      io::GGUFTensorData& t = list[i];
      const QType to = types[i];
      if (to == t.type) continue;
      const i64 cols = t.dims.empty() ? 1 : t.dims[0];
      const i64 rows = cols == 0 ? 0 : static_cast<i64>(t.nbytes) / kernels::qtype_row_bytes(t.type, cols);
      const i64 rb_in = kernels::qtype_row_bytes(t.type, cols), rb = kernels::qtype_row_bytes(to, cols);
      std::vector<std::uint8_t> b(static_cast<std::size_t>(rows * rb));
      std::vector<float> f(static_cast<std::size_t>(cols));
      const auto* src = static_cast<const std::uint8_t*>(t.data);
      for (i64 r = 0; r < rows; ++r) {
        kernels::dequantize_row(t.type, src + r * rb_in, f.data(), cols);
        kernels::quantize_row(to, f.data(), b.data() + r * rb, cols);
      }
      bufs.push_back(std::move(b));
      t.type = to;
      t.data = bufs.back().data();
      t.nbytes = bufs.back().size();
    }
  }
  // Converted as `quant` asks (as stored when it names no file type); the general.file_type to
  // write: the file type asked, or the one of the type most matrices have.
  std::uint32_t apply(const GgufQuant& quant, const QuantMixModel& model) {
    if (quant.ftype) {
      convert(quant_mix_types(*quant.ftype, model, mix_tensors(), quant.pure));
      return static_cast<std::uint32_t>(*quant.ftype);
    }
    std::map<QType, i64> count;
    for (const io::GGUFTensorData& t : list)
      if (t.dims.size() >= 2) ++count[t.type];
    QType best = QType::F32;
    i64 n = -1;
    for (const auto& [ty, c] : count)
      if (c > n) best = ty, n = c;
    return static_cast<std::uint32_t>(llama_ftype_of_type(best));
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
