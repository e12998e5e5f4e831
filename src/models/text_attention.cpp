// Attention maps of pretrained model folders on a text (qkv/models/text_attention.h):
// one reader per model family, chosen by config.json's model_type.
#include "qkv/models/text_attention.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/memory.h"
#include "qkv/models/bert.h"
#include "qkv/models/decoder_io.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/registry.h"
#include "qkv/io/gguf.h"
#include "qkv/ops/ops.h"
#include "qkv/tokenize/tokenizer.h"
#include "qkv/tokenize/utf8.h"

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
  const auto bpe = tokenize::load_tokenizer(dir);
  TextAttention a;
  a.model_type = "gpt2";
  a.family = "GPT-2";
  a.causal = true;
  a.ids = bpe->encode(text);
  const std::shared_ptr<GPT2LMHeadModel> m = load_gpt2(dir);
  const GPT2Config& c = m->config();
  const i64 T = static_cast<i64>(a.ids.size());
  check_length(T, c.n_positions, dir);
  for (i64 id : a.ids) a.tokens.push_back(readable_token(bpe->token_text(id)));
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
  const auto tok = tokenize::load_tokenizer(dir);
  TextAttention a;
  a.model_type = "bert";
  a.family = "BERT";
  a.ids = tok->encode_with_specials(text);
  const std::shared_ptr<BertModel> m = BertModel::from_folder(dir);
  const BertConfig& c = m->config();
  const i64 T = static_cast<i64>(a.ids.size());
  check_length(T, c.max_position_embeddings, dir);
  for (i64 id : a.ids) a.tokens.push_back(tok->token_string(id));
  check_maps_memory(c.num_hidden_layers, c.num_attention_heads, T,
                    "heatmap (" + std::to_string(c.num_hidden_layers) + " layers x " +
                        std::to_string(c.num_attention_heads) + " heads x " + std::to_string(T) + "^2 tokens)");
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> att;
  m->forward(Tensor::from_vector(a.ids, {1, T}), Tensor(), nullptr, &att);
  for (const Tensor& w : att) a.layers.push_back(w.select(0, 0).contiguous());
  return a;
}

// ---- every decoder of the registry: DecoderLM's attention weights, causal ----
TextAttention decoder_attention(const std::string& path, const std::string& text, const ModelFamily& family,
                                const std::string& declared) {
  const std::shared_ptr<DecoderLM> m = load_decoder(path);  // names what is wrong with the model first
  const auto tok = tokenize::find_tokenizer(path);
  if (!tok) throw IOError("heatmap: " + path + " has no tokenizer (tokenizer.json, tokenizer.model, or a GGUF vocabulary)");
  TextAttention a;
  a.model_type = declared;
  a.family = family.display;
  a.causal = true;
  a.ids = tok->encode_with_specials(text);  // as transformers' tokenizer(text): the BOS where it adds one
  const DecoderSpec& c = m->spec();
  const i64 T = static_cast<i64>(a.ids.size());
  check_length(T, c.max_positions, path);
  for (i64 id : a.ids) a.tokens.push_back(readable_token(tok->token_text(id)));
  check_maps_memory(c.num_layers(), c.num_heads, T,
                    "heatmap (" + std::to_string(c.num_layers()) + " layers x " + std::to_string(c.num_heads) +
                        " heads x " + std::to_string(T) + "^2 tokens)");
  a.layers = m->attention_weights(a.ids).layers;
  for (i64 l = 0; l < c.num_layers(); ++l)
    if (c.layers[static_cast<std::size_t>(l)].mixer != Mixer::Attention) a.linear_layers.push_back(l);
  return a;
}

// The families with their own reader (the rest of the registry's causal LMs are decoders).
using Reader = TextAttention (*)(const std::string&, const std::string&);
Reader own_reader(const std::string& family) {
  if (family == "gpt2") return gpt2_attention;
  if (family == "bert") return bert_attention;
  return nullptr;
}

}  // namespace

std::vector<std::string> text_attention_families() {
  std::vector<std::string> v;
  for (const ModelFamily* f : model_families())
    if (f->decoder || own_reader(f->name)) v.insert(v.end(), f->model_types.begin(), f->model_types.end());
  std::sort(v.begin(), v.end());
  return v;
}

TextAttention text_attention(const std::string& path, const std::string& text) {
  const ModelKind k = model_kind(path);
  if (k.family && k.family->decoder) return decoder_attention(path, text, *k.family, k.declared);
  if (k.family && !k.gguf && own_reader(k.family->name)) return own_reader(k.family->name)(path, text);
  std::string list;
  for (const std::string& t : text_attention_families()) list += (list.empty() ? "" : ", ") + t;
  if (k.declared.empty() && !k.gguf)
    throw IOError("heatmap: " + path + " has no config.json with a model_type (a Hugging Face model folder has one)");
  throw ValueError("heatmap: " + path + (k.gguf ? " is a GGUF file of architecture '" : " is a '") + k.declared +
                   (k.gguf ? "'" : "' model folder") + "; qkv heatmap draws GGUF files and folders of " + list);
}

std::vector<AttentionMap> text_attention_maps(const TextAttention& a, const std::vector<i64>& layers,
                                              const std::vector<i64>& heads) {
  const i64 L = static_cast<i64>(a.layers.size());
  auto has_map = [&](i64 l) { return a.layers[static_cast<std::size_t>(l)].defined(); };
  i64 H = 0;
  for (i64 l = 0; l < L && H == 0; ++l)
    if (has_map(l)) H = a.layers[static_cast<std::size_t>(l)].size(0);
  std::vector<i64> ls = layers, hs = heads;
  if (ls.empty())
    for (i64 l = 0; l < L; ++l)
      if (has_map(l)) ls.push_back(l);
  if (hs.empty())
    for (i64 h = 0; h < H; ++h) hs.push_back(h);
  for (i64 l : ls)
    if (l < 0 || l >= L)
      throw ValueError("heatmap: --layers " + std::to_string(l) + " is not a layer of the model (it has " +
                       std::to_string(L) + ": 0.." + std::to_string(L - 1) + ")");
  for (i64 l : ls)
    if (!has_map(l)) {
      std::string with;
      for (i64 k = 0; k < L; ++k)
        if (has_map(k)) with += (with.empty() ? "" : ", ") + std::to_string(k);
      throw ValueError("heatmap: layer " + std::to_string(l) +
                       " is a linear-attention layer (Gated DeltaNet: a recurrent state, no softmax over the keys), "
                       "which has no attention map; the layers with one are " + with);
    }
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
