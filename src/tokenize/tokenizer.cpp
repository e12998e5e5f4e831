// The tokenizer interface's shared behaviour, its streaming decoder, and the loader that finds a
// model's tokenizer (see tokenizer.h).
#include "qkv/tokenize/tokenizer.h"

#include <filesystem>

#include "json_reader.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/gguf_vocab.h"
#include "qkv/tokenize/sentencepiece.h"
#include "qkv/tokenize/utf8.h"
#include "qkv/tokenize/wordpiece.h"

namespace qkv::tokenize {

// sentencepiece_json.cpp
std::shared_ptr<const Tokenizer> sentencepiece_from_tokenizer_json(const hfjson::json& root, const hfjson::Reader& r,
                                                                   std::string_view config_json,
                                                                   const std::string& config_where);

namespace {

namespace fs = std::filesystem;
using hfjson::json;

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// A tokenizer.json: a SentencePiece-style BPE (byte fallback, a Metaspace pre-tokenizer or a
// Prepend / Replace normalizer) or a byte-level one.
std::shared_ptr<const Tokenizer> from_tokenizer_json(const std::string& path, const std::string& config_path) {
  const std::string text = io::read_file(path, "tokenizer.json");
  const std::string config = config_path.empty() ? std::string() : io::read_file(config_path, "tokenizer_config.json");
  const hfjson::Reader r("tokenizer.json '" + path + "': ");
  const json root = parse_json_strict(text, r.where(), "key");
  r.object(root, "the top level");
  auto type_of = [](const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_object() && it->contains("type") && (*it)["type"].is_string()
               ? (*it)["type"].get<std::string>()
               : std::string();
  };
  // Only a field of the expected type counts here (json::value throws for another one); the
  // reader chosen then names a mistyped field.
  auto string_of = [](const json& j, const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  bool spm = false;
  if (const auto m = root.find("model"); m != root.end() && m->is_object()) {
    const auto bf = m->find("byte_fallback");
    spm = bf != m->end() && bf->is_boolean() && bf->get<bool>();
    // BERT's WordPiece: read from the folder's vocab.txt and tokenizer_config.json (wordpiece.h).
    if (string_of(*m, "type") == "WordPiece")
      return std::make_shared<WordPieceTokenizer>(WordPieceTokenizer::from_folder(fs::path(path).parent_path().string()));
  }
  const std::string pre = type_of(root, "pre_tokenizer"), norm = type_of(root, "normalizer");
  spm = spm || pre == "Metaspace" || norm == "Prepend" || norm == "Replace";
  if (norm == "Sequence")
    if (const auto ns = root.at("normalizer").find("normalizers"); ns != root.at("normalizer").end() && ns->is_array())
      for (const json& n : *ns)
        if (n.is_object() && (string_of(n, "type") == "Prepend" || string_of(n, "type") == "Replace")) spm = true;
  if (spm)
    return sentencepiece_from_tokenizer_json(root, r, config, "tokenizer_config.json '" + config_path + "': ");
  return std::make_shared<ByteLevelBPE>(ByteLevelBPE::from_tokenizer_json(path, config_path));
}

// tokenizer.model, with tokenizer_config.json's special tokens and BOS / EOS flags when present.
std::shared_ptr<const Tokenizer> from_model_file(const std::string& path, const std::string& config_path) {
  SentencePiece sp = SentencePiece::from_model_file(path);
  if (config_path.empty()) return std::make_shared<SentencePiece>(std::move(sp));
  hfjson::SpecialIds ids{.bos = sp.bos_id(), .eos = sp.eos_id(), .pad = sp.pad_id(), .unk = sp.unk_id(),
                         .add_bos = sp.add_bos(), .add_eos = sp.add_eos()};
  hfjson::read_special_config(io::read_file(config_path, "tokenizer_config.json"),
                              "tokenizer_config.json '" + config_path + "': ",
                              [&](const std::string& t) { return sp.token_to_id(t); }, ids);
  return std::make_shared<SentencePiece>(
      sp.with_specials(ids.bos, ids.eos, ids.pad, ids.unk, ids.add_bos, ids.add_eos));
}

}  // namespace

std::vector<std::int64_t> Tokenizer::encode_with_specials(std::string_view text) const {
  std::vector<std::int64_t> ids;
  if (add_bos() && bos_id()) ids.push_back(*bos_id());
  const std::vector<std::int64_t> t = encode(text);
  ids.insert(ids.end(), t.begin(), t.end());
  if (add_eos() && eos_id()) ids.push_back(*eos_id());
  return ids;
}

std::string Tokenizer::decode_bytes(const std::vector<std::int64_t>& ids) const {
  std::string out;
  for (const std::int64_t id : ids) out += token_text(id);
  return out;
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  const std::string raw = decode_bytes(ids);
  std::string out;
  out.reserve(raw.size());
  utf8::append_lossy(raw, /*final=*/true, out);
  if (strips_leading_space() && !out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

StreamDecoder::StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer) : tok_(std::move(tokenizer)) {
  if (!tok_) throw ValueError("StreamDecoder: the tokenizer is null");
}

std::string StreamDecoder::push(std::int64_t id) {
  if (id >= tok_->vocab_size()) return {};  // a row of the model's embedding the tokenizer has no token for
  pending_ += tok_->token_text(id);  // IndexError (a negative id) before any state changes
  // decode() drops one space: the text's first byte when it is one. Once a byte has come (a
  // token of just "▁" too), no later space is the first.
  if (!started_ && !pending_.empty()) {
    if (tok_->strips_leading_space() && pending_.front() == ' ') pending_.erase(0, 1);
    started_ = true;
  }
  std::string out;
  const std::size_t used = utf8::append_lossy(pending_, /*final=*/false, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  utf8::append_lossy(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

std::shared_ptr<const Tokenizer> find_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    if (!io::is_gguf_file(path)) throw FormatError(path + " is not a GGUF file (a model is a .gguf file or a folder)");
    const io::GGUFFile f = io::GGUFFile::open_header(path);
    if (!f.find_value("tokenizer.ggml.model")) return nullptr;
    return tokenizer_from_gguf(f);
  }
  const fs::path dir(path);
  const fs::path config = dir / "tokenizer_config.json";
  const std::string config_path = path_exists(config) ? config.string() : std::string();
  if (path_exists(dir / "tokenizer.json")) return from_tokenizer_json((dir / "tokenizer.json").string(), config_path);
  if (path_exists(dir / "tokenizer.model")) return from_model_file((dir / "tokenizer.model").string(), config_path);
  if (path_exists(dir / "vocab.json") && path_exists(dir / "merges.txt"))
    return std::make_shared<ByteLevelBPE>(ByteLevelBPE::from_folder(path));
  // WordPiece: vocab.txt, or a folder whose tokenizer_config.json names a BERT tokenizer (the
  // reader then names the missing vocab.txt).
  bool bert = path_exists(dir / "vocab.txt");
  if (!bert && !config_path.empty()) {
    try {
      const json c = json::parse(io::read_file(config_path, "tokenizer_config.json"));
      bert = c.is_object() && c.value("tokenizer_class", "").find("Bert") != std::string::npos;
    } catch (const json::exception&) {
    }
  }
  if (bert) return std::make_shared<WordPieceTokenizer>(WordPieceTokenizer::from_folder(path));
  return nullptr;
}

std::shared_ptr<const Tokenizer> tokenizer_from_bpe_files(const std::string& vocab_json, const std::string& merges_txt,
                                                          const std::string& vocab_name, const std::string& merges_name) {
  return std::make_shared<ByteLevelBPE>(ByteLevelBPE::parse(vocab_json, merges_txt, vocab_name, merges_name));
}

std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path) {
  if (!path_exists(path)) throw IOError("'" + path + "' does not exist");
  auto t = find_tokenizer(path);
  if (!t)
    throw IOError("'" + path + "' has no tokenizer (" +
                  (fs::is_regular_file(path) ? std::string("no tokenizer.ggml.* keys in the GGUF file")
                                             : std::string("tokenizer.json, tokenizer.model, vocab.json and merges.txt, "
                                                           "or vocab.txt")) +
                  ")");
  return t;
}

}  // namespace qkv::tokenize
