// Byte-level BPE encode and decode (the tables come from bpe_load.cpp).
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

}  // namespace

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
    if (byte_id[p[0]] >= 0) out.push_back(byte_id[p[0]]);
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
  // One symbol per byte. A byte without a token is dropped, as HF's BPE does without an unk token.
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) {
    const std::int32_t id = byte_id[p[i]];
    if (id < 0) continue;
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

void ByteLevelBPE::Impl::encode_ordinary(std::string_view text, std::vector<std::int64_t>& out) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces;
  pre.split(text, pieces);
  for (const std::string_view piece : pieces) encode_piece(piece, out);
}

std::vector<std::int64_t> ByteLevelBPE::encode(std::string_view text) const {
  utf8::check(text, "tokenize");
  const Impl& m = *impl_;
  std::vector<std::int64_t> out;
  out.reserve(text.size() / 3 + 1);
  // Special tokens first, leftmost-longest (HF's added-token split); the text between them is ordinary.
  std::size_t seg = 0;  // start of the ordinary text not yet encoded
  for (std::size_t pos = m.specials.empty() ? std::string_view::npos : text.find("<|");
       pos != std::string_view::npos; pos = text.find("<|", pos)) {
    std::size_t best = 0;
    std::int32_t best_id = -1;
    const std::size_t limit = std::min(text.size() - pos, m.max_special_len);
    for (std::size_t e = text.find("|>", pos + 2); e != std::string_view::npos && e + 2 - pos <= limit;
         e = text.find("|>", e + 1)) {
      if (const auto it = m.specials.find(text.substr(pos, e + 2 - pos)); it != m.specials.end())
        best = e + 2 - pos, best_id = it->second;
    }
    if (best == 0) {
      ++pos;
      continue;
    }
    m.encode_ordinary(text.substr(seg, pos - seg), out);
    out.push_back(best_id);
    pos += best;
    seg = pos;
  }
  m.encode_ordinary(text.substr(seg), out);
  return out;
}

std::vector<std::int64_t> ByteLevelBPE::encode_ordinary(std::string_view text) const {
  utf8::check(text, "tokenize");
  std::vector<std::int64_t> out;
  out.reserve(text.size() / 3 + 1);
  impl_->encode_ordinary(text, out);
  return out;
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
  const auto it = impl_->ids.find(token);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::optional<std::int64_t> ByteLevelBPE::eos_id() const { return impl_->eos; }

std::vector<std::string> ByteLevelBPE::special_tokens() const {
  std::vector<std::string> out;
  for (const auto& kv : impl_->specials) out.push_back(kv.first);
  std::sort(out.begin(), out.end());
  return out;
}

StreamDecoder::StreamDecoder(const ByteLevelBPE& bpe) : bpe_(bpe) {}

std::string StreamDecoder::push(std::int64_t id) {
  pending_ += bpe_.token_bytes(id);  // IndexError before any state changes
  std::string out;
  const std::size_t used = utf8::append_lossy(pending_, /*final=*/false, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  utf8::append_lossy(pending_, /*final=*/true, out);
  pending_.clear();
  return out;
}

}  // namespace qkv::tokenize
