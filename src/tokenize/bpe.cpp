// Byte-level BPE encode and decode (the tables come from bpe_load.cpp, tokenizer_json.cpp,
// gguf_vocab.cpp through bpe_build.cpp).
#include "qkv/tokenize/bpe.h"

#include <algorithm>
#include <queue>

#include "bpe_impl.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize {

namespace {

// One symbol of a word being merged: a doubly linked list over a vector, as in
// HF tokenizers' `Word` (a merged-away right symbol is marked dead).
struct Symbol {
  std::int32_t id;
  std::int32_t prev;  // index of the previous live symbol, -1 at the start
  std::int32_t next;  // index of the next live symbol, -1 at the end
  bool alive;
};

// A candidate merge of symbols[pos] with its right neighbour.
struct Candidate {
  std::int32_t rank;
  std::int32_t pos;
  std::int32_t result;
  // Min-heap order: the lowest rank first, then the leftmost position.
  bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

// Unicode White_Space (Rust's char::is_whitespace, which HF's lstrip / rstrip use).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t code_point(const unsigned char* p, std::size_t len) {
  char32_t cp = len == 1 ? p[0] : (p[0] & (0x7F >> len));
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
  return cp;
}

// Start of the run of whitespace that ends at `end` in valid UTF-8 text.
std::size_t whitespace_before(std::string_view text, std::size_t end) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  while (end > 0) {
    std::size_t b = end - 1;
    while (b > 0 && (p[b] & 0xC0) == 0x80) --b;
    if (!is_white_space(code_point(p + b, end - b))) break;
    end = b;
  }
  return end;
}

// End of the run of whitespace that starts at `begin` in valid UTF-8 text.
std::size_t whitespace_after(std::string_view text, std::size_t begin) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  while (begin < text.size()) {
    const std::size_t len = utf8::scan(p + begin, text.size() - begin).len;
    if (!is_white_space(code_point(p + begin, len))) break;
    begin += len;
  }
  return begin;
}

// HF AddedVocabulary::find_matches: the added tokens of `matcher` in text and the text between
// them, in order. A special token is passed over (left as text) when !specials; lstrip / rstrip
// widen a match over the whitespace beside it (never back into the previous match).
template <class OnText, class OnToken>
void split_added(std::string_view text, const AddedMatcher& matcher, const std::vector<AddedToken>& added,
                 bool specials, OnText on_text, OnToken on_token) {
  std::size_t done = 0, from = 0;
  if (!matcher.empty())
    while (const auto hit = matcher.find(text, from)) {
      from = hit->end;  // the search goes on after the match itself, not after what rstrip took
      const AddedToken& t = added[static_cast<std::size_t>(hit->index)];
      if (!specials && t.special) continue;
      std::size_t begin = hit->begin, end = hit->end;
      if (t.lstrip) begin = std::max(whitespace_before(text, begin), done);
      if (t.rstrip) end = whitespace_after(text, end);
      if (done < begin) on_text(text.substr(done, begin - done));
      on_token(t.id);
      done = end;
    }
  if (done < text.size()) on_text(text.substr(done));
}

}  // namespace

void split_added_tokens(std::string_view text, const AddedMatcher& matcher, const std::vector<AddedToken>& added,
                        bool specials, const std::function<void(std::string_view)>& on_text,
                        const std::function<void(std::int32_t)>& on_token) {
  split_added(text, matcher, added, specials, on_text, on_token);
}

ByteLevelBPE::ByteLevelBPE(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

void ByteLevelBPE::Impl::check_id(std::int64_t id, const char* what) const {
  const auto v = static_cast<std::int64_t>(bytes.size());
  if (id < 0 || id >= v)
    throw IndexError(std::string(what) + ": token id " + std::to_string(id) + " is out of range; the vocabulary has " +
                     std::to_string(v) + " tokens (ids 0.." + std::to_string(v - 1) + ")");
}

void ByteLevelBPE::Impl::encode_piece(std::string_view piece, std::vector<std::int64_t>& out) const {
  const auto* p = reinterpret_cast<const unsigned char*>(piece.data());
  if (piece.size() == 1) {
    if (byte_id[p[0]] >= 0)
      out.push_back(byte_id[p[0]]);
    else if (bpe_unk >= 0)
      out.push_back(bpe_unk);
    return;
  }
  if (ignore_merges)
    if (const auto it = whole.find(piece); it != whole.end()) {
      out.push_back(it->second);
      return;
    }
  const bool cacheable = piece.size() < kCacheMaxPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (const auto it = cache.find(piece); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  // One symbol per byte. A byte without a token is dropped, as HF's BPE does without an unk
  // token, or becomes the unk token (one for a run of them with fuse_unk).
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  bool after_unknown = false;
  for (std::size_t i = 0; i < piece.size(); ++i) {
    std::int32_t id = byte_id[p[i]];
    const bool unknown = id < 0;
    if (unknown) id = bpe_unk;
    if (id < 0 || (unknown && fuse_unk && after_unknown)) continue;
    after_unknown = unknown;
    const auto k = static_cast<std::int32_t>(sym.size());
    sym.push_back({id, k - 1, -1, true});
    if (k > 0) sym[k - 1].next = k;
  }
  // Merge the lowest-rank adjacent pair (leftmost among equals) until none has a merge.
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto offer = [&](std::int32_t left) {
    const std::int32_t right = sym[left].next;
    if (right < 0) return;
    const auto it = merges.find(pair_key(sym[left].id, sym[right].id));
    if (it != merges.end()) heap.push({it->second.rank, left, it->second.result});
  };
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(sym.size()); ++i) offer(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;  // stale: this symbol was merged away or has no right side now
    Symbol& right = sym[left.next];
    const auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.result != top.result) continue;  // stale: the pair changed
    left.id = top.result;
    left.next = right.next;
    right.alive = false;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0) offer(left.prev);
    offer(top.pos);
  }
  std::vector<std::int32_t> ids;
  for (std::int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu);
    if (cache.size() < kCacheCapacity) cache.emplace(std::string(piece), std::move(ids));
  }
}

void ByteLevelBPE::Impl::split_pieces(std::string_view text, std::vector<std::string_view>& out,
                                      PieceArena& arena) const {
  pre.split(text, out, arena);
}

void ByteLevelBPE::Impl::encode_segment(std::string_view text, bool specials, std::vector<std::int64_t>& out) const {
  std::string normal;
  if (normalization == Normalization::NFC && nfc(text, normal)) text = normal;
  std::vector<std::string_view> pieces;
  PieceArena arena;
  split_added(
      text, normalized_added, added, specials,
      [&](std::string_view part) {
        pieces.clear();
        split_pieces(part, pieces, arena);
        for (const std::string_view piece : pieces) encode_piece(piece, out);
      },
      [&](std::int32_t id) { out.push_back(id); });
}

void ByteLevelBPE::Impl::encode_text(std::string_view text, bool specials, std::vector<std::int64_t>& out) const {
  split_added(
      text, raw_added, added, specials, [&](std::string_view part) { encode_segment(part, specials, out); },
      [&](std::int32_t id) { out.push_back(id); });
}

std::vector<std::int64_t> ByteLevelBPE::encode(std::string_view text) const {
  utf8::check(text, "tokenize");
  std::vector<std::int64_t> out;
  out.reserve(text.size() / 3 + 1);
  impl_->encode_text(text, /*specials=*/true, out);
  return out;
}

std::vector<std::int64_t> ByteLevelBPE::encode_ordinary(std::string_view text) const {
  utf8::check(text, "tokenize");
  std::vector<std::int64_t> out;
  out.reserve(text.size() / 3 + 1);
  impl_->encode_text(text, /*specials=*/false, out);
  return out;
}

std::vector<std::string> ByteLevelBPE::pre_tokenize(std::string_view text) const {
  utf8::check(text, "pre-tokenize");
  std::string normal;
  if (impl_->normalization == Normalization::NFC && nfc(text, normal)) text = normal;
  std::vector<std::string_view> pieces;
  PieceArena arena;
  impl_->split_pieces(text, pieces, arena);
  return {pieces.begin(), pieces.end()};
}

std::string ByteLevelBPE::decode_bytes(const std::vector<std::int64_t>& ids) const {
  std::string out;
  for (const std::int64_t id : ids) {
    impl_->check_id(id, "decode");
    out += impl_->bytes[static_cast<std::size_t>(id)];
  }
  return out;
}

std::string ByteLevelBPE::decode(const std::vector<std::int64_t>& ids) const {
  const std::string raw = decode_bytes(ids);
  std::string out;
  out.reserve(raw.size());
  utf8::append_lossy(raw, /*final=*/true, out);
  return out;
}

const std::string& ByteLevelBPE::token_bytes(std::int64_t id) const {
  impl_->check_id(id, "token_bytes");
  return impl_->bytes[static_cast<std::size_t>(id)];
}

std::int64_t ByteLevelBPE::vocab_size() const { return static_cast<std::int64_t>(impl_->bytes.size()); }

std::optional<std::int64_t> ByteLevelBPE::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  if (const auto it = impl_->ids.find(token); it != impl_->ids.end()) return it->second;
  return std::nullopt;
}

std::optional<std::int64_t> ByteLevelBPE::eos_id() const { return impl_->eos; }
std::optional<std::int64_t> ByteLevelBPE::bos_id() const { return impl_->bos; }
std::optional<std::int64_t> ByteLevelBPE::pad_id() const { return impl_->pad; }
std::optional<std::int64_t> ByteLevelBPE::unk_id() const { return impl_->unk; }
bool ByteLevelBPE::add_bos() const { return impl_->add_bos; }
bool ByteLevelBPE::add_eos() const { return impl_->add_eos; }

std::vector<std::string> ByteLevelBPE::special_tokens() const {
  std::vector<std::string> out;
  for (const AddedToken& t : impl_->added)
    if (t.special) out.push_back(t.content);
  std::sort(out.begin(), out.end());
  return out;
}

bool ByteLevelBPE::is_special(std::int64_t id) const {
  impl_->check_id(id, "is_special");
  const auto& added = impl_->added;  // sorted by id
  const auto it = std::lower_bound(added.begin(), added.end(), id,
                                   [](const AddedToken& t, std::int64_t x) { return t.id < x; });
  return it != added.end() && it->id == id && it->special;
}

std::string ByteLevelBPE::token_string(std::int64_t id) const {
  impl_->check_id(id, "token_string");
  const auto& added = impl_->added;  // sorted by id
  const auto it = std::lower_bound(added.begin(), added.end(), id,
                                   [](const AddedToken& t, std::int64_t x) { return t.id < x; });
  if (it != added.end() && it->id == id) return it->content;
  std::string out;
  for (const unsigned char b : impl_->bytes[static_cast<std::size_t>(id)]) utf8::append_code_point(byte_to_code_point(b), out);
  return out;
}

}  // namespace qkv::tokenize
