// GGUF tokenizer metadata -> ByteLevelBPE (qkv/tokenize/gguf_vocab.h).
#include "qkv/tokenize/gguf_vocab.h"

#include <limits>

#include "bpe_impl.h"
#include "qkv/core/error.h"
#include "qkv/io/gguf.h"
#include "qkv/tokenize/sentencepiece.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize {

namespace {

// Hugging Face's spellings (Oniguruma syntax) of the split rules llama.cpp's llama-vocab.cpp
// writes out (it spells (?i:'s|...) as '[sS]|..., which matches the same ASCII text).
constexpr const char* kGpt2NoTail = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kLlama3 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2 =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";

// GPT-4o's o200k (Phi-4-mini), as its tokenizer.json writes it.
constexpr const char* kGpt4o =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
    "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

PreTokenizeStep split(const char* pattern) {
  return {.kind = PreTokenizeStep::Kind::Split, .pattern = pattern, .behavior = SplitBehavior::Isolated};
}
PreTokenizeStep byte_level(bool use_regex) { return {.kind = PreTokenizeStep::Kind::ByteLevel, .use_regex = use_regex}; }

struct PreType {
  std::vector<const char*> names;
  std::vector<PreTokenizeStep> steps;
  Normalization normalization = Normalization::None;
  bool ignore_merges = false;
  bool add_bos = false;  // llama.cpp's default for the type (tokenizer.ggml.add_bos_token overrides)
};

const std::vector<PreType>& pre_types() {
  static const std::vector<PreType> types = {
      {{"default"},
       {split("[\\p{P}\\$\\+<=>\\^~\\|]+"), split(kGpt2NoTail), split("\\p{N}+"), split("[0-9][0-9][0-9]"),
        byte_level(false)}},
      {{"gpt-2", "gpt2", "olmo"}, {byte_level(true)}},  // (olmo: OLMo and OLMoE, GPT-NeoX's GPT-2 regex)
      {{"smollm"}, {{.kind = PreTokenizeStep::Kind::Digits, .individual_digits = true}, byte_level(true)}},
      {{"llama3", "llama-v3", "llama-bpe"}, {split(kLlama3), byte_level(false)}, Normalization::None, true, true},
      {{"qwen2"}, {split(kQwen2), byte_level(false)}, Normalization::NFC},
      {{"gpt-4o"}, {split(kGpt4o), byte_level(false)}},
  };
  return types;
}

std::string names() {
  std::string s;
  for (const std::string& n : gguf_pre_tokenizer_types()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

std::vector<std::string> gguf_pre_tokenizer_types() {
  std::vector<std::string> out;
  for (const PreType& t : pre_types()) out.insert(out.end(), t.names.begin(), t.names.end());
  return out;
}

ByteLevelBPE bpe_from_gguf_vocab(const GgufVocab& g, const std::string& source) {
  using Impl = ByteLevelBPE::Impl;
  const std::string where = "GGUF '" + source + "': ";
  auto fail = [&](const std::string& key, const std::string& msg) -> FormatError {
    return FormatError(where + "tokenizer.ggml." + key + ": " + msg);
  };
  if (g.model != "gpt2")
    throw fail("model", quote(g.model) + " is not a byte-level BPE vocabulary (\"gpt2\")");
  const std::string pre_name = g.pre.value_or("default");
  const PreType* type = nullptr;
  for (const PreType& t : pre_types())
    for (const char* n : t.names)
      if (pre_name == n) type = &t;
  if (!type) throw fail("pre", quote(pre_name) + " is not a pre-tokenizer qkv knows (" + names() + ")");

  const std::size_t v = g.tokens.size();
  if (v == 0) throw fail("tokens", "the list is empty");
  if (v > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw fail("tokens", std::to_string(v) + " tokens is more than qkv supports (2^31 - 1)");
  if (!g.token_types.empty() && g.token_types.size() != v)
    throw fail("token_type", "has " + std::to_string(g.token_types.size()) + " entries for " + std::to_string(v) +
                                 " tokens");
  if (!g.merges) throw fail("merges", "is missing (a \"gpt2\" vocabulary needs its merges)");

  auto m = std::make_shared<Impl>();
  m->normalization = type->normalization;
  m->ignore_merges = type->ignore_merges;
  m->pre = PreTokenizer(type->steps, "GGUF pre-tokenizer " + pre_name);
  m->set_vocab(g.tokens, std::vector<bool>(v, true));  // a repeated token: the last id wins the lookup, as in llama.cpp
  const std::vector<std::string>& merges = *g.merges;
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string key = "merges[" + std::to_string(i) + "]: ";
    const std::string& s = merges[i];
    const std::size_t sp = s.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
      throw fail(key.substr(0, key.size() - 2), "expected two tokens separated by one space, got " + quote(s));
    m->add_merge(std::string_view(s).substr(0, sp), std::string_view(s).substr(sp + 1), where + "tokenizer.ggml." + key,
                 "tokenizer.ggml.tokens",
                 [](std::int32_t rank) { return "at tokenizer.ggml.merges[" + std::to_string(rank) + "]"; });
  }
  for (std::size_t id = 0; id < g.token_types.size(); ++id) {
    const std::int64_t t = g.token_types[id];
    if (t < 0 || t > 6)
      throw fail("token_type[" + std::to_string(id) + "]", std::to_string(t) + " (token " + quote(g.tokens[id]) +
                                                               ") is not a token type (0 undefined, 1 normal, 2 unknown, "
                                                               "3 control, 4 user-defined, 5 unused, 6 byte)");
    if (t != 2 && t != 3 && t != 4) continue;
    const std::string& content = g.tokens[id];
    // llama.cpp renames an empty token and cannot match one that is not UTF-8; neither is matched here.
    if (content.empty() || utf8::find_invalid(content) || m->added_ids.count(content)) continue;
    m->add_token({.content = content, .id = static_cast<std::int32_t>(id), .special = t != 4},
                 where + "tokenizer.ggml.tokens[" + std::to_string(id) + "]: ");
  }
  const std::pair<const char*, const std::optional<std::int64_t>*> kIds[] = {
      {"bos_token_id", &g.bos_id}, {"eos_token_id", &g.eos_id}, {"padding_token_id", &g.pad_id},
      {"unknown_token_id", &g.unk_id}};
  for (const auto& [key, value] : kIds)
    if (*value && (**value < 0 || static_cast<std::uint64_t>(**value) >= v))
      throw fail(key, std::to_string(**value) + " is outside the vocabulary (ids 0.." + std::to_string(v - 1) + ")");
  m->bos = g.bos_id, m->eos = g.eos_id, m->pad = g.pad_id, m->unk = g.unk_id;
  m->add_bos = g.add_bos.value_or(type->add_bos);
  m->add_eos = g.add_eos.value_or(false);
  if (m->add_bos && !m->bos) throw fail("add_bos_token", "is true but there is no tokenizer.ggml.bos_token_id");
  if (m->add_eos && !m->eos) throw fail("add_eos_token", "is true but there is no tokenizer.ggml.eos_token_id");
  m->finish();
  return Impl::wrap(std::move(m));
}

}  // namespace qkv::tokenize

namespace qkv::tokenize {

GgufVocab gguf_vocab_from(const io::GGUFFile& f) {
  GgufVocab g;
  const auto model = f.find_string("tokenizer.ggml.model");
  if (!model)
    throw FormatError("GGUF '" + f.source() + "': the file has no tokenizer (no key 'tokenizer.ggml.model')");
  g.model = std::string(*model);
  if (const auto pre = f.find_string("tokenizer.ggml.pre")) g.pre = std::string(*pre);
  for (const std::string_view t : f.get_string_array("tokenizer.ggml.tokens")) g.tokens.emplace_back(t);
  if (f.find_value("tokenizer.ggml.merges")) {
    g.merges.emplace();
    for (const std::string_view m : f.get_string_array("tokenizer.ggml.merges")) g.merges->emplace_back(m);
  }
  if (f.find_value("tokenizer.ggml.token_type")) g.token_types = f.get_int_array("tokenizer.ggml.token_type");
  if (f.find_value("tokenizer.ggml.scores"))
    for (const double s : f.get_float_array("tokenizer.ggml.scores")) g.scores.push_back(static_cast<float>(s));
  g.add_space_prefix = f.find_bool("tokenizer.ggml.add_space_prefix");
  g.bos_id = f.find_int("tokenizer.ggml.bos_token_id");
  g.eos_id = f.find_int("tokenizer.ggml.eos_token_id");
  g.pad_id = f.find_int("tokenizer.ggml.padding_token_id");
  g.unk_id = f.find_int("tokenizer.ggml.unknown_token_id");
  g.add_bos = f.find_bool("tokenizer.ggml.add_bos_token");
  g.add_eos = f.find_bool("tokenizer.ggml.add_eos_token");
  return g;
}

ByteLevelBPE bpe_from_gguf(const io::GGUFFile& f) { return bpe_from_gguf_vocab(gguf_vocab_from(f), f.source()); }

std::shared_ptr<const Tokenizer> tokenizer_from_gguf_vocab(const GgufVocab& g, const std::string& source) {
  if (g.model == "gpt2") return std::make_shared<ByteLevelBPE>(bpe_from_gguf_vocab(g, source));
  if (g.model == "llama") return std::make_shared<SentencePiece>(SentencePiece::from_gguf_vocab(g, source));
  throw FormatError("GGUF '" + source + "': tokenizer.ggml.model: " + quote(g.model) +
                    " is not supported (qkv reads \"gpt2\", byte-level BPE, and \"llama\", SentencePiece)");
}

std::shared_ptr<const Tokenizer> tokenizer_from_gguf(const io::GGUFFile& f) {
  return tokenizer_from_gguf_vocab(gguf_vocab_from(f), f.source());
}

}  // namespace qkv::tokenize
