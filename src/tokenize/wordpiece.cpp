// WordPiece tokenizer (see wordpiece.h): Hugging Face BertTokenizerFast's ids.
#include "qkv/tokenize/wordpiece.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "wordpiece_unicode.h"

namespace qkv::tokenize {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw IOError("error reading " + path);
  return ss.str();
}

nlohmann::json read_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object()) throw FormatError(path + ": expected a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
}

// j[key] as a bool (null and absent keep `dst`); FormatError naming file and key otherwise.
void get_bool(const nlohmann::json& j, const std::string& path, const char* key, bool* dst) {
  if (!j.contains(key) || j.at(key).is_null()) return;
  if (!j.at(key).is_boolean()) throw FormatError(path + ": '" + key + "' must be true or false, got " + j.at(key).dump());
  *dst = j.at(key).get<bool>();
}

void get_string(const nlohmann::json& j, const std::string& path, const char* key, std::string* dst) {
  if (!j.contains(key) || j.at(key).is_null()) return;
  const auto& v = j.at(key);
  if (v.is_string()) {
    *dst = v.get<std::string>();
  } else if (v.is_object() && v.contains("content") && v.at("content").is_string()) {  // AddedToken form
    *dst = v.at("content").get<std::string>();
  } else {
    throw FormatError(path + ": '" + key + "' must be a string, got " + v.dump());
  }
}

// j[key] as a positive integer, or nullopt when absent/null.
std::optional<std::int64_t> get_positive(const nlohmann::json& j, const std::string& path, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  const auto& v = j.at(key);
  if (v.is_number_integer() && v.get<std::int64_t>() > 0) return v.get<std::int64_t>();
  if (v.is_number_float() && v.get<double>() > 1e15) return std::nullopt;  // HF's "no limit" sentinel (1e30)
  throw FormatError(path + ": '" + key + "' must be a positive integer, got " + v.dump());
}

}  // namespace

std::int64_t utf8_invalid_offset(std::string_view s) {
  std::vector<char32_t> cps;
  return detail::utf8_decode(s, &cps);
}

std::vector<std::string> WordPieceTokenizer::read_vocab(const std::string& path) {
  const std::string text = read_file(path);
  if (text.empty()) throw FormatError(path + ": empty vocabulary file");
  std::vector<std::string> vocab;
  std::unordered_map<std::string, std::size_t> seen;
  std::vector<char32_t> scratch;
  std::size_t pos = 0, line = 1;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string tok = text.substr(pos, end - pos);
    if (tok.empty()) throw FormatError(path + ":" + std::to_string(line) + ": empty line (every line is one token)");
    const std::int64_t bad = detail::utf8_decode(tok, &scratch);
    if (bad >= 0) throw FormatError(path + ":" + std::to_string(line) + ": not valid UTF-8 (byte " + std::to_string(bad + 1) + " of the line)");
    auto [it, fresh] = seen.emplace(tok, line);
    if (!fresh)
      throw FormatError(path + ":" + std::to_string(line) + ": duplicate token '" + tok + "' (first on line " +
                        std::to_string(it->second) + ")");
    vocab.push_back(std::move(tok));
    pos = end + 1;
    ++line;
  }
  return vocab;
}

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, const WordPieceOptions& o, const std::string& source)
    : vocab_(std::move(vocab)), opt_(o) {
  if (opt_.max_length < 2) throw ValueError("wordpiece: max_length must be >= 2 ([CLS] and [SEP]), got " + std::to_string(opt_.max_length));
  if (opt_.max_input_chars_per_word < 1)
    throw ValueError("wordpiece: max_input_chars_per_word must be >= 1, got " + std::to_string(opt_.max_input_chars_per_word));
  ids_.reserve(vocab_.size());
  for (std::size_t i = 0; i < vocab_.size(); ++i) {
    if (vocab_[i].empty()) throw ValueError(source + ": token " + std::to_string(i) + " is empty");
    if (!ids_.emplace(vocab_[i], static_cast<std::int64_t>(i)).second)
      throw ValueError(source + ": duplicate token '" + vocab_[i] + "' (id " + std::to_string(i) + ")");
  }
  auto need = [&](const std::string& tok, const char* what) {
    auto it = ids_.find(tok);
    if (it == ids_.end()) throw ValueError(source + ": the " + std::string(what) + " token '" + tok + "' is not in the vocabulary");
    return it->second;
  };
  unk_id_ = need(opt_.unk_token, "unknown");
  cls_id_ = need(opt_.cls_token, "cls");
  sep_id_ = need(opt_.sep_token, "sep");
  pad_id_ = need(opt_.pad_token, "pad");
  for (const std::string* t : {&opt_.pad_token, &opt_.unk_token, &opt_.cls_token, &opt_.sep_token, &opt_.mask_token}) {
    auto it = ids_.find(*t);
    if (it != ids_.end() && std::none_of(specials_.begin(), specials_.end(), [&](const auto& p) { return p.first == *t; }))
      specials_.emplace_back(*t, it->second);
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

WordPieceTokenizer WordPieceTokenizer::from_folder(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string vocab_path = (fs::path(dir) / "vocab.txt").string();
  const std::string config_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (!fs::is_directory(dir)) throw IOError("wordpiece: model folder " + dir + " does not exist");
  if (!fs::exists(vocab_path)) throw IOError("wordpiece: " + vocab_path + " is missing");
  if (!fs::exists(config_path)) throw IOError("wordpiece: " + config_path + " is missing");
  WordPieceOptions o;
  const nlohmann::json j = read_json(config_path);
  get_bool(j, config_path, "do_lower_case", &o.do_lower_case);
  get_bool(j, config_path, "tokenize_chinese_chars", &o.tokenize_chinese_chars);
  if (j.contains("strip_accents") && !j.at("strip_accents").is_null()) {
    bool s = false;
    get_bool(j, config_path, "strip_accents", &s);
    o.strip_accents = s;
  }
  bool basic = true;
  get_bool(j, config_path, "do_basic_tokenize", &basic);
  if (!basic) throw ValueError(config_path + ": 'do_basic_tokenize' false is not supported");
  if (j.contains("never_split") && !j.at("never_split").is_null() && !(j.at("never_split").is_array() && j.at("never_split").empty()))
    throw ValueError(config_path + ": 'never_split' " + j.at("never_split").dump() + " is not supported");
  // The special tokens' names: tokenizer_config.json, overridden by special_tokens_map.json.
  const std::string map_path = (fs::path(dir) / "special_tokens_map.json").string();
  const bool have_map = fs::exists(map_path);
  const nlohmann::json m = have_map ? read_json(map_path) : nlohmann::json::object();
  for (const auto& [key, dst] : {std::pair{"unk_token", &o.unk_token}, {"cls_token", &o.cls_token},
                                 {"sep_token", &o.sep_token}, {"pad_token", &o.pad_token}, {"mask_token", &o.mask_token}}) {
    get_string(j, config_path, key, dst);
    get_string(m, map_path, key, dst);
  }
  std::optional<std::int64_t> max_len = get_positive(j, config_path, "model_max_length");
  const std::string st_path = (fs::path(dir) / "sentence_bert_config.json").string();
  if (fs::exists(st_path)) {
    const nlohmann::json s = read_json(st_path);
    if (auto n = get_positive(s, st_path, "max_seq_length")) max_len = n;
    bool st_lower = false;
    get_bool(s, st_path, "do_lower_case", &st_lower);
    if (st_lower) throw ValueError(st_path + ": 'do_lower_case' true (lower-casing before the tokenizer) is not supported");
  }
  const std::string model_config = (fs::path(dir) / "config.json").string();
  if (fs::exists(model_config)) {
    const nlohmann::json c = read_json(model_config);
    if (auto p = get_positive(c, model_config, "max_position_embeddings"); p && (!max_len || *max_len > *p)) max_len = p;
  }
  o.max_length = max_len.value_or(512);
  return WordPieceTokenizer(read_vocab(vocab_path), o, vocab_path);
}

std::vector<std::string> WordPieceTokenizer::basic_tokenize(std::string_view text, bool match_specials) const {
  std::vector<char32_t> all;
  const std::int64_t bad = detail::utf8_decode(text, &all);
  if (bad >= 0) throw ValueError("wordpiece: text is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  std::vector<std::string> words;
  // Normalises and splits text[begin, end) (no special tokens inside) into words.
  auto plain = [&](std::string_view seg) {
    std::vector<char32_t> in, cps;
    detail::utf8_decode(seg, &in);
    cps.reserve(in.size());
    for (char32_t c : in) {
      if (c == 0 || c == 0xFFFD || detail::is_bert_control(c)) continue;
      if (detail::is_bert_whitespace(c)) {
        cps.push_back(U' ');
      } else if (opt_.tokenize_chinese_chars && detail::is_cjk_ideograph(c)) {
        cps.push_back(U' ');
        cps.push_back(c);
        cps.push_back(U' ');
      } else {
        cps.push_back(c);
      }
    }
    if (opt_.strip_accents.value_or(opt_.do_lower_case)) {
      detail::nfd(&cps);
      std::erase_if(cps, detail::is_nonspacing_mark);
    }
    if (opt_.do_lower_case) detail::lower(&cps);
    std::size_t start = 0;
    for (std::size_t i = 0; i <= cps.size(); ++i) {
      const bool end = i == cps.size();
      const bool ws = !end && detail::is_bert_whitespace(cps[i]);
      const bool punct = !end && !ws && detail::is_bert_punctuation(cps[i]);
      if (end || ws || punct) {
        if (i > start) words.push_back(detail::utf8_encode(cps, start, i));
        if (punct) words.push_back(detail::utf8_encode(cps, i, i + 1));
        start = i + 1;
      }
    }
  };
  std::size_t pos = 0, seg = 0;
  while (match_specials && pos < text.size()) {
    const auto hit = std::find_if(specials_.begin(), specials_.end(),
                                  [&](const auto& s) { return text.substr(pos, s.first.size()) == s.first; });
    if (hit == specials_.end()) {
      ++pos;
      continue;
    }
    plain(text.substr(seg, pos - seg));
    words.push_back(hit->first);
    pos += hit->first.size();
    seg = pos;
  }
  plain(text.substr(seg));
  return words;
}

void WordPieceTokenizer::wordpiece(const std::string& word, std::vector<std::int64_t>* out) const {
  std::vector<char32_t> cps;
  detail::utf8_decode(word, &cps);
  if (static_cast<std::int64_t>(cps.size()) > opt_.max_input_chars_per_word) {
    out->push_back(unk_id_);
    return;
  }
  const std::size_t mark = out->size();
  std::size_t start = 0;
  std::string piece;
  while (start < cps.size()) {
    std::size_t end = cps.size();
    std::int64_t found = -1;
    for (; end > start; --end) {  // longest match first
      piece = start > 0 ? "##" : "";
      piece += detail::utf8_encode(cps, start, end);
      if (auto it = ids_.find(piece); it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {  // no piece matches: the whole word is unknown
      out->resize(mark);
      out->push_back(unk_id_);
      return;
    }
    out->push_back(found);
    start = end;
  }
}

std::vector<std::int64_t> WordPieceTokenizer::encode_ids(std::string_view text, bool match_specials) const {
  std::vector<std::int64_t> ids;
  for (const std::string& w : basic_tokenize(text, match_specials)) {
    auto sp = std::find_if(specials_.begin(), specials_.end(), [&](const auto& s) { return s.first == w; });
    if (match_specials && sp != specials_.end()) ids.push_back(sp->second);
    else wordpiece(w, &ids);
  }
  return ids;
}

std::vector<std::int64_t> WordPieceTokenizer::encode(std::string_view text) const { return encode_ids(text, true); }

std::vector<std::int64_t> WordPieceTokenizer::encode_ordinary(std::string_view text) const {
  return encode_ids(text, false);
}

std::vector<std::int64_t> WordPieceTokenizer::encode_with_specials(std::string_view text) const {
  std::vector<std::int64_t> ids{cls_id_};
  const std::vector<std::int64_t> t = encode_ids(text, true);
  ids.insert(ids.end(), t.begin(), t.end());
  if (static_cast<std::int64_t>(ids.size()) > opt_.max_length - 1) ids.resize(static_cast<std::size_t>(opt_.max_length - 1));
  ids.push_back(sep_id_);
  return ids;
}

std::string WordPieceTokenizer::token_text(std::int64_t id) const {
  const std::string& t = id_to_token(id);
  if (t.size() > 2 && t.compare(0, 2, "##") == 0) return t.substr(2);
  return " " + t;
}

std::string WordPieceTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string out = decode_bytes(ids);
  if (!out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

std::optional<std::int64_t> WordPieceTokenizer::token_to_id(std::string_view token) const {
  if (auto it = ids_.find(std::string(token)); it != ids_.end()) return it->second;
  return std::nullopt;
}

std::vector<std::string> WordPieceTokenizer::special_tokens() const {
  std::vector<std::string> out;
  for (const auto& [text, id] : specials_) out.push_back(text);
  std::sort(out.begin(), out.end());
  return out;
}

bool WordPieceTokenizer::is_special(std::int64_t id) const {
  id_to_token(id);  // IndexError for an id outside the vocabulary
  return std::any_of(specials_.begin(), specials_.end(), [&](const auto& s) { return s.second == id; });
}

EncodedBatch WordPieceTokenizer::pad(const std::vector<std::vector<std::int64_t>>& rows) const {
  std::size_t T = 0;
  for (const auto& r : rows) T = std::max(T, r.size());
  const auto B = static_cast<std::int64_t>(rows.size());
  EncodedBatch b;
  b.input_ids = Tensor::full({B, static_cast<std::int64_t>(T)}, static_cast<double>(pad_id_), DType::I64);
  b.attention_mask = Tensor::zeros({B, static_cast<std::int64_t>(T)}, DType::I64);
  std::int64_t* ids = b.input_ids.data<std::int64_t>();
  std::int64_t* mask = b.attention_mask.data<std::int64_t>();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(), ids + i * T);
    std::fill(mask + i * T, mask + i * T + rows[i].size(), 1);
    b.lengths.push_back(static_cast<std::int64_t>(rows[i].size()));
  }
  return b;
}

EncodedBatch WordPieceTokenizer::encode_batch(const std::vector<std::string>& texts) const {
  std::vector<std::vector<std::int64_t>> rows;
  rows.reserve(texts.size());
  for (const auto& t : texts) rows.push_back(encode_with_specials(t));
  return pad(rows);
}

const std::string& WordPieceTokenizer::id_to_token(std::int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw IndexError("wordpiece: id " + std::to_string(id) + " is out of range [0, " + std::to_string(vocab_size()) + ")");
  return vocab_[static_cast<std::size_t>(id)];
}


}  // namespace qkv::tokenize
