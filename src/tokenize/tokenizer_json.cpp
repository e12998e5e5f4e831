// Hugging Face tokenizer.json (and tokenizer_config.json's special tokens) -> ByteLevelBPE.
//
// Read strictly: every field qkv uses is checked for its JSON type, and every component other
// than the ones a byte-level BPE needs is refused with a message naming the field and the
// value (e.g. "pre_tokenizer.pretokenizers[0].type: pre-tokenizer "Metaspace" is not
// supported ..."). truncation and padding are ignored (callers cut and pad).
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "bpe_impl.h"
#include "qkv/core/error.h"

namespace qkv::tokenize {

namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}
  const std::string& where() const { return where_; }

  [[noreturn]] void fail(const std::string& field, const std::string& msg) const {
    throw FormatError(where_ + field + ": " + msg);
  }
  const json& object(const json& j, const std::string& field) const {
    if (!j.is_object()) fail(field, "must be a JSON object, got " + shown(j));
    return j;
  }
  // obj[key], which must exist.
  const json& member(const json& obj, const char* key, const std::string& field) const {
    const auto it = obj.find(key);
    if (it == obj.end()) fail(field, std::string("has no \"") + key + "\"");
    return *it;
  }
  const json& array(const json& obj, const char* key, const std::string& field) const {
    const json& a = member(obj, key, field);
    if (!a.is_array()) fail(field + "." + key, "must be an array, got " + shown(a));
    return a;
  }
  bool boolean(const json& obj, const char* key, const std::string& field, bool fallback) const {
    const auto it = obj.find(key);
    if (it == obj.end()) return fallback;
    if (!it->is_boolean()) fail(field + "." + key, "must be true or false, got " + shown(*it));
    return it->get<bool>();
  }
  const std::string& string(const json& obj, const char* key, const std::string& field) const {
    const json& s = member(obj, key, field);
    if (!s.is_string()) fail(field + "." + key, "must be a string, got " + shown(s));
    return s.get_ref<const std::string&>();
  }
  // A null-or-string member; "" when null or absent.
  std::string optional_string(const json& obj, const char* key, const std::string& field) const {
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return {};
    if (!it->is_string()) fail(field + "." + key, "must be a string or null, got " + shown(*it));
    return it->get<std::string>();
  }
  const std::string& type(const json& j, const std::string& field) const { return string(object(j, field), "type", field); }

 private:
  std::string where_;
};

std::string at(const std::string& field, std::size_t i) { return field + "[" + std::to_string(i) + "]"; }

void read_normalizer(const Reader& r, const json& j, const std::string& field, Normalization& norm) {
  if (j.is_null()) return;
  const std::string& type = r.type(j, field);
  if (type == "NFC") {
    norm = Normalization::NFC;
  } else if (type == "Sequence") {
    const json& list = r.array(j, "normalizers", field);
    for (std::size_t i = 0; i < list.size(); ++i) read_normalizer(r, list[i], at(field + ".normalizers", i), norm);
  } else {
    r.fail(field + ".type", "normalizer " + quote(type) + " is not supported (qkv supports NFC and Sequence)");
  }
}

SplitBehavior behavior_of(const Reader& r, const json& j, const std::string& field) {
  static const std::pair<const char*, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::Removed},
      {"Isolated", SplitBehavior::Isolated},
      {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
      {"MergedWithNext", SplitBehavior::MergedWithNext},
      {"Contiguous", SplitBehavior::Contiguous}};
  const std::string& name = r.string(j, "behavior", field);
  for (const auto& [n, b] : kNames)
    if (name == n) return b;
  r.fail(field + ".behavior", quote(name) +
                                  " is not a split behavior (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                                  "Contiguous)");
}

void read_pre_tokenizer(const Reader& r, const json& j, const std::string& field, std::vector<PreTokenizeStep>& steps,
                        int depth = 0) {
  if (depth > 16) r.fail(field, "Sequences nest deeper than 16 levels");
  const std::string& type = r.type(j, field);
  PreTokenizeStep st;
  if (type == "Sequence") {
    const json& list = r.array(j, "pretokenizers", field);
    for (std::size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(r, list[i], at(field + ".pretokenizers", i), steps, depth + 1);
    return;
  }
  if (type == "ByteLevel") {  // HF's defaults: add_prefix_space true, use_regex true
    st.kind = PreTokenizeStep::Kind::ByteLevel;
    st.add_prefix_space = r.boolean(j, "add_prefix_space", field, true);
    st.use_regex = r.boolean(j, "use_regex", field, true);
    r.boolean(j, "trim_offsets", field, true);  // offsets only; checked for its type
  } else if (type == "Split") {
    st.kind = PreTokenizeStep::Kind::Split;
    const json& pattern = r.object(r.member(j, "pattern", field), field + ".pattern");
    if (pattern.size() != 1 || !(pattern.contains("Regex") || pattern.contains("String")))
      r.fail(field + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}, got " + shown(pattern));
    st.regex = pattern.contains("Regex");
    st.pattern = r.string(pattern, st.regex ? "Regex" : "String", field + ".pattern");
    st.behavior = behavior_of(r, j, field);
    st.invert = r.boolean(j, "invert", field, false);
  } else if (type == "Digits") {
    st.kind = PreTokenizeStep::Kind::Digits;
    st.individual_digits = r.boolean(j, "individual_digits", field, false);
  } else {
    r.fail(field + ".type", "pre-tokenizer " + quote(type) +
                                " is not supported (qkv supports ByteLevel, Split, Digits and Sequence)");
  }
  steps.push_back(std::move(st));
}

std::vector<AddedToken> read_added(const Reader& r, const json& root) {
  std::vector<AddedToken> out;
  const auto it = root.find("added_tokens");
  if (it == root.end() || it->is_null()) return out;
  if (!it->is_array()) r.fail("added_tokens", "must be an array, got " + shown(*it));
  for (std::size_t i = 0; i < it->size(); ++i) {
    const std::string field = at("added_tokens", i);
    const json& t = r.object((*it)[i], field);
    const json& id = r.member(t, "id", field);
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() > std::numeric_limits<std::int32_t>::max())
      r.fail(field + ".id", "must be an integer in 0..2^31-1, got " + shown(id));
    AddedToken a;
    a.id = id.get<std::int32_t>();
    a.content = r.string(t, "content", field);
    a.special = r.boolean(t, "special", field, false);
    a.lstrip = r.boolean(t, "lstrip", field, false);
    a.rstrip = r.boolean(t, "rstrip", field, false);
    a.normalized = r.boolean(t, "normalized", field, !a.special);
    if (r.boolean(t, "single_word", field, false))
      r.fail(field + ".single_word", "true is not supported (token " + quote(a.content) + ")");
    out.push_back(std::move(a));
  }
  return out;
}

// The BPE model: vocabulary (with the added tokens' ids), merges and options.
void read_model(const Reader& r, const json& root, const std::vector<AddedToken>& added, ByteLevelBPE::Impl& m) {
  if (!root.contains("model")) r.fail("model", "is missing");
  const json& model = r.object(root["model"], "model");
  if (const std::string& type = r.type(model, "model"); type != "BPE")
    r.fail("model.type", "model " + quote(type) + " is not supported (qkv reads byte-level BPE)");
  if (const auto d = model.find("dropout"); d != model.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0))
    r.fail("model.dropout", shown(*d) + " is not supported (qkv encodes deterministically; use null)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const std::string s = r.optional_string(model, key, "model"); !s.empty())
      r.fail(std::string("model.") + key, quote(s) + " is not supported (byte-level BPE has none)");
  if (r.boolean(model, "byte_fallback", "model", false))
    r.fail("model.byte_fallback", "true is not supported (byte-level BPE has every byte as a token)");
  m.fuse_unk = r.boolean(model, "fuse_unk", "model", false);
  m.ignore_merges = r.boolean(model, "ignore_merges", "model", false);

  const json& vocab = r.object(r.member(model, "vocab", "model"), "model.vocab");
  const std::size_t limit = vocab.size() + added.size();  // dense ids: none can reach this
  if (limit == 0) r.fail("model.vocab", "has no tokens");
  if (limit > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    r.fail("model.vocab", std::to_string(limit) + " tokens is more than qkv supports (2^31 - 1)");
  const std::string rule = "the ids of model.vocab and added_tokens together must be 0..V-1, each once";
  std::vector<std::string> tokens;
  std::vector<bool> present;
  read_vocab_object(vocab, r.where() + "model.vocab: ", limit, rule, tokens, present);
  std::vector<bool> held = present;  // by a vocabulary token or an added token
  for (std::size_t i = 0; i < added.size(); ++i) {
    if (static_cast<std::size_t>(added[i].id) >= limit)
      r.fail(at("added_tokens", i) + ".id", std::to_string(added[i].id) + " leaves a gap; " + rule);
    held[static_cast<std::size_t>(added[i].id)] = true;
  }
  const std::size_t v = static_cast<std::size_t>(std::find(held.rbegin(), held.rend(), true).base() - held.begin());
  if (const auto hole = std::find(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(v), false);
      hole != held.begin() + static_cast<std::ptrdiff_t>(v))
    r.fail("model.vocab", "no token has id " + std::to_string(hole - held.begin()) + "; " + rule);
  tokens.resize(v);
  present.resize(v);
  m.set_vocab(tokens, present);

  const json& merges = r.array(model, "merges", "model");
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string field = at("model.merges", i);
    const json& e = merges[i];
    std::string a, b;
    if (e.is_string()) {  // "a b", as a line of merges.txt
      const std::string& s = e.get_ref<const std::string&>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
        r.fail(field, "expected two tokens separated by one space, got " + quote(s));
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    } else {
      r.fail(field, "a merge must be \"a b\" or [\"a\", \"b\"], got " + shown(e));
    }
    m.add_merge(a, b, r.where() + field + ": ", "model.vocab",
                [](std::int32_t rank) { return "at " + at("model.merges", static_cast<std::size_t>(rank)); });
  }
  if (const std::string unk = r.optional_string(model, "unk_token", "model"); !unk.empty()) {
    const auto it = m.ids.find(unk);
    if (it == m.ids.end()) r.fail("model.unk_token", quote(unk) + " is not in model.vocab");
    m.bpe_unk = it->second;
    m.unk = it->second;
  }
}

// The id of special token `name` in a TemplateProcessing's special_tokens.
std::int64_t template_token(const Reader& r, const json& proc, const std::string& name, const std::string& field,
                            std::size_t v) {
  const json& specials = r.object(r.member(proc, "special_tokens", field), field + ".special_tokens");
  const std::string f = field + ".special_tokens." + name;
  const json& ids = r.array(r.object(r.member(specials, name.c_str(), field + ".special_tokens"), f), "ids", f);
  if (ids.size() != 1 || !ids[0].is_number_unsigned() || ids[0].get<std::uint64_t>() >= v)
    r.fail(f + ".ids", "must be one token id below " + std::to_string(v) + ", got " + shown(ids));
  return ids[0].get<std::int64_t>();
}

void read_post_processor(const Reader& r, const json& j, const std::string& field, ByteLevelBPE::Impl& m) {
  if (j.is_null()) return;
  const std::string& type = r.type(j, field);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const json& list = r.array(j, "processors", field);
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(r, list[i], at(field + ".processors", i), m);
    return;
  }
  if (type != "TemplateProcessing")
    r.fail(field + ".type", "post-processor " + quote(type) +
                                " is not supported (qkv supports TemplateProcessing, ByteLevel and Sequence)");
  // single: [SpecialToken BOS]? Sequence A [SpecialToken EOS]?
  const json& single = r.array(j, "single", field);
  bool seen_a = false;
  for (std::size_t i = 0; i < single.size(); ++i) {
    const std::string f = at(field + ".single", i);
    const json& item = r.object(single[i], f);
    if (item.size() == 1 && item.contains("Sequence")) {
      const json& seq = r.object(item["Sequence"], f + ".Sequence");
      if (seen_a || r.string(seq, "id", f + ".Sequence") != "A")
        r.fail(f, "the single template must hold the sequence A once, got " + shown(single));
      seen_a = true;
    } else if (item.size() == 1 && item.contains("SpecialToken")) {
      const json& tok = r.object(item["SpecialToken"], f + ".SpecialToken");
      const std::int64_t id = template_token(r, j, r.string(tok, "id", f + ".SpecialToken"), field, m.bytes.size());
      bool& flag = seen_a ? m.add_eos : m.add_bos;
      if (flag) r.fail(f, "more than one special token on one side of the sequence is not supported");
      flag = true;
      (seen_a ? m.eos : m.bos) = id;
    } else {
      r.fail(f, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}, got " + shown(item));
    }
  }
  if (!seen_a) r.fail(field + ".single", "has no sequence A: " + shown(single));
}

// tokenizer_config.json: the special tokens by name (a string or {"content": ...}) and the BOS/EOS flags.
void read_config(std::string_view text, const std::string& where, ByteLevelBPE::Impl& m) {
  const Reader r(where);
  const json root = parse_json_strict(text, r.where(), "key");
  r.object(root, "the top level");
  const std::pair<const char*, std::optional<std::int64_t>*> kTokens[] = {
      {"bos_token", &m.bos}, {"eos_token", &m.eos}, {"pad_token", &m.pad}, {"unk_token", &m.unk}};
  for (const auto& [key, slot] : kTokens) {
    const auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    const json* content = &*it;
    if (it->is_object()) content = &r.member(*it, "content", key);
    if (!content->is_string()) r.fail(key, "must be a string, {\"content\": string} or null, got " + shown(*it));
    const std::string& token = content->get_ref<const std::string&>();
    std::optional<std::int64_t> id;
    if (const auto a = m.added_ids.find(token); a != m.added_ids.end())
      id = a->second;
    else if (const auto v = m.ids.find(token); v != m.ids.end())
      id = v->second;
    if (!id) r.fail(key, quote(token) + " is not a token of tokenizer.json");
    *slot = id;
  }
  for (const auto& [key, flag] : {std::pair{"add_bos_token", &m.add_bos}, std::pair{"add_eos_token", &m.add_eos}}) {
    const auto it = root.find(key);
    if (it == root.end() || it->is_null()) continue;
    if (!it->is_boolean()) r.fail(key, "must be true or false, got " + shown(*it));
    *flag = it->get<bool>();
  }
  if (m.add_bos && !m.bos) r.fail("add_bos_token", "is true but there is no bos_token");
  if (m.add_eos && !m.eos) r.fail("add_eos_token", "is true but there is no eos_token");
}

ByteLevelBPE build(std::string_view text, const std::string& name, std::string_view config_json,
                   const std::string& config_where);

}  // namespace

ByteLevelBPE ByteLevelBPE::from_tokenizer_json_text(std::string_view text, const std::string& name,
                                                    std::string_view config_json) {
  return build(text, name, config_json, "tokenizer_config.json (for '" + name + "'): ");
}

ByteLevelBPE ByteLevelBPE::from_tokenizer_json(const std::string& path, const std::string& config_path) {
  const std::string text = read_text_file(path, "tokenizer.json");
  const std::string config = config_path.empty() ? std::string() : read_text_file(config_path, "tokenizer_config.json");
  const std::string config_where = "tokenizer_config.json '" + config_path + "': ";
  if (!config_path.empty() && config.empty()) throw FormatError(config_where + "the file is empty");
  return build(text, path, config, config_where);
}

namespace {

ByteLevelBPE build(std::string_view text, const std::string& name, std::string_view config_json,
                   const std::string& config_where) {
  using Impl = ByteLevelBPE::Impl;
  const Reader r("tokenizer.json '" + name + "': ");
  const json root = parse_json_strict(text, r.where(), "key");
  r.object(root, "the top level");
  auto m = std::make_shared<Impl>();
  if (const auto it = root.find("normalizer"); it != root.end())
    read_normalizer(r, *it, "normalizer", m->normalization);
  const auto pre = root.find("pre_tokenizer");
  if (pre == root.end() || pre->is_null())
    r.fail("pre_tokenizer", "is missing; a byte-level BPE needs a ByteLevel pre-tokenizer");
  std::vector<PreTokenizeStep> steps;
  read_pre_tokenizer(r, *pre, "pre_tokenizer", steps);
  const auto byte_level = std::count_if(steps.begin(), steps.end(), [](const PreTokenizeStep& s) {
    return s.kind == PreTokenizeStep::Kind::ByteLevel;
  });
  if (byte_level != 1 || steps.back().kind != PreTokenizeStep::Kind::ByteLevel)
    r.fail("pre_tokenizer", "qkv needs exactly one ByteLevel step, as the last one; got " + shown(*pre));
  m->pre = PreTokenizer(std::move(steps), r.where() + "pre_tokenizer");
  const auto decoder = root.find("decoder");
  if (decoder == root.end() || decoder->is_null()) r.fail("decoder", "is missing; a byte-level BPE needs ByteLevel");
  if (const std::string& type = r.type(*decoder, "decoder"); type != "ByteLevel")
    r.fail("decoder.type", "decoder " + quote(type) + " is not supported (qkv decodes byte-level BPE: ByteLevel)");

  const std::vector<AddedToken> added = read_added(r, root);
  read_model(r, root, added, *m);
  for (std::size_t i = 0; i < added.size(); ++i) m->add_token(added[i], r.where() + at("added_tokens", i) + ": ");
  if (const auto it = root.find("post_processor"); it != root.end())
    read_post_processor(r, *it, "post_processor", *m);
  if (!m->eos) {
    if (const auto it = m->added_ids.find(std::string_view("<|endoftext|>")); it != m->added_ids.end())
      m->eos = it->second;
    else if (const auto v = m->ids.find(std::string_view("<|endoftext|>")); v != m->ids.end())
      m->eos = v->second;
  }
  if (!config_json.empty()) read_config(config_json, config_where, *m);
  m->finish();
  return Impl::wrap(std::move(m));
}

}  // namespace

}  // namespace qkv::tokenize
