// Attention maps of pretrained model folders on a text (qkv/models/text_attention.h):
// one reader per model family, chosen by config.json's model_type.
#include "qkv/models/text_attention.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <utility>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/memory.h"
#include "qkv/models/bert.h"
#include "qkv/models/gpt2.h"
#include "qkv/ops/ops.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/utf8.h"
#include "qkv/tokenize/wordpiece.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;

// The weights [H, T, T] of each layer take H*T*T floats; the page and the PNGs are written
// from them. Checked before the forward pass allocates them.
void check_maps_memory(i64 layers, i64 heads, i64 T, const std::string& what) {
  MemoryEstimate e;
  e.add({layers, heads, T, T}, 3);  // the weights, their copy per layer and the page's numbers
  e.check(what);
}

void check_length(i64 T, i64 positions, const std::string& dir) {
  if (T == 0) throw ValueError("heatmap: the text has no tokens; give some text");
  if (T > positions)
    throw ValueError("heatmap: the text is " + std::to_string(T) + " tokens, more than the " + std::to_string(positions) +
                     " positions of " + dir + "; give a shorter text");
}

// ---- GPT-2: the blocks' own weights, causal ----
TextAttention gpt2_attention(const std::string& dir, const std::string& text) {
  const tokenize::ByteLevelBPE bpe = tokenize::ByteLevelBPE::from_folder(dir);
  TextAttention a;
  a.model_type = "gpt2";
  a.family = "GPT-2";
  a.causal = true;
  a.ids = bpe.encode(text);
  const std::shared_ptr<GPT2LMHeadModel> m = load_gpt2(dir);
  const GPT2Config& c = m->config();
  const i64 T = static_cast<i64>(a.ids.size());
  check_length(T, c.n_positions, dir);
  for (i64 id : a.ids) a.tokens.push_back(readable_token(bpe.token_bytes(id)));
  check_maps_memory(c.n_layer, c.n_head, T, "heatmap (" + std::to_string(c.n_layer) + " layers x " +
                                                std::to_string(c.n_head) + " heads x " + std::to_string(T) + "^2 tokens)");
  autograd::NoGradGuard no_grad;
  m->eval();
  // transformers' GPT2Model: inputs_embeds + position_embeds, then the blocks (pre-norm).
  const Tensor ids = Tensor::from_vector(a.ids, {1, T});
  Tensor x = add(m->wte->forward(ids), m->wpe->forward(Tensor::arange(T, DType::I64)));
  for (const auto& block : m->h) {
    Tensor w;
    x = block->forward(x, Mask::causal(), &w);  // w [1, H, T, T]
    a.layers.push_back(w.select(0, 0).contiguous());
  }
  return a;
}

// ---- BERT: every token of the text, [CLS] and [SEP] included ----
TextAttention bert_attention(const std::string& dir, const std::string& text) {
  const tokenize::WordPieceTokenizer tok = tokenize::WordPieceTokenizer::from_folder(dir);
  TextAttention a;
  a.model_type = "bert";
  a.family = "BERT";
  a.ids = tok.encode(text);
  const std::shared_ptr<BertModel> m = BertModel::from_folder(dir);
  const BertConfig& c = m->config();
  const i64 T = static_cast<i64>(a.ids.size());
  check_length(T, c.max_position_embeddings, dir);
  for (i64 id : a.ids) a.tokens.push_back(tok.id_to_token(id));
  check_maps_memory(c.num_hidden_layers, c.num_attention_heads, T,
                    "heatmap (" + std::to_string(c.num_hidden_layers) + " layers x " +
                        std::to_string(c.num_attention_heads) + " heads x " + std::to_string(T) + "^2 tokens)");
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> att;
  m->forward(Tensor::from_vector(a.ids, {1, T}), Tensor(), nullptr, &att);
  for (const Tensor& w : att) a.layers.push_back(w.select(0, 0).contiguous());
  return a;
}

// model_type -> reader. A new family (a Llama-family causal LM, ...) is one line here.
const std::vector<std::pair<std::string, std::function<TextAttention(const std::string&, const std::string&)>>>&
readers() {
  static const std::vector<std::pair<std::string, std::function<TextAttention(const std::string&, const std::string&)>>>
      table = {{"gpt2", gpt2_attention}, {"bert", bert_attention}};
  return table;
}

std::string model_type_of(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError("heatmap: " + dir + " has no config.json (a Hugging Face model folder has one)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("model_type") || !j["model_type"].is_string())
    throw FormatError(path + ": no \"model_type\" string, so the model family is unknown");
  return j["model_type"].get<std::string>();
}

std::string families_list() {
  std::string s;
  for (const auto& [type, reader] : readers()) s += (s.empty() ? "" : ", ") + type;
  return s;
}

}  // namespace

std::vector<std::string> text_attention_families() {
  std::vector<std::string> v;
  for (const auto& [type, reader] : readers()) v.push_back(type);
  return v;
}

TextAttention text_attention(const std::string& dir, const std::string& text) {
  const std::string type = model_type_of(dir);
  for (const auto& [t, reader] : readers())
    if (t == type) return reader(dir, text);
  throw ValueError("heatmap: " + dir + " is a '" + type + "' model folder; qkv heatmap draws " + families_list() +
                   " folders (model_type in config.json)");
}

std::vector<AttentionMap> text_attention_maps(const TextAttention& a, const std::vector<i64>& layers,
                                              const std::vector<i64>& heads) {
  const i64 L = static_cast<i64>(a.layers.size());
  const i64 H = L > 0 ? a.layers[0].size(0) : 0;
  std::vector<i64> ls = layers, hs = heads;
  if (ls.empty())
    for (i64 l = 0; l < L; ++l) ls.push_back(l);
  if (hs.empty())
    for (i64 h = 0; h < H; ++h) hs.push_back(h);
  for (i64 l : ls)
    if (l < 0 || l >= L)
      throw ValueError("heatmap: --layers " + std::to_string(l) + " is not a layer of the model (it has " +
                       std::to_string(L) + ": 0.." + std::to_string(L - 1) + ")");
  for (i64 h : hs)
    if (h < 0 || h >= H)
      throw ValueError("heatmap: --heads " + std::to_string(h) + " is not a head of the model (it has " +
                       std::to_string(H) + " per layer: 0.." + std::to_string(H - 1) + ")");
  std::vector<AttentionMap> maps;
  for (i64 l : ls) {
    AttentionMap m;
    m.name = "layers." + std::to_string(l) + ".attention";
    m.kind = "self";
    m.layer = static_cast<int>(l);
    std::vector<Tensor> rows;
    for (i64 h : hs) rows.push_back(a.layers[static_cast<std::size_t>(l)].select(0, h));
    m.weights = stack(rows, 0);  // [H', T, T]
    m.query_tokens = m.key_tokens = a.tokens;
    m.head_ids = hs;
    maps.push_back(std::move(m));
  }
  return maps;
}

std::string readable_token(const std::string& bytes) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (std::size_t i = 0; i < bytes.size();) {
    const tokenize::utf8::Seq s = tokenize::utf8::scan(p + i, bytes.size() - i);
    if (s.kind == tokenize::utf8::SeqKind::Valid && !(s.len == 1 && (p[i] < 0x20 || p[i] == 0x7F))) {
      out.append(bytes, i, s.len);
      i += s.len;
      continue;
    }
    const std::size_t n = s.kind == tokenize::utf8::SeqKind::Valid ? 1 : s.len;
    for (std::size_t k = 0; k < n; ++k) {
      const unsigned char c = p[i + k];
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else {
        char b[8];
        std::snprintf(b, sizeof b, "<0x%02X>", c);
        out += b;
      }
    }
    i += n;
  }
  return out;
}

}  // namespace qkv::models
