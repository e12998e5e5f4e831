// Hugging Face tokenizer.json files of SentencePiece models (Llama 2, Mistral v0.1, Gemma,
// Phi-3: a BPE model with byte_fallback, a Metaspace pre-tokenizer or Replace / Prepend
// normalizers) -> SentencePiece with rank merging (see sentencepiece.h). Read strictly: any
// other component is refused naming the field.
#include "json_reader.h"
#include "qkv/tokenize/sentencepiece.h"
#include "sentencepiece_impl.h"

namespace qkv::tokenize {

using namespace hfjson;

namespace {

const std::string kSpace = "\xE2\x96\x81";

// A {"String": s} pattern's s; "" for anything else.
std::string string_pattern(const json& j) {
  const auto p = j.find("pattern");
  if (p == j.end() || !p->is_object() || !p->contains("String") || !(*p)["String"].is_string()) return "";
  return (*p)["String"].get<std::string>();
}

void read_normalizer(const Reader& r, const json& j, const std::string& field, SentencePiece::Impl& m) {
  if (j.is_null()) return;
  const std::string& type = r.type(j, field);
  if (type == "Sequence") {
    const json& list = r.array(j, "normalizers", field);
    for (std::size_t i = 0; i < list.size(); ++i) read_normalizer(r, list[i], at(field + ".normalizers", i), m);
  } else if (type == "Prepend") {
    if (r.string(j, "prepend", field) != kSpace) r.fail(field + ".prepend", "qkv supports prepending \"\u2581\" only");
    m.prefix = SentencePiece::Impl::Prefix::Each;
  } else if (type == "Replace") {
    if (string_pattern(j) != " " || r.string(j, "content", field) != kSpace)
      r.fail(field, "qkv supports replacing \" \" by \"\u2581\" only, got " + shown(j));
  } else {
    r.fail(field + ".type", "normalizer " + quote(type) +
                                " is not supported in a SentencePiece tokenizer.json (Prepend, Replace, Sequence)");
  }
}

void read_pre_tokenizer(const Reader& r, const json& j, const std::string& field, SentencePiece::Impl& m) {
  if (j.is_null()) return;
  const std::string& type = r.type(j, field);
  if (type == "Sequence") {
    const json& list = r.array(j, "pretokenizers", field);
    for (std::size_t i = 0; i < list.size(); ++i) read_pre_tokenizer(r, list[i], at(field + ".pretokenizers", i), m);
  } else if (type == "Metaspace") {
    if (r.string(j, "replacement", field) != kSpace) r.fail(field + ".replacement", "qkv supports \"\u2581\" only");
    if (r.boolean(j, "split", field, true))
      r.fail(field + ".split", "true is not supported (qkv reads SentencePiece tokenizer.json files with split false)");
    const auto scheme = j.find("prepend_scheme");
    const std::string s = scheme != j.end() && scheme->is_string() ? scheme->get<std::string>()
                          : r.boolean(j, "add_prefix_space", field, true) ? "always"
                                                                          : "never";
    using P = SentencePiece::Impl::Prefix;
    if (s == "first") m.prefix = P::FirstUnlessSpace;
    else if (s == "always") m.prefix = P::EachUnlessSpace;
    else if (s == "never") m.prefix = P::None;
    else r.fail(field + ".prepend_scheme", quote(s) + " is not a prepend scheme (first, always, never)");
  } else if (type == "Split" && string_pattern(j) == " ") {
    // Gemma's Split(" ", MergedWithPrevious) comes after its normalizer made every space "▁":
    // nothing is left for it to split.
  } else {
    r.fail(field + ".type", "pre-tokenizer " + quote(type) +
                                " is not supported in a SentencePiece tokenizer.json (Metaspace, Split on \" \", Sequence)");
  }
}

// Whether the decoder drops the text's first space (Strip start 1, or a Metaspace decoder
// that prepends).
bool read_decoder(const Reader& r, const json& j, const std::string& field) {
  if (j.is_null()) return false;
  const std::string& type = r.type(j, field);
  if (type == "Sequence") {
    bool strip = false;
    const json& list = r.array(j, "decoders", field);
    for (std::size_t i = 0; i < list.size(); ++i) strip = read_decoder(r, list[i], at(field + ".decoders", i)) || strip;
    return strip;
  }
  if (type == "Strip") {
    if (r.string(j, "content", field) != " ") r.fail(field + ".content", "qkv supports stripping \" \" only");
    auto count = [&](const char* key) -> std::uint64_t {  // HF's usize; absent: 0
      const auto it = j.find(key);
      if (it == j.end() || it->is_null()) return 0;
      if (!it->is_number_unsigned()) r.fail(field + "." + key, "must be an integer >= 0, got " + shown(*it));
      return it->get<std::uint64_t>();
    };
    const std::uint64_t n = count("start");
    if (n > 1 || count("stop") != 0) r.fail(field, "qkv supports Strip of one leading space only, got " + shown(j));
    return n == 1;
  }
  if (type == "Metaspace") return r.optional_string(j, "prepend_scheme", field) != "never";  // absent: "always"
  if (type == "Replace" || type == "ByteFallback" || type == "Fuse") return false;
  r.fail(field + ".type", "decoder " + quote(type) +
                              " is not supported in a SentencePiece tokenizer.json (Replace, ByteFallback, Fuse, Strip, "
                              "Metaspace, Sequence)");
}

}  // namespace

// The tokenizer.json `root` of a SentencePiece-style BPE model (tokenizer_json.cpp decides).
std::shared_ptr<const Tokenizer> sentencepiece_from_tokenizer_json(const json& root, const Reader& r,
                                                                   std::string_view config_json,
                                                                   const std::string& config_where) {
  using Impl = SentencePiece::Impl;
  auto m = std::make_shared<Impl>();
  m->merging = Impl::Merging::Rank;
  m->prefix = Impl::Prefix::None;
  if (const auto it = root.find("normalizer"); it != root.end()) read_normalizer(r, *it, "normalizer", *m);
  if (const auto it = root.find("pre_tokenizer"); it != root.end()) read_pre_tokenizer(r, *it, "pre_tokenizer", *m);
  const auto dec = root.find("decoder");
  m->strip_leading_space = dec != root.end() && read_decoder(r, *dec, "decoder");

  const json& model = r.object(r.member(root, "model", "the top level"), "model");
  if (r.type(model, "model") != "BPE") r.fail("model.type", "must be \"BPE\" in a SentencePiece tokenizer.json");
  m->byte_fallback = r.boolean(model, "byte_fallback", "model", false);
  if (r.boolean(model, "ignore_merges", "model", false))
    r.fail("model.ignore_merges", "true is not supported in a SentencePiece tokenizer.json");
  const std::vector<AddedToken> added = read_added(r, root);
  const json& vocab = r.object(r.member(model, "vocab", "model"), "model.vocab");
  std::size_t v = 0;
  for (const auto& [tok, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<std::uint64_t>() >= (std::uint64_t{1} << 31))
      r.fail("model.vocab[" + quote(tok) + "]", "must be a token id, got " + shown(id));
    v = std::max<std::size_t>(v, id.get<std::size_t>() + 1);
  }
  for (const AddedToken& a : added) v = std::max<std::size_t>(v, static_cast<std::size_t>(a.id) + 1);
  if (v == 0) r.fail("model.vocab", "has no tokens");
  if (v > vocab.size() + added.size()) r.fail("model.vocab", "the ids of model.vocab and added_tokens leave gaps");
  m->pieces.assign(v, std::string());
  m->types.assign(v, PieceType::Normal);
  std::vector<bool> held(v, false);
  for (const auto& [tok, id] : vocab.items()) {
    m->pieces[id.get<std::size_t>()] = tok;
    held[id.get<std::size_t>()] = true;
    if (tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') m->types[id.get<std::size_t>()] = PieceType::Byte;
  }
  for (const AddedToken& a : added) {
    const auto i = static_cast<std::size_t>(a.id);
    if (held[i] && m->pieces[i] != a.content)
      r.fail("added_tokens", "token " + std::to_string(a.id) + " is " + quote(a.content) + " there and " +
                                 quote(m->pieces[i]) + " in model.vocab");
    m->pieces[i] = a.content;
    m->types[i] = a.special ? PieceType::Control : PieceType::UserDefined;
    held[i] = true;
  }
  for (std::size_t i = 0; i < v; ++i)
    if (!held[i]) r.fail("model.vocab", "no token has id " + std::to_string(i));
  m->added = added;
  // The merges, by rank: "a b" or ["a", "b"], both and the result in the vocabulary.
  TokenMap ids;
  for (std::size_t i = 0; i < v; ++i) ids.emplace(m->pieces[i], static_cast<std::int32_t>(i));
  const json& merges = r.array(model, "merges", "model");
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const std::string field = at("model.merges", i);
    const json& e = merges[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        r.fail(field, "expected two tokens separated by one space, got " + quote(s));
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    } else {
      r.fail(field, "a merge must be \"a b\" or [\"a\", \"b\"], got " + shown(e));
    }
    const auto ia = ids.find(a), ib = ids.find(b), ir = ids.find(a + b);
    if (ia == ids.end() || ib == ids.end() || ir == ids.end())
      r.fail(field, "the merge " + quote(a + " " + b) + " needs both tokens and their join in model.vocab");
    m->merges.emplace(Impl::pair_key(ia->second, ib->second), Merge{static_cast<std::int32_t>(i), ir->second});
  }
  if (const std::string unk = r.optional_string(model, "unk_token", "model"); !unk.empty()) {
    const auto it = ids.find(unk);
    if (it == ids.end()) r.fail("model.unk_token", quote(unk) + " is not in model.vocab");
    m->unk = it->second;
  }
  SpecialIds sp{.unk = m->unk};
  if (const auto it = root.find("post_processor"); it != root.end())
    read_post_processor(r, *it, "post_processor", v, sp);
  if (!config_json.empty())
    read_special_config(config_json, config_where, [&](const std::string& t) -> std::optional<std::int64_t> {
      if (const auto it = ids.find(t); it != ids.end()) return it->second;
      return std::nullopt;
    }, sp);
  m->bos = sp.bos, m->eos = sp.eos, m->pad = sp.pad, m->unk = sp.unk, m->add_bos = sp.add_bos, m->add_eos = sp.add_eos;
  m->finish(r.where().substr(0, r.where().size() - 2));
  return std::make_shared<SentencePiece>(std::move(m));
}

}  // namespace qkv::tokenize
