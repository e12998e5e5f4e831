// SentencePiece BPE encode and decode (see sentencepiece.h; the tables come from
// sentencepiece_load.cpp).
#include "qkv/tokenize/sentencepiece.h"

#include <algorithm>
#include <map>
#include <queue>

#include "qkv/core/error.h"
#include "qkv/tokenize/utf8.h"
#include "sentencepiece_impl.h"

namespace qkv::tokenize {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581, the pieces' space

// One symbol of a piece being merged: bytes [begin, begin + len) of the text, or (rank merging)
// a token id; a doubly linked list over a vector.
struct Symbol {
  std::size_t begin, len;
  std::int32_t id;    // rank merging: the symbol's token
  std::int32_t prev;  // -1 at the start
  std::int32_t next;  // -1 at the end
};

// A candidate merge of symbols[left] with symbols[right] (score merging): llama.cpp's
// llm_bigram_spm, the highest score first, then the leftmost.
struct Bigram {
  float score;
  std::int32_t left, right;
  std::size_t size;
  bool operator<(const Bigram& o) const { return score < o.score || (score == o.score && left > o.left); }
};

// A candidate merge by rank: the lowest rank first, then the leftmost.
struct Ranked {
  std::int32_t rank, pos, result;
  bool operator>(const Ranked& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

}  // namespace

SentencePiece::SentencePiece(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

void SentencePiece::Impl::check_id(std::int64_t id, const char* what) const {
  const auto v = static_cast<std::int64_t>(pieces.size());
  if (id < 0 || id >= v)
    throw IndexError(std::string(what) + ": token id " + std::to_string(id) + " is out of range; the vocabulary has " +
                     std::to_string(v) + " tokens (ids 0.." + std::to_string(v - 1) + ")");
}

void SentencePiece::Impl::encode_piece(std::string_view text, std::vector<std::int64_t>& out) const {
  if (text.empty()) return;
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  // The bytes of a run that is no piece: their <0xNN> tokens, else the unknown token.
  auto bytes_of = [&](std::size_t begin, std::size_t len) {
    for (std::size_t i = begin; i < begin + len; ++i) {
      const std::int32_t b = byte_fallback ? byte_id[p[i]] : -1;
      if (b >= 0) out.push_back(b);
      else if (unk) {
        out.push_back(*unk);
        if (!byte_fallback) break;  // one unknown token for the whole symbol
      }
    }
  };
  std::vector<Symbol> sym;
  for (std::size_t i = 0; i < text.size();) {
    const std::size_t len = utf8::scan(p + i, text.size() - i).len;
    const auto k = static_cast<std::int32_t>(sym.size());
    sym.push_back({i, len, -1, k - 1, -1});
    if (k > 0) sym[static_cast<std::size_t>(k - 1)].next = k;
    i += len;
  }
  if (merging == Merging::Score) {
    // sentencepiece's BPE as llama.cpp's llm_tokenizer_spm_session runs it.
    std::priority_queue<Bigram> queue;
    std::map<std::string, std::pair<std::int32_t, std::int32_t>, std::less<>> rev_merge;
    auto try_add = [&](std::int32_t left, std::int32_t right) {
      if (left < 0 || right < 0) return;
      const Symbol& l = sym[static_cast<std::size_t>(left)];
      const Symbol& r = sym[static_cast<std::size_t>(right)];
      const std::string_view s = text.substr(l.begin, l.len + r.len);
      const auto it = ids.find(s);
      if (it == ids.end()) return;
      queue.push({scores[static_cast<std::size_t>(it->second)], left, right, s.size()});
      rev_merge[std::string(s)] = {left, right};
    };
    for (std::int32_t i = 1; i < static_cast<std::int32_t>(sym.size()); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[static_cast<std::size_t>(b.left)];
      Symbol& r = sym[static_cast<std::size_t>(b.right)];
      if (l.len == 0 || r.len == 0 || l.len + r.len != b.size) continue;  // stale
      l.len += r.len;
      r.len = 0;
      l.next = r.next;
      if (r.next >= 0) sym[static_cast<std::size_t>(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
    // A symbol that is a piece is its token; one made by a merge whose result is no piece is
    // split back into its two halves; a character that is no piece becomes bytes.
    std::function<void(std::int32_t)> resegment = [&](std::int32_t i) {
      const Symbol& s = sym[static_cast<std::size_t>(i)];
      const std::string_view t = text.substr(s.begin, s.len);
      if (const auto it = ids.find(t); it != ids.end()) {
        out.push_back(it->second);
        return;
      }
      if (const auto m = rev_merge.find(t); m != rev_merge.end()) {
        resegment(m->second.first);
        resegment(m->second.second);
        return;
      }
      bytes_of(s.begin, s.len);
    };
    for (std::int32_t i = 0; i >= 0; i = sym[static_cast<std::size_t>(i)].next) resegment(i);
    return;
  }
  // Rank merging (HF tokenizers' BPE with byte_fallback): each character its token, or its
  // bytes' tokens (all of them, else the unknown token), then the lowest-rank pairs merged.
  std::vector<Symbol> toks;
  for (const Symbol& s : sym) {
    const std::string_view t = text.substr(s.begin, s.len);
    if (const auto it = ids.find(t); it != ids.end()) {
      toks.push_back({s.begin, s.len, it->second, -1, -1});
      continue;
    }
    bool all = byte_fallback;
    for (std::size_t i = s.begin; i < s.begin + s.len && all; ++i) all = byte_id[p[i]] >= 0;
    if (all) {
      for (std::size_t i = s.begin; i < s.begin + s.len; ++i) toks.push_back({i, 1, byte_id[p[i]], -1, -1});
    } else if (unk) {
      toks.push_back({s.begin, s.len, static_cast<std::int32_t>(*unk), -1, -1});
    }
  }
  for (std::size_t i = 0; i < toks.size(); ++i) {
    toks[i].prev = static_cast<std::int32_t>(i) - 1;
    toks[i].next = i + 1 < toks.size() ? static_cast<std::int32_t>(i + 1) : -1;
  }
  std::priority_queue<Ranked, std::vector<Ranked>, std::greater<>> heap;
  auto offer = [&](std::int32_t left) {
    if (left < 0) return;
    const std::int32_t right = toks[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const auto it = merges.find(pair_key(toks[static_cast<std::size_t>(left)].id, toks[static_cast<std::size_t>(right)].id));
    if (it != merges.end()) heap.push({it->second.rank, left, it->second.result});
  };
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(toks.size()); ++i) offer(i);
  while (!heap.empty()) {
    const Ranked top = heap.top();
    heap.pop();
    Symbol& l = toks[static_cast<std::size_t>(top.pos)];
    if (l.len == 0 || l.next < 0) continue;
    Symbol& r = toks[static_cast<std::size_t>(l.next)];
    const auto it = merges.find(pair_key(l.id, r.id));
    if (it == merges.end() || it->second.result != top.result) continue;  // stale
    l.id = top.result;
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) toks[static_cast<std::size_t>(r.next)].prev = top.pos;
    offer(l.prev);
    offer(top.pos);
  }
  for (std::int32_t i = toks.empty() ? -1 : 0; i >= 0; i = toks[static_cast<std::size_t>(i)].next)
    out.push_back(toks[static_cast<std::size_t>(i)].id);
}

void SentencePiece::Impl::encode_text(std::string_view text, bool specials, std::vector<std::int64_t>& out) const {
  bool after_special = true;  // the text's start counts as after a special token (llama.cpp)
  bool first = true;
  std::string piece;
  auto on_text = [&](std::string_view part) {
    // sentencepiece's remove_extra_whitespaces: no space at either end, runs of them one.
    std::string trimmed;
    if (remove_extra_whitespaces) {
      for (const char c : part)
        if (c != ' ' || (!trimmed.empty() && trimmed.back() != ' ')) trimmed += c;
      while (!trimmed.empty() && trimmed.back() == ' ') trimmed.pop_back();
      if (trimmed.empty()) return;
    }
    // Where the piece starts in the text: HF's "first" applies only at offset 0.
    const bool at_start = first && part.data() == text.data();
    if (remove_extra_whitespaces) part = trimmed;
    first = false;
    const bool space = !part.empty() && part.front() == ' ';
    bool prepend = false;
    switch (prefix) {
      case Prefix::None: break;
      case Prefix::Always: prepend = after_special; break;
      case Prefix::FirstUnlessSpace: prepend = at_start && !space; break;
      case Prefix::EachUnlessSpace: prepend = !space; break;
      case Prefix::Each: prepend = true; break;
    }
    after_special = false;
    piece.clear();
    if (prepend) piece += kSpace;
    for (const char c : part) {
      if (c == ' ') piece += kSpace;
      else piece += c;
    }
    encode_piece(piece, out);
  };
  auto on_token = [&](std::int32_t id) {
    first = false;
    out.push_back(id);
    after_special = true;
  };
  split_added_tokens(text, matcher, added, specials, on_text, on_token);
}

std::vector<std::int64_t> SentencePiece::encode(std::string_view text) const {
  utf8::check(text, "tokenize");
  std::vector<std::int64_t> out;
  impl_->encode_text(text, /*specials=*/true, out);
  return out;
}

std::vector<std::int64_t> SentencePiece::encode_ordinary(std::string_view text) const {
  utf8::check(text, "tokenize");
  std::vector<std::int64_t> out;
  impl_->encode_text(text, /*specials=*/false, out);
  return out;
}

std::string SentencePiece::token_text(std::int64_t id) const {
  impl_->check_id(id, "token_text");
  const std::string& p = impl_->pieces[static_cast<std::size_t>(id)];
  switch (impl_->types[static_cast<std::size_t>(id)]) {
    case PieceType::Byte: {
      for (int b = 0; b < 256; ++b)
        if (impl_->byte_id[static_cast<std::size_t>(b)] == id) return std::string(1, static_cast<char>(b));
      return p;
    }
    case PieceType::Control:
    case PieceType::Unknown: return p;
    default: {
      std::string out;
      for (std::size_t i = 0; i < p.size();) {
        if (p.compare(i, kSpace.size(), kSpace) == 0) {
          out += ' ';
          i += kSpace.size();
        } else {
          out += p[i++];
        }
      }
      return out;
    }
  }
}

std::string SentencePiece::decode(const std::vector<std::int64_t>& ids) const {
  const std::string raw = decode_bytes(ids);
  std::string out;
  out.reserve(raw.size());
  utf8::append_lossy(raw, /*final=*/true, out);
  if (impl_->strip_leading_space && !out.empty() && out.front() == ' ') out.erase(0, 1);
  return out;
}

std::string SentencePiece::token_string(std::int64_t id) const {
  impl_->check_id(id, "token_string");
  return impl_->pieces[static_cast<std::size_t>(id)];
}

bool SentencePiece::strips_leading_space() const { return impl_->strip_leading_space; }
std::int64_t SentencePiece::vocab_size() const { return static_cast<std::int64_t>(impl_->pieces.size()); }

std::optional<std::int64_t> SentencePiece::token_to_id(std::string_view token) const {
  for (const AddedToken& t : impl_->added)
    if (t.content == token) return t.id;
  if (const auto it = impl_->ids.find(token); it != impl_->ids.end()) return it->second;
  return std::nullopt;
}

std::optional<std::int64_t> SentencePiece::bos_id() const { return impl_->bos; }
std::optional<std::int64_t> SentencePiece::eos_id() const { return impl_->eos; }
std::optional<std::int64_t> SentencePiece::pad_id() const { return impl_->pad; }
std::optional<std::int64_t> SentencePiece::unk_id() const { return impl_->unk; }
bool SentencePiece::add_bos() const { return impl_->add_bos; }
bool SentencePiece::add_eos() const { return impl_->add_eos; }

std::vector<std::string> SentencePiece::special_tokens() const {
  std::vector<std::string> out;
  for (const AddedToken& t : impl_->added)
    if (t.special) out.push_back(t.content);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool SentencePiece::is_special(std::int64_t id) const {
  impl_->check_id(id, "is_special");
  for (const AddedToken& t : impl_->added)
    if (t.id == id) return t.special;
  const PieceType ty = impl_->types[static_cast<std::size_t>(id)];
  return ty == PieceType::Control || ty == PieceType::Unknown;
}

SentencePiece SentencePiece::with_specials(std::optional<std::int64_t> bos, std::optional<std::int64_t> eos,
                                          std::optional<std::int64_t> pad, std::optional<std::int64_t> unk, bool add_bos,
                                          bool add_eos) const {
  auto m = std::make_shared<Impl>(*impl_);
  m->bos = bos, m->eos = eos, m->pad = pad, m->unk = unk, m->add_bos = add_bos, m->add_eos = add_eos;
  const auto v = static_cast<std::int64_t>(m->pieces.size());
  for (const auto& id : {bos, eos, pad, unk})
    if (id && (*id < 0 || *id >= v))
      throw FormatError("SentencePiece: a special token id " + std::to_string(*id) + " is outside the vocabulary");
  if ((add_bos && !bos) || (add_eos && !eos)) throw FormatError("SentencePiece: add_bos / add_eos without the token");
  return SentencePiece(std::move(m));
}

float SentencePiece::score(std::int64_t id) const {
  impl_->check_id(id, "score");
  return impl_->scores[static_cast<std::size_t>(id)];
}

}  // namespace qkv::tokenize
