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
#include "json_reader.h"
#include "qkv/core/error.h"

namespace qkv::tokenize {

namespace {

using nlohmann::json;
using namespace hfjson;


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
  SpecialIds ids;
  if (const auto it = root.find("post_processor"); it != root.end())
    read_post_processor(r, *it, "post_processor", m->bytes.size(), ids);
  m->bos = ids.bos, m->eos = ids.eos, m->add_bos = ids.add_bos, m->add_eos = ids.add_eos;
  if (!m->eos) {
    if (const auto it = m->added_ids.find(std::string_view("<|endoftext|>")); it != m->added_ids.end())
      m->eos = it->second;
    else if (const auto v = m->ids.find(std::string_view("<|endoftext|>")); v != m->ids.end())
      m->eos = v->second;
  }
  if (!config_json.empty()) {
    ids = {.bos = m->bos, .eos = m->eos, .pad = m->pad, .unk = m->unk, .add_bos = m->add_bos, .add_eos = m->add_eos};
    read_special_config(config_json, config_where, [&](const std::string& token) -> std::optional<std::int64_t> {
      if (const auto a = m->added_ids.find(token); a != m->added_ids.end()) return a->second;
      if (const auto v = m->ids.find(token); v != m->ids.end()) return v->second;
      return std::nullopt;
    }, ids);
    m->bos = ids.bos, m->eos = ids.eos, m->pad = ids.pad, m->unk = ids.unk, m->add_bos = ids.add_bos, m->add_eos = ids.add_eos;
  }
  m->finish();
  return Impl::wrap(std::move(m));
}

}  // namespace

}  // namespace qkv::tokenize
