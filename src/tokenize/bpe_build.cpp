// What every tokenizer source shares once its file is parsed: the byte alphabet, the
// vocabulary tables, merges, added tokens and the normalizer (bpe_impl.h).
#include <utf8proc.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "bpe_impl.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize {

namespace {

constexpr std::size_t kNumMapped = 256 + 68;  // bytes_to_unicode's code points are all below U+0144

// code point -> byte for bytes_to_unicode's image; -1 elsewhere.
const std::array<int, kNumMapped>& code_point_to_byte() {
  static const std::array<int, kNumMapped> table = [] {
    std::array<int, kNumMapped> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[byte_to_code_point(static_cast<unsigned char>(b))] = b;
    return t;
  }();
  return table;
}

}  // namespace

char32_t byte_to_code_point(unsigned char b) {
  const auto printable = [](unsigned c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE; };
  if (printable(b)) return b;
  char32_t n = 0;  // rank of b among the non-printable bytes
  for (unsigned c = 0; c < b; ++c) n += !printable(c);
  return 256 + n;
}

std::string token_to_bytes(std::string_view token, bool* spelled) {
  const auto& to_byte = code_point_to_byte();
  std::string out;
  out.reserve(token.size());
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const std::size_t n = token.size();
  if (spelled) *spelled = false;
  for (std::size_t i = 0; i < n;) {
    const utf8::Seq q = utf8::scan(p + i, n - i);
    if (q.kind != utf8::SeqKind::Valid) return std::string(token);  // a GGUF string need not be UTF-8
    char32_t cp = q.len == 1 ? p[i] : (p[i] & (0x7F >> q.len));
    for (std::size_t k = 1; k < q.len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    if (cp >= kNumMapped || to_byte[cp] < 0) return std::string(token);
    out += static_cast<char>(to_byte[cp]);
    i += q.len;
  }
  if (spelled) *spelled = true;
  return out;
}

std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 80;
  using nlohmann::json;
  std::string q = json(std::string(s.substr(0, kMax))).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMax) q += "...";
  return q;
}

std::string shown(const nlohmann::json& v) {
  using nlohmann::json;
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 80) + "...";
  return s;
}

std::string read_text_file(const std::string& path, const char* what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw IOError(std::string("bpe: cannot read ") + what + " '" + path + "': it is a directory");
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError(std::string("bpe: cannot open ") + what + " '" + path + "': " + std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw IOError(std::string("bpe: error while reading ") + what + " '" + path + "'");
  return ss.str();
}

nlohmann::json parse_json_strict(std::string_view text, const std::string& where, const char* key_word) {
  using nlohmann::json;
  std::vector<std::unordered_set<std::string>> open;  // the keys of each object being parsed
  std::string duplicate;
  bool has_duplicate = false;
  json::parser_callback_t on_event = [&](int, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (ev == json::parse_event_t::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (ev == json::parse_event_t::key && parsed.is_string() && !has_duplicate && !open.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open.back().insert(key).second) has_duplicate = true, duplicate = key;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, on_event);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number beyond double (1e400)
    throw FormatError(where + "not valid JSON: " + e.what());
  }
  if (has_duplicate) throw FormatError(where + key_word + " " + quote(duplicate) + " appears twice");
  return j;
}

void read_vocab_object(const nlohmann::json& vocab, const std::string& where, std::size_t limit,
                       const std::string& rule, std::vector<std::string>& tokens, std::vector<bool>& present) {
  tokens.assign(limit, std::string());
  present.assign(limit, false);
  for (const auto& [token, value] : vocab.items()) {
    if (!value.is_number_integer())
      throw FormatError(where + "token " + quote(token) + ": the id must be an integer, got " +
                        (value.is_string() ? quote(value.get_ref<const std::string&>()) : shown(value)));
    const bool negative = value.is_number_unsigned() ? false : value.get<std::int64_t>() < 0;
    if (negative || value.get<std::uint64_t>() >= limit)
      throw FormatError(where + "token " + quote(token) + " has id " + value.dump() + "; " + rule);
    const std::size_t id = value.get<std::size_t>();
    if (present[id])
      throw FormatError(where + "id " + std::to_string(id) + " belongs to both " + quote(tokens[id]) + " and " +
                        quote(token) + "; " + rule);
    tokens[id] = token;
    present[id] = true;
  }
}

bool nfc(std::string_view s, std::string& out) {
  if (std::none_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) >= 0xCC; })) return false;
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()), &dst,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) throw ValueError(std::string("tokenize: NFC normalization failed: ") + utf8proc_errmsg(n));
  out.assign(reinterpret_cast<const char*>(dst), static_cast<std::size_t>(n));
  std::free(dst);
  return true;
}

// ---------------------------------------------------------------- added tokens

void AddedMatcher::add(std::string_view content, std::int32_t index) {
  if (content.empty() || !by_content_.emplace(std::string(content), index).second) return;
  first_[static_cast<unsigned char>(content[0])] = true;
  if (std::find(lengths_.begin(), lengths_.end(), content.size()) == lengths_.end()) {
    lengths_.push_back(content.size());
    std::sort(lengths_.begin(), lengths_.end(), std::greater<>());
  }
}

std::optional<AddedMatcher::Hit> AddedMatcher::find(std::string_view text, std::size_t from) const {
  for (std::size_t p = from; p < text.size(); ++p) {
    if (!first_[static_cast<unsigned char>(text[p])]) continue;
    for (const std::size_t len : lengths_) {
      if (len > text.size() - p) continue;
      if (const auto it = by_content_.find(text.substr(p, len)); it != by_content_.end())
        return Hit{p, p + len, it->second};
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- tables

void ByteLevelBPE::Impl::set_vocab(const std::vector<std::string>& tokens, const std::vector<bool>& present) {
  bytes.assign(tokens.size(), std::string());
  ids.reserve(tokens.size());
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (!present[id]) continue;
    bytes[id] = token_to_bytes(tokens[id]);
    ids.insert_or_assign(tokens[id], static_cast<std::int32_t>(id));  // a repeated token (GGUF): the last id
  }
  for (int b = 0; b < 256; ++b) {
    std::string one;
    utf8::append_code_point(byte_to_code_point(static_cast<unsigned char>(b)), one);
    const auto it = ids.find(one);
    byte_id[b] = it == ids.end() ? -1 : it->second;
  }
}

void ByteLevelBPE::Impl::add_merge(std::string_view a, std::string_view b, const std::string& where,
                                   const char* vocab_name,
                                   const std::function<std::string(std::int32_t)>& rank_where) {
  const std::string merge_text = quote(std::string(a) + " " + std::string(b));
  const auto ia = ids.find(a), ib = ids.find(b);
  if (ia == ids.end()) throw FormatError(where + "token " + quote(a) + " of merge " + merge_text + " is not in " + vocab_name);
  if (ib == ids.end()) throw FormatError(where + "token " + quote(b) + " of merge " + merge_text + " is not in " + vocab_name);
  std::string joined;
  joined.reserve(a.size() + b.size());
  joined.append(a).append(b);
  const auto ir = ids.find(joined);
  if (ir == ids.end())
    throw FormatError(where + "the result " + quote(joined) + " of merge " + merge_text + " is not in " + vocab_name);
  const auto rank = static_cast<std::int32_t>(merges.size());
  const auto [it, fresh] = merges.emplace(pair_key(ia->second, ib->second), Merge{rank, ir->second});
  if (!fresh) throw FormatError(where + "duplicate merge " + merge_text + " (already " + rank_where(it->second.rank) + ")");
}

void ByteLevelBPE::Impl::add_token(AddedToken t, const std::string& where) {
  const auto v = static_cast<std::int64_t>(bytes.size());
  if (t.id < 0 || t.id >= v)
    throw FormatError(where + "id " + std::to_string(t.id) + " is outside the vocabulary (ids 0.." +
                      std::to_string(v - 1) + ")");
  if (t.content.empty()) throw FormatError(where + "the token (id " + std::to_string(t.id) + ") is empty");
  if (const auto bad = utf8::find_invalid(t.content))
    throw FormatError(where + "the token " + quote(t.content) + " (id " + std::to_string(t.id) +
                      ") is not valid UTF-8 (byte " + std::to_string(bad->offset) + "), so no text can contain it");
  if (const auto [it, fresh] = added_ids.emplace(t.content, t.id); !fresh)
    throw FormatError(where + "the token " + quote(t.content) + " is added twice (ids " + std::to_string(it->second) +
                      " and " + std::to_string(t.id) + ")");
  if (added_slot.empty()) added_slot.assign(bytes.size(), -1);
  std::int32_t& slot = added_slot[static_cast<std::size_t>(t.id)];
  if (slot >= 0)
    throw FormatError(where + "id " + std::to_string(t.id) + " is given to two added tokens, " +
                      quote(added[static_cast<std::size_t>(slot)].content) + " and " + quote(t.content));
  slot = static_cast<std::int32_t>(added.size());
  bytes[static_cast<std::size_t>(t.id)] = token_to_bytes(t.content);  // HF decodes an added token from its content
  added.push_back(std::move(t));
}

void ByteLevelBPE::Impl::finish() {
  added_slot = {};
  std::sort(added.begin(), added.end(), [](const AddedToken& x, const AddedToken& y) { return x.id < y.id; });
  for (std::size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    const auto index = static_cast<std::int32_t>(i);
    if (!t.normalized) {
      raw_added.add(t.content, index);
      continue;
    }
    std::string normal;
    normalized_added.add(normalization == Normalization::NFC && nfc(t.content, normal) ? normal : t.content, index);
  }
  if (ignore_merges)
    for (const auto& [token, id] : ids) {
      bool spelled = false;
      std::string raw = token_to_bytes(token, &spelled);
      if (spelled) whole.emplace(std::move(raw), id);
    }
}

}  // namespace qkv::tokenize
