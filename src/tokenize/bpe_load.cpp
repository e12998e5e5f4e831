// Reading GPT-2's vocab.json and merges.txt into ByteLevelBPE's tables, with
// errors that name the file and the token or line at fault.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "bpe_impl.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize {

namespace {

using nlohmann::json;

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

// A token, quoted as JSON for an error message (control characters escaped, invalid UTF-8 replaced).
std::string quote(std::string_view s) {
  constexpr std::size_t kMax = 80;
  std::string cut(s.substr(0, kMax));
  std::string q = json(cut).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMax) q += "...";
  return q;
}

// A JSON value for an error message, cut to one short line.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 80) + "...";
  return s;
}

std::string read_file(const std::string& path, const char* what) {
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

// The raw bytes of a vocab.json token: each character mapped back through
// bytes_to_unicode; a token with a character outside that alphabet is taken
// as its own UTF-8 bytes (what HF's ByteLevel decoder does).
std::string token_to_bytes(const std::string& token) {
  const auto& to_byte = code_point_to_byte();
  std::string out;
  out.reserve(token.size());
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const std::size_t n = token.size();
  for (std::size_t i = 0; i < n;) {
    const utf8::Seq q = utf8::scan(p + i, n - i);
    if (q.kind != utf8::SeqKind::Valid) return token;  // not reachable: the JSON parser checks UTF-8
    char32_t cp = q.len == 1 ? p[i] : (p[i] & (0x7F >> q.len));
    for (std::size_t k = 1; k < q.len; ++k) cp = (cp << 6) | (p[i + k] & 0x3F);
    if (cp >= kNumMapped || to_byte[cp] < 0) return token;
    out += static_cast<char>(to_byte[cp]);
    i += q.len;
  }
  return out;
}

bool is_special(const std::string& token) {
  return token.size() >= 4 && token.compare(0, 2, "<|") == 0 && token.compare(token.size() - 2, 2, "|>") == 0;
}

void read_vocab(ByteLevelBPE::Impl& m, const std::string& text, const std::string& path) {
  const std::string where = "vocab.json '" + path + "': ";
  // A JSON object may repeat a key (the parser would keep the last); a vocabulary must not.
  std::unordered_set<std::string> seen;
  std::string duplicate;
  bool has_duplicate = false;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth == 1 && ev == json::parse_event_t::key && parsed.is_string() && !has_duplicate) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) has_duplicate = true, duplicate = key;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text, on_event);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number beyond double (1e400)
    throw FormatError(where + "not valid JSON: " + e.what());
  }
  if (!j.is_object())
    throw FormatError(where + "the top level must be a JSON object {token: id}, got " + std::string(j.type_name()));
  if (has_duplicate) throw FormatError(where + "token " + quote(duplicate) + " appears twice");
  const std::size_t v = j.size();
  if (v == 0) throw FormatError(where + "the object has no tokens");
  if (v > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw FormatError(where + std::to_string(v) + " tokens is more than qkv supports (2^31 - 1)");
  const std::string dense = "the ids of " + std::to_string(v) + " tokens must be exactly 0.." +
                            std::to_string(v - 1) + ", each once";
  std::vector<const std::string*> owner(v, nullptr);
  m.bytes.assign(v, std::string());
  m.ids.reserve(v);
  for (const auto& [token, value] : j.items()) {
    if (!value.is_number_integer())
      throw FormatError(where + "token " + quote(token) + ": the id must be an integer, got " +
                        (value.is_string() ? quote(value.get_ref<const std::string&>()) : shown(value)));
    const bool negative = value.is_number_unsigned() ? false : value.get<std::int64_t>() < 0;
    if (negative || value.get<std::uint64_t>() >= v)
      throw FormatError(where + "token " + quote(token) + " has id " + value.dump() + "; " + dense);
    const std::size_t id = value.get<std::size_t>();
    if (owner[id])
      throw FormatError(where + "id " + std::to_string(id) + " belongs to both " + quote(*owner[id]) + " and " +
                        quote(token) + "; " + dense);
    auto [it, fresh] = m.ids.emplace(token, static_cast<std::int32_t>(id));
    owner[id] = &it->first;
    m.bytes[id] = token_to_bytes(token);
    if (is_special(token)) {
      m.specials.emplace(token, static_cast<std::int32_t>(id));
      m.max_special_len = std::max(m.max_special_len, token.size());
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string one;
    utf8::append_code_point(byte_to_code_point(static_cast<unsigned char>(b)), one);
    const auto it = m.ids.find(one);
    m.byte_id[b] = it == m.ids.end() ? -1 : it->second;
  }
  if (const auto it = m.ids.find(std::string_view("<|endoftext|>")); it != m.ids.end()) m.eos = it->second;
}

void read_merges(ByteLevelBPE::Impl& m, const std::string& text, const std::string& path) {
  std::vector<std::size_t> line_of_rank;
  std::size_t pos = 0, line_no = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF, as Rust's lines() allows
    if (line.starts_with("#version")) continue;
    const std::string where = "merges.txt '" + path + "' line " + std::to_string(line_no) + ": ";
    const std::size_t sp = line.find(' ');
    if (line.empty()) throw FormatError(where + "malformed: empty line (expected a merge \"a b\")");
    if (sp == std::string_view::npos || sp == 0 || sp + 1 == line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      throw FormatError(where + "malformed: expected two tokens separated by one space, got " + quote(line));
    const std::string_view a = line.substr(0, sp), b = line.substr(sp + 1);
    const auto ia = m.ids.find(a), ib = m.ids.find(b);
    if (ia == m.ids.end())
      throw FormatError(where + "token " + quote(a) + " of merge " + quote(line) + " is not in vocab.json");
    if (ib == m.ids.end())
      throw FormatError(where + "token " + quote(b) + " of merge " + quote(line) + " is not in vocab.json");
    std::string joined;
    joined.reserve(line.size() - 1);
    joined.append(a).append(b);
    const auto ir = m.ids.find(joined);
    if (ir == m.ids.end())
      throw FormatError(where + "the result " + quote(joined) + " of merge " + quote(line) + " is not in vocab.json");
    const auto rank = static_cast<std::int32_t>(line_of_rank.size());
    const auto [it, fresh] =
        m.merges.emplace(ByteLevelBPE::Impl::pair_key(ia->second, ib->second), Merge{rank, ir->second});
    if (!fresh)
      throw FormatError(where + "duplicate merge " + quote(line) + " (already on line " +
                        std::to_string(line_of_rank[it->second.rank]) + ")");
    line_of_rank.push_back(line_no);
  }
}

}  // namespace

char32_t byte_to_code_point(unsigned char b) {
  const auto printable = [](unsigned c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE; };
  if (printable(b)) return b;
  char32_t n = 0;  // rank of b among the non-printable bytes
  for (unsigned c = 0; c < b; ++c) n += !printable(c);
  return 256 + n;
}

ByteLevelBPE ByteLevelBPE::load(const std::string& vocab_json, const std::string& merges_txt) {
  const std::string vocab = read_file(vocab_json, "vocab.json");
  const std::string merges = read_file(merges_txt, "merges.txt");
  return parse(vocab, merges, vocab_json, merges_txt);
}

ByteLevelBPE ByteLevelBPE::parse(const std::string& vocab_json_text, const std::string& merges_txt_text,
                                 const std::string& vocab_name, const std::string& merges_name) {
  auto m = std::make_shared<Impl>();
  read_vocab(*m, vocab_json_text, vocab_name);
  read_merges(*m, merges_txt_text, merges_name);
  return ByteLevelBPE(std::move(m));
}

ByteLevelBPE ByteLevelBPE::from_folder(const std::string& dir) {
  return load(dir + "/vocab.json", dir + "/merges.txt");
}

}  // namespace qkv::tokenize
