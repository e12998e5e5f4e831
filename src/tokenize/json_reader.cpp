// Strict reading of Hugging Face tokenizer files (see json_reader.h).
#include "json_reader.h"

namespace qkv::tokenize::hfjson {

// The id of special token `name` in a TemplateProcessing's special_tokens.
namespace {

std::int64_t template_token(const Reader& r, const json& proc, const std::string& name, const std::string& field,
                            std::size_t v) {
  const json& specials = r.object(r.member(proc, "special_tokens", field), field + ".special_tokens");
  const std::string f = field + ".special_tokens." + name;
  const json& ids = r.array(r.object(r.member(specials, name.c_str(), field + ".special_tokens"), f), "ids", f);
  if (ids.size() != 1 || !ids[0].is_number_unsigned() || ids[0].get<std::uint64_t>() >= v)
    r.fail(f + ".ids", "must be one token id below " + std::to_string(v) + ", got " + shown(ids));
  return ids[0].get<std::int64_t>();
}

}  // namespace

void read_post_processor(const Reader& r, const json& j, const std::string& field, std::size_t v, SpecialIds& m) {
  if (j.is_null()) return;
  const std::string& type = r.type(j, field);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence") {
    const json& list = r.array(j, "processors", field);
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(r, list[i], at(field + ".processors", i), v, m);
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
      const std::int64_t id = template_token(r, j, r.string(tok, "id", f + ".SpecialToken"), field, v);
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

ByteLevelBPE build(std::string_view text, const std::string& name, std::string_view config_json,
                   const std::string& config_where);

void read_special_config(std::string_view text, const std::string& where,
                         const std::function<std::optional<std::int64_t>(const std::string&)>& id_of, SpecialIds& m) {
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
    const std::optional<std::int64_t> id = id_of(token);
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

}  // namespace qkv::tokenize::hfjson
