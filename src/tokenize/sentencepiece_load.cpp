// SentencePiece vocabularies from their three sources (see sentencepiece.h): GGUF metadata,
// sentencepiece's tokenizer.model (its protobuf read here, bounded by the bytes it has), and
// Hugging Face's tokenizer.json (sentencepiece_json.cpp calls make_from_json).
#include <cstring>
#include <limits>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/tokenize/gguf_vocab.h"
#include "qkv/tokenize/utf8.h"
#include "sentencepiece_impl.h"

namespace qkv::tokenize {

namespace {

// "<0x41>" -> 0x41; -1 for anything else.
int byte_piece(const std::string& p) {
  if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
  int v = 0;
  for (int i = 3; i < 5; ++i) {
    const char c = p[static_cast<std::size_t>(i)];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// ---- a minimal protobuf reader: every length and count bounded by the bytes left
class Proto {
 public:
  Proto(std::string_view bytes, std::string where) : p_(bytes), where_(std::move(where)) {}
  bool done() const { return at_ >= p_.size(); }
  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(where_ + ": " + what + " (at byte " + std::to_string(at_) + ")");
  }
  std::uint64_t varint() {
    std::uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) fail("the protobuf ends inside a number");
      const auto b = static_cast<unsigned char>(p_[at_++]);
      v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("a protobuf number is longer than 10 bytes");
  }
  std::string_view bytes() {
    const std::uint64_t n = varint();
    if (n > p_.size() - at_) fail("a protobuf field of " + std::to_string(n) + " bytes runs past the end");
    const std::string_view s = p_.substr(at_, static_cast<std::size_t>(n));
    at_ += static_cast<std::size_t>(n);
    return s;
  }
  float fixed32() {
    if (p_.size() - at_ < 4) fail("the protobuf ends inside a float");
    std::uint32_t u;
    std::memcpy(&u, p_.data() + at_, 4);  // little-endian (the hosts qkv builds for)
    at_ += 4;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // The next field's number and wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32).
  std::pair<std::uint32_t, int> key() {
    const std::uint64_t k = varint();
    if ((k >> 3) == 0 || (k >> 3) > 0x1FFFFFFF) fail("a protobuf field number is " + std::to_string(k >> 3));
    return {static_cast<std::uint32_t>(k >> 3), static_cast<int>(k & 7)};
  }
  void skip(int wire) {
    switch (wire) {
      case 0: varint(); return;
      case 1:
        if (p_.size() - at_ < 8) fail("the protobuf ends inside a 64-bit field");
        at_ += 8;
        return;
      case 2: bytes(); return;
      case 5:
        if (p_.size() - at_ < 4) fail("the protobuf ends inside a 32-bit field");
        at_ += 4;
        return;
      default: fail("protobuf wire type " + std::to_string(wire) + " is not one a SentencePiece model uses");
    }
  }
  void expect(int wire, int want, const char* field) {
    if (wire != want) fail(std::string("field ") + field + " has protobuf wire type " + std::to_string(wire));
  }

 private:
  std::string_view p_;
  std::size_t at_ = 0;
  std::string where_;
};

}  // namespace

void SentencePiece::Impl::finish(const std::string& where) {
  const std::size_t v = pieces.size();
  if (v == 0) throw FormatError(where + ": the vocabulary is empty");
  if (v > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw FormatError(where + ": " + std::to_string(v) + " pieces is more than qkv supports (2^31 - 1)");
  if (scores.size() != v) scores.resize(v, 0.f);
  if (types.size() != v) types.resize(v, PieceType::Normal);
  for (std::size_t id = 0; id < v; ++id) {
    ids.emplace(pieces[id], static_cast<std::int32_t>(id));  // a piece listed twice: its first id
    const int b = byte_piece(pieces[id]);
    if (b >= 0 && (types[id] == PieceType::Byte || byte_id[static_cast<std::size_t>(b)] < 0))
      byte_id[static_cast<std::size_t>(b)] = static_cast<std::int32_t>(id);
  }
  // The pieces matched whole in the text: control and unknown ones as specials, user-defined
  // ones always (llama.cpp's special-token cache); an empty or non-UTF-8 one cannot be matched.
  if (added.empty())
    for (std::size_t id = 0; id < v; ++id) {
      const PieceType t = types[id];
      if (t != PieceType::Control && t != PieceType::Unknown && t != PieceType::UserDefined) continue;
      if (pieces[id].empty() || utf8::find_invalid(pieces[id])) continue;
      added.push_back({.content = pieces[id], .id = static_cast<std::int32_t>(id), .special = t != PieceType::UserDefined});
    }
  std::sort(added.begin(), added.end(), [](const AddedToken& x, const AddedToken& y) { return x.id < y.id; });
  TokenMap seen;
  for (std::size_t i = 0; i < added.size(); ++i)
    if (seen.emplace(added[i].content, added[i].id).second) matcher.add(added[i].content, static_cast<std::int32_t>(i));
  for (const auto& [name, id] : {std::pair{"bos", &bos}, {"eos", &eos}, {"pad", &pad}, {"unk", &unk}})
    if (*id && (**id < 0 || static_cast<std::size_t>(**id) >= v))
      throw FormatError(where + ": the " + name + " token id " + std::to_string(**id) + " is outside the vocabulary (ids 0.." +
                        std::to_string(v - 1) + ")");
  if (add_bos && !bos) throw FormatError(where + ": add_bos_token is true but there is no BOS token");
  if (add_eos && !eos) throw FormatError(where + ": add_eos_token is true but there is no EOS token");
}

SentencePiece SentencePiece::from_gguf_vocab(const GgufVocab& g, const std::string& source) {
  const std::string where = "GGUF '" + source + "'";
  auto fail = [&](const std::string& key, const std::string& msg) {
    return FormatError(where + ": tokenizer.ggml." + key + ": " + msg);
  };
  if (g.model != "llama") throw fail("model", quote(g.model) + " is not a SentencePiece vocabulary (\"llama\")");
  const std::size_t v = g.tokens.size();
  if (v == 0) throw fail("tokens", "the list is empty");
  if (!g.token_types.empty() && g.token_types.size() != v)
    throw fail("token_type", "has " + std::to_string(g.token_types.size()) + " entries for " + std::to_string(v) + " tokens");
  if (!g.scores.empty() && g.scores.size() != v)
    throw fail("scores", "has " + std::to_string(g.scores.size()) + " entries for " + std::to_string(v) + " tokens");
  auto m = std::make_shared<Impl>();
  m->pieces = g.tokens;
  m->scores = g.scores;
  for (std::size_t id = 0; id < g.token_types.size(); ++id) {
    const std::int64_t t = g.token_types[id];
    if (t < 0 || t > 6)
      throw fail("token_type[" + std::to_string(id) + "]", std::to_string(t) + " (token " + quote(g.tokens[id]) +
                                                               ") is not a token type (0 undefined, 1 normal, 2 unknown, "
                                                               "3 control, 4 user-defined, 5 unused, 6 byte)");
    m->types.push_back(t == 0 ? PieceType::Normal : static_cast<PieceType>(t));
  }
  m->merging = Impl::Merging::Score;
  const bool prefix = g.add_space_prefix.value_or(true);
  m->prefix = prefix ? Impl::Prefix::Always : Impl::Prefix::None;
  m->strip_leading_space = prefix;
  m->bos = g.bos_id, m->eos = g.eos_id, m->pad = g.pad_id, m->unk = g.unk_id;
  m->add_bos = g.add_bos.value_or(true);  // llama.cpp's default for SentencePiece vocabularies
  m->add_eos = g.add_eos.value_or(false);
  if (m->add_bos && !m->bos) m->add_bos = false;  // nothing to add
  m->finish(where);
  return SentencePiece(std::move(m));
}

SentencePiece SentencePiece::from_model_bytes(std::string_view bytes, const std::string& name) {
  const std::string where = "tokenizer.model '" + name + "'";
  auto m = std::make_shared<Impl>();
  int model_type = 1;  // trainer_spec.model_type: UNIGRAM unless said
  bool byte_fallback = false, add_dummy_prefix = true, remove_extra_whitespaces = true;
  std::string normalizer = "nmt_nfkc";
  std::size_t charsmap = 0;
  std::optional<std::int64_t> unk = 0, bos = 1, eos = 2, pad = -1;
  Proto top(bytes, where);
  auto opt_id = [](std::uint64_t v) -> std::optional<std::int64_t> {
    const auto s = static_cast<std::int64_t>(static_cast<std::int32_t>(v));  // int32, -1 for none
    return s < 0 ? std::nullopt : std::optional<std::int64_t>(s);
  };
  while (!top.done()) {
    const auto [field, wire] = top.key();
    if (field == 1) {  // repeated SentencePiece pieces
      top.expect(wire, 2, "pieces");
      Proto p(top.bytes(), where + " pieces[" + std::to_string(m->pieces.size()) + "]");
      std::string piece;
      float score = 0.f;
      std::uint64_t type = 1;
      while (!p.done()) {
        const auto [f, w] = p.key();
        if (f == 1) p.expect(w, 2, "piece"), piece = std::string(p.bytes());
        else if (f == 2) p.expect(w, 5, "score"), score = p.fixed32();
        else if (f == 3) p.expect(w, 0, "type"), type = p.varint();
        else p.skip(w);
      }
      if (type < 1 || type > 6)
        throw FormatError(where + ": piece " + std::to_string(m->pieces.size()) + " (" + quote(piece) + ") has type " +
                          std::to_string(type) + " (1 normal .. 6 byte)");
      m->pieces.push_back(std::move(piece));
      m->scores.push_back(score);
      m->types.push_back(static_cast<PieceType>(type));
    } else if (field == 2) {  // TrainerSpec
      top.expect(wire, 2, "trainer_spec");
      Proto t(top.bytes(), where + " trainer_spec");
      while (!t.done()) {
        const auto [f, w] = t.key();
        if (f == 3) t.expect(w, 0, "model_type"), model_type = static_cast<int>(t.varint());
        else if (f == 35) t.expect(w, 0, "byte_fallback"), byte_fallback = t.varint() != 0;
        else if (f == 40) t.expect(w, 0, "unk_id"), unk = opt_id(t.varint());
        else if (f == 41) t.expect(w, 0, "bos_id"), bos = opt_id(t.varint());
        else if (f == 42) t.expect(w, 0, "eos_id"), eos = opt_id(t.varint());
        else if (f == 43) t.expect(w, 0, "pad_id"), pad = opt_id(t.varint());
        else t.skip(w);
      }
    } else if (field == 3) {  // NormalizerSpec
      top.expect(wire, 2, "normalizer_spec");
      Proto n(top.bytes(), where + " normalizer_spec");
      while (!n.done()) {
        const auto [f, w] = n.key();
        if (f == 1) n.expect(w, 2, "name"), normalizer = std::string(n.bytes());
        else if (f == 2) n.expect(w, 2, "precompiled_charsmap"), charsmap = n.bytes().size();
        else if (f == 3) n.expect(w, 0, "add_dummy_prefix"), add_dummy_prefix = n.varint() != 0;
        else if (f == 4) n.expect(w, 0, "remove_extra_whitespaces"), remove_extra_whitespaces = n.varint() != 0;
        else n.skip(w);
      }
    } else {
      top.skip(wire);
    }
  }
  if (model_type != 2)
    throw FormatError(where + ": trainer_spec.model_type " + std::to_string(model_type) +
                      (model_type == 1 ? " (unigram)" : "") + " is not supported (qkv reads BPE models, type 2)");
  if (charsmap > 0)
    throw FormatError(where + ": normalizer_spec " + quote(normalizer) +
                      " normalizes with a precompiled character map, which qkv does not support (it reads models "
                      "with the identity normalizer)");
  m->remove_extra_whitespaces = remove_extra_whitespaces;
  m->merging = Impl::Merging::Score;
  m->byte_fallback = byte_fallback;
  m->prefix = add_dummy_prefix ? Impl::Prefix::Always : Impl::Prefix::None;
  m->strip_leading_space = add_dummy_prefix;
  m->unk = unk, m->bos = bos, m->eos = eos, m->pad = pad;
  m->add_bos = bos.has_value();  // sentencepiece models: transformers' LlamaTokenizer adds BOS
  m->finish(where);
  return SentencePiece(std::move(m));
}

GgufVocab SentencePiece::to_gguf_vocab() const {
  const Impl& m = *impl_;
  GgufVocab g;
  g.model = "llama";
  g.pre = "default";
  g.tokens = m.pieces;
  g.scores = m.scores;
  if (m.merging == Impl::Merging::Rank) {  // merge ranks as scores: an earlier merge scores higher
    g.scores.assign(m.pieces.size(), 0.f);
    for (std::size_t i = 0; i < m.pieces.size(); ++i)  // special, byte and added pieces: never a merge's result
      if (m.types[i] != PieceType::Normal) g.scores[i] = -1000.f;
    for (const auto& [key, merge] : m.merges)
      g.scores[static_cast<std::size_t>(merge.result)] = -static_cast<float>(merge.rank) - 1.f;
  }
  for (const PieceType t : m.types) g.token_types.push_back(static_cast<std::int64_t>(t));
  g.bos_id = m.bos, g.eos_id = m.eos, g.pad_id = m.pad, g.unk_id = m.unk;
  g.add_bos = m.add_bos, g.add_eos = m.add_eos;
  g.add_space_prefix = m.prefix != Impl::Prefix::None;
  return g;
}

SentencePiece SentencePiece::from_model_file(const std::string& path) {
  return from_model_bytes(io::read_file(path, "tokenizer.model"), path);
}

}  // namespace qkv::tokenize
