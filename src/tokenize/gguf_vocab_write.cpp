// GGUF tokenizer metadata written (see gguf_vocab.h): a vocabulary's tokenizer.ggml.* keys, and
// the GGUF vocabulary of a Hugging Face folder's tokenizer (qkv convert).
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/gguf_vocab.h"
#include "qkv/tokenize/sentencepiece.h"

namespace qkv::tokenize {
namespace {

using i64 = std::int64_t;
using io::GGUFMeta;
using io::GGUFType;
namespace fs = std::filesystem;

GGUFMeta u32(i64 v) { return GGUFMeta::u32(static_cast<std::uint32_t>(v)); }

}  // namespace

io::GGUFMetadata gguf_tokenizer_metadata(const GgufVocab& v, const std::string& chat_template) {
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
  if (!v.scores.empty()) {
    std::vector<double> scores(v.scores.begin(), v.scores.end());
    m.emplace_back("tokenizer.ggml.scores", GGUFMeta::float_array(GGUFType::F32, scores));
  }
  if (v.add_space_prefix) m.emplace_back("tokenizer.ggml.add_space_prefix", GGUFMeta::boolean(*v.add_space_prefix));
  if (!chat_template.empty()) m.emplace_back("tokenizer.chat_template", GGUFMeta::string(chat_template));
  return m;
}

GgufVocab gguf_vocab_from_folder(const std::string& dir) {
  using nlohmann::json;
  // A SentencePiece vocabulary (tokenizer.model, or a tokenizer.json of one): llama.cpp's "llama".
  if (const auto t = find_tokenizer(dir); t && t->kind() == "SentencePiece")
    return static_cast<const SentencePiece&>(*t).to_gguf_vocab();
  GgufVocab v;
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
    const json vocab = model.value("vocab", json::object());  // held: items() of a temporary would dangle
    for (const auto& [tok, id] : vocab.items()) {
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
  const ByteLevelBPE own = ByteLevelBPE::from_folder(dir);
  v.bos_id = own.bos_id(), v.eos_id = own.eos_id(), v.pad_id = own.pad_id(), v.unk_id = own.unk_id();
  v.add_bos = own.add_bos();
  // llama.cpp names the pre-tokenizer; find the one that cuts text as this tokenizer does.
  const std::vector<std::string> probes = {
      "Hello world! It's 2024-12-03, 1234567 apples.\n\n  Tabs\tand   spaces ", "x  1", "I'M here, you'RE there",
      "na\xC3\xAFve caf\xC3\xA9 \xE2\x80\x94 \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x99\x82", "a\r\nb\n\n\nc", "$$$ <tag> ^~|",
      "   leading and trailing   ", "3.14159 + 2718281828 = ?"};
  for (const std::string& name : gguf_pre_tokenizer_types()) {
    GgufVocab c = v;
    c.pre = name;
    bool same = true;
    try {
      const ByteLevelBPE cand = bpe_from_gguf_vocab(c, dir);
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

}  // namespace qkv::tokenize
