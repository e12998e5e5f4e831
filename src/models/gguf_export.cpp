// Models written as GGUF (see gguf_export.h).
#include "qkv/models/gguf_export.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/ops/ops.h"
#include "qkv/tokenize/bpe.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;
using io::GGUFMeta;
using io::GGUFType;
using kernels::QType;
namespace fs = std::filesystem;

// llama.cpp's general.file_type (enum llama_ftype) of a model whose matrices are mostly `t`.
std::uint32_t file_type(QType t) {
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
std::vector<i64> rope_permutation(i64 heads, i64 D, bool to_interleaved) {
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

std::vector<float> permuted(const float* v, const std::vector<i64>& perm, i64 n) {
  std::vector<float> out(static_cast<std::size_t>(n));
  for (i64 r = 0; r < n; ++r) out[static_cast<std::size_t>(r)] = v[perm.empty() ? r : perm[static_cast<std::size_t>(r)]];
  return out;
}

GGUFMeta u32(i64 v) { return GGUFMeta::u32(static_cast<std::uint32_t>(v)); }

}  // namespace

io::GGUFMetadata gguf_tokenizer_metadata(const tokenize::GgufVocab& v, const std::string& chat_template) {
  io::GGUFMetadata m;
  m.emplace_back("tokenizer.ggml.model", GGUFMeta::string(v.model));
  if (v.pre) m.emplace_back("tokenizer.ggml.pre", GGUFMeta::string(*v.pre));
  m.emplace_back("tokenizer.ggml.tokens", GGUFMeta::string_array(v.tokens));
  std::vector<std::int64_t> types = v.token_types;
  if (types.empty()) types.assign(v.tokens.size(), 1);
  m.emplace_back("tokenizer.ggml.token_type", GGUFMeta::int_array(GGUFType::I32, types));
  if (v.merges) m.emplace_back("tokenizer.ggml.merges", GGUFMeta::string_array(*v.merges));
  for (auto [key, id] : {std::pair{"tokenizer.ggml.bos_token_id", v.bos_id}, {"tokenizer.ggml.eos_token_id", v.eos_id},
                         {"tokenizer.ggml.unknown_token_id", v.unk_id}, {"tokenizer.ggml.padding_token_id", v.pad_id}})
    if (id) m.emplace_back(key, u32(*id));
  if (v.add_bos) m.emplace_back("tokenizer.ggml.add_bos_token", GGUFMeta::boolean(*v.add_bos));
  if (v.add_eos) m.emplace_back("tokenizer.ggml.add_eos_token", GGUFMeta::boolean(*v.add_eos));
  if (!chat_template.empty()) m.emplace_back("tokenizer.chat_template", GGUFMeta::string(chat_template));
  return m;
}

tokenize::GgufVocab gguf_vocab_from_folder(const std::string& dir) {
  using nlohmann::json;
  tokenize::GgufVocab v;
  v.model = "gpt2";
  std::map<i64, std::string> by_id;
  std::vector<std::string> merges;
  std::map<i64, int> types;
  const fs::path tj = fs::path(dir) / "tokenizer.json";
  auto bad = [](const std::string& f, const std::string& what) { return FormatError(f + ": " + what); };
  if (fs::exists(tj)) {
    const std::string f = tj.string();
    json j;
    try {
      j = json::parse(io::read_file(f, "convert"));
    } catch (const json::exception& e) {
      throw bad(f, std::string("not valid JSON: ") + e.what());
    }
    const json& model = j.value("model", json::object());
    if (model.value("type", "") != "BPE") throw bad(f, "model.type must be \"BPE\" to write a GGUF gpt2 vocabulary");
    for (const auto& [tok, id] : model.value("vocab", json::object()).items()) {
      if (!id.is_number_integer() || id.get<i64>() < 0) throw bad(f, "model.vocab['" + tok + "'] is not an id");
      by_id[id.get<i64>()] = tok;
    }
    for (const json& m : model.value("merges", json::array())) {
      if (m.is_string()) merges.push_back(m.get<std::string>());
      else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      else throw bad(f, "model.merges holds " + m.dump() + ", not a merge");
    }
    for (const json& a : j.value("added_tokens", json::array())) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        throw bad(f, "added_tokens holds " + a.dump() + ", not {id, content}");
      const i64 id = a["id"].get<i64>();
      by_id[id] = a["content"].get<std::string>();
      types[id] = a.value("special", false) ? 3 : 4;
    }
  } else {
    const std::string vf = (fs::path(dir) / "vocab.json").string(), mf = (fs::path(dir) / "merges.txt").string();
    json j;
    try {
      j = json::parse(io::read_file(vf, "convert"));
    } catch (const json::exception& e) {
      throw bad(vf, std::string("not valid JSON: ") + e.what());
    }
    for (const auto& [tok, id] : j.items()) {
      if (!id.is_number_integer() || id.get<i64>() < 0) throw bad(vf, "'" + tok + "' has no id");
      by_id[id.get<i64>()] = tok;
      if (tok.size() > 4 && tok.rfind("<|", 0) == 0 && tok.substr(tok.size() - 2) == "|>") types[id.get<i64>()] = 3;
    }
    const std::string text = io::read_file(mf, "convert");
    std::size_t at = 0;
    while (at < text.size()) {
      std::size_t e = text.find('\n', at);
      if (e == std::string::npos) e = text.size();
      std::string line = text.substr(at, e - at);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
      at = e + 1;
    }
  }
  if (by_id.empty()) throw FormatError(dir + ": the tokenizer has no tokens");
  const i64 V = by_id.rbegin()->first + 1;
  if (static_cast<i64>(by_id.size()) != V)
    throw FormatError(dir + ": the tokenizer's ids are not dense 0.." + std::to_string(V - 1) + " (" +
                      std::to_string(by_id.size()) + " tokens)");
  for (const auto& [id, tok] : by_id) {
    v.tokens.push_back(tok);
    v.token_types.push_back(types.count(id) ? types[id] : 1);
  }
  v.merges = merges;
  const tokenize::ByteLevelBPE own = tokenize::ByteLevelBPE::from_folder(dir);
  v.bos_id = own.bos_id(), v.eos_id = own.eos_id(), v.pad_id = own.pad_id(), v.unk_id = own.unk_id();
  v.add_bos = own.add_bos();
  // llama.cpp names the pre-tokenizer; find the one that cuts text as this tokenizer does.
  const std::vector<std::string> probes = {
      "Hello world! It's 2024-12-03, 1234567 apples.\n\n  Tabs\tand   spaces ", "x  1", "I'M here, you'RE there",
      "na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x99\x82", "a\r\nb\n\n\nc", "$$$ <tag> ^~|",
      "   leading and trailing   ", "3.14159 + 2718281828 = ?"};
  for (const std::string& name : tokenize::gguf_pre_tokenizer_types()) {
    tokenize::GgufVocab c = v;
    c.pre = name;
    bool same = true;
    try {
      const tokenize::ByteLevelBPE cand = tokenize::bpe_from_gguf_vocab(c, dir);
      for (const std::string& p : probes)
        if (cand.pre_tokenize(p) != own.pre_tokenize(p)) {
          same = false;
          break;
        }
    } catch (const Error&) {
      same = false;
    }
    if (same) {
      v.pre = name;
      return v;
    }
  }
  throw FormatError(dir + ": its pre-tokenizer matches none of llama.cpp's types qkv knows; cannot name it in a GGUF file");
}

void save_llama_gguf(const LlamaForCausalLM& m, const std::string& path, std::optional<QType> type,
                     const io::GGUFMetadata& tokenizer, const std::string& name) {
  const LlamaConfig& c = m.config();
  const LlamaWeights& w = m.weights();
  const std::string arch = c.model_type == "qwen2" ? "qwen2" : "llama";  // llama.cpp writes Mistral as llama
  const bool want_interleaved = arch == "llama";
  const bool is_interleaved = c.rope_style == kernels::RopeStyle::Interleaved;
  std::vector<i64> pq, pk;
  if (want_interleaved != is_interleaved) {
    if (c.rope_dim != c.head_dim)
      throw ValueError("convert: a partial rotary model (rope_dim " + std::to_string(c.rope_dim) + " of head_dim " +
                       std::to_string(c.head_dim) + ") cannot be rearranged for llama.cpp's RoPE");
    pq = rope_permutation(c.num_attention_heads, c.head_dim, want_interleaved);
    pk = rope_permutation(c.num_key_value_heads, c.head_dim, want_interleaved);
  }
  Tensors t;
  t.add_matrix("token_embd.weight", w.embed, type, {});
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const LlamaLayer& l = w.layers[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    t.add_vector(p + "attn_norm.weight", l.attn_norm, c.hidden_size);
    t.add_matrix(p + "attn_q.weight", l.q.w, type, pq);
    t.add_matrix(p + "attn_k.weight", l.k.w, type, pk);
    t.add_matrix(p + "attn_v.weight", l.v.w, type, {});
    if (l.q.bias) {
      const std::vector<float> bq = permuted(l.q.bias, pq, l.q.w.rows), bk = permuted(l.k.bias, pk, l.k.w.rows);
      t.add_vector(p + "attn_q.bias", bq.data(), l.q.w.rows);
      t.add_vector(p + "attn_k.bias", bk.data(), l.k.w.rows);
      t.add_vector(p + "attn_v.bias", l.v.bias, l.v.w.rows);
    }
    t.add_matrix(p + "attn_output.weight", l.o.w, type, {});
    t.add_vector(p + "ffn_norm.weight", l.ffn_norm, c.hidden_size);
    t.add_matrix(p + "ffn_gate.weight", l.gate.w, type, {});
    t.add_matrix(p + "ffn_up.weight", l.up.w, type, {});
    t.add_matrix(p + "ffn_down.weight", l.down.w, type, {});
  }
  t.add_vector("output_norm.weight", w.norm, c.hidden_size);
  if (!c.tie_word_embeddings) t.add_matrix("output.weight", w.lm_head, type, {});
  // llama3 rope scaling: llama.cpp keeps the per-frequency divisors as a tensor.
  std::vector<float> factors = w.rope_freq_factors;
  if (factors.empty() && c.rope_scaling.type == kernels::RopeScaling::Type::Llama3) {
    const std::vector<float> base = kernels::rope_inv_freq(c.rope_dim, c.rope_theta, {});
    const std::vector<float> scaled = kernels::rope_inv_freq(c.rope_dim, c.rope_theta, c.rope_scaling);
    for (std::size_t i = 0; i < base.size(); ++i) factors.push_back(base[i] / scaled[i]);
  }
  if (!factors.empty()) t.add_vector("rope_freqs.weight", factors.data(), static_cast<i64>(factors.size()));

  io::GGUFMetadata meta;
  meta.emplace_back("general.architecture", GGUFMeta::string(arch));
  meta.emplace_back("general.type", GGUFMeta::string("model"));
  meta.emplace_back("general.name", GGUFMeta::string(name));
  auto key = [&](const char* k) { return arch + "." + k; };
  meta.emplace_back(key("block_count"), u32(c.num_hidden_layers));
  meta.emplace_back(key("context_length"), u32(c.max_position_embeddings));
  meta.emplace_back(key("embedding_length"), u32(c.hidden_size));
  meta.emplace_back(key("feed_forward_length"), u32(c.intermediate_size));
  meta.emplace_back(key("attention.head_count"), u32(c.num_attention_heads));
  meta.emplace_back(key("attention.head_count_kv"), u32(c.num_key_value_heads));
  meta.emplace_back(key("rope.freq_base"), GGUFMeta::f32(static_cast<float>(c.rope_theta)));
  meta.emplace_back(key("attention.layer_norm_rms_epsilon"), GGUFMeta::f32(static_cast<float>(c.rms_norm_eps)));
  meta.emplace_back(key("rope.dimension_count"), u32(c.rope_dim));
  meta.emplace_back(key("vocab_size"), u32(c.vocab_size));
  if (c.head_dim * c.num_attention_heads != c.hidden_size) {
    meta.emplace_back(key("attention.key_length"), u32(c.head_dim));
    meta.emplace_back(key("attention.value_length"), u32(c.head_dim));
  }
  if (c.rope_scaling.type == kernels::RopeScaling::Type::Linear) {
    meta.emplace_back(key("rope.scaling.type"), GGUFMeta::string("linear"));
    meta.emplace_back(key("rope.scaling.factor"), GGUFMeta::f32(static_cast<float>(c.rope_scaling.factor)));
  }
  if (c.sliding_window) meta.emplace_back(key("attention.sliding_window"), u32(c.sliding_window));
  meta.emplace_back("general.file_type", GGUFMeta::u32(file_type(t.majority())));
  meta.emplace_back("general.quantization_version", GGUFMeta::u32(2));
  meta.insert(meta.end(), tokenizer.begin(), tokenizer.end());
  io::write_gguf(path, meta, t.list);
}

void save_gpt2_gguf(const GPT2LMHeadModel& m, const std::string& path, QType type, const io::GGUFMetadata& tokenizer,
                    const std::string& name) {
  autograd::NoGradGuard ng;
  const GPT2Config& c = m.config();
  Tensors t;
  std::vector<Tensor> keep;  // contiguous float32 copies of module weights (any layout)
  auto mat = [&](const std::string& n, const Tensor& w, QType ty) {
    keep.push_back(w.detach().contiguous().to(DType::F32));
    t.add_float_matrix(n, keep.back().data<float>(), w.shape()[0], w.shape()[1], w.shape()[1], ty);
  };
  auto vec = [&](const std::string& n, const Tensor& v) {
    keep.push_back(v.detach().contiguous().to(DType::F32));
    t.add_vector(n, keep.back().data<float>(), v.numel());
  };
  // llama.cpp reads embeddings and norms as they come; matrices in the asked type.
  mat("token_embd.weight", m.wte->weight, type);
  mat("position_embd.weight", m.wpe->weight, QType::F32);
  for (i64 i = 0; i < c.n_layer; ++i) {
    const nn::TransformerEncoderBlock& b = *m.h[static_cast<std::size_t>(i)];
    const nn::MultiHeadAttention& a = *b.self_attn;
    const std::string p = "blk." + std::to_string(i) + ".";
    vec(p + "attn_norm.weight", b.norm1->weight);
    vec(p + "attn_norm.bias", b.norm1->bias);
    mat(p + "attn_qkv.weight", concat({a.w_q->weight, a.w_k->weight, a.w_v->weight}, 0), type);
    vec(p + "attn_qkv.bias", concat({a.w_q->bias, a.w_k->bias, a.w_v->bias}, 0));
    mat(p + "attn_output.weight", a.w_o->weight, type);
    vec(p + "attn_output.bias", a.w_o->bias);
    vec(p + "ffn_norm.weight", b.norm2->weight);
    vec(p + "ffn_norm.bias", b.norm2->bias);
    mat(p + "ffn_up.weight", b.ffn->linear1->weight, type);
    vec(p + "ffn_up.bias", b.ffn->linear1->bias);
    mat(p + "ffn_down.weight", b.ffn->linear2->weight, type);
    vec(p + "ffn_down.bias", b.ffn->linear2->bias);
  }
  vec("output_norm.weight", m.ln_f->weight);
  vec("output_norm.bias", m.ln_f->bias);
  mat("output.weight", m.lm_head_weight(), type);
  io::GGUFMetadata meta;
  meta.emplace_back("general.architecture", GGUFMeta::string("gpt2"));
  meta.emplace_back("general.type", GGUFMeta::string("model"));
  meta.emplace_back("general.name", GGUFMeta::string(name));
  meta.emplace_back("gpt2.block_count", u32(c.n_layer));
  meta.emplace_back("gpt2.context_length", u32(c.n_positions));
  meta.emplace_back("gpt2.embedding_length", u32(c.n_embd));
  meta.emplace_back("gpt2.feed_forward_length", u32(c.d_ff()));
  meta.emplace_back("gpt2.attention.head_count", u32(c.n_head));
  meta.emplace_back("gpt2.attention.layer_norm_epsilon", GGUFMeta::f32(static_cast<float>(c.layer_norm_epsilon)));
  meta.emplace_back("general.file_type", GGUFMeta::u32(file_type(type)));
  meta.emplace_back("general.quantization_version", GGUFMeta::u32(2));
  meta.insert(meta.end(), tokenizer.begin(), tokenizer.end());
  io::write_gguf(path, meta, t.list);
}

}  // namespace qkv::models
