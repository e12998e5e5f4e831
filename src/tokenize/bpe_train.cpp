// Byte-level BPE training, rule for rule the one of Hugging Face tokenizers 0.23
// (tokenizers/src/models/bpe/trainer.rs, `BpeTrainer::do_train`, and
// tokenizers/src/models/bpe/word.rs, `Word::merge`; the file reading is
// `TokenizerImpl::train_from_files` in tokenizers/src/tokenizer/mod.rs with
// `lines_with_ending` from tokenizers/src/utils/iter.rs). What must match HF
// exactly, and why each part below is the way it is:
//
//   Word counts   every sequence is pre-tokenized on its own; a piece ("word")
//                 is kept once with its count. Words are processed by index; the
//                 result does not depend on their order (only sums and sets of
//                 word indices are formed from it).
//   Initial ids   special tokens first (skipping repeats), then the alphabet sorted
//                 by code point of its bytes_to_unicode character (HF sorts the
//                 `char`s of `initial_alphabet` plus those seen in the words; with
//                 ByteLevel.alphabet() that is all 256 byte characters).
//   Pair counts   pair_counts[(a, b)] = sum over words of count(word) x the number
//                 of adjacent (a, b) in it (overlapping windows, so "aaa" has two
//                 (a, a)); where[(a, b)] = the words that contain it.
//   The queue     a max-heap of entries (count, pair, words). Order: the larger
//                 count first; on equal counts the smaller pair (left id, then right
//                 id) first -- HF's `Ord for Merge`, "other.pair.cmp(&self.pair)".
//                 Counts in the heap are snapshots ("lazy"): a popped entry whose
//                 count differs from pair_counts is pushed back with the current count
//                 (and its old word list) and the loop goes on.
//   Stopping      before each pop: stop once the vocabulary has vocab_size tokens or
//                 the heap is empty; after a pop with a current count: stop if the
//                 count is < 1 or < min_frequency.
//   A merge       the new token's string is left + right; if that string already is
//                 a token (e.g. "a"+"bc" after "ab"+"c"), its id is reused and the
//                 vocabulary does not grow. The pair is merged left to right, without
//                 overlap, in the popped entry's words only. Every merge reports
//                 (prev, a) -1, (prev, new) +1, (b, next) -1, (new, next) +1; the merged
//                 pair's own count is NOT lowered (HF never does), the words that got a
//                 new pair are collected per pair, and each such pair with a positive
//                 count is pushed as a new entry (with those words only).
//   merges.txt    HF keeps the merges in a map pair -> (rank, id), so a pair merged
//                 twice (possible when a reused id re-creates it) keeps its last rank;
//                 the file lists the distinct pairs by rank.
//
// One choice HF leaves open: two heap entries for the same pair with the same count
// (only possible after an id was reused) pop in an order that depends on its hash
// maps' random state; here the older entry pops first.
//
// Cost: one pass of the regex over the text, then per merge only the words that
// contain the pair (no rescan of the corpus).
#include "qkv/tokenize/bpe_train.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <system_error>
#include <unordered_map>

#include "bpe_impl.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/tokenize/pretokenize.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize {

namespace {

using Pair = std::uint64_t;  // (left id << 32) | right id: uint64 order == (left, right) order

Pair pair_of(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}
std::int32_t left_of(Pair p) { return static_cast<std::int32_t>(p >> 32); }
std::int32_t right_of(Pair p) { return static_cast<std::int32_t>(p & 0xFFFFFFFFu); }

// The distinct pre-tokenized pieces of all sequences, in order of first appearance, with counts.
// Pieces point into the caller's text, which must outlive the counter.
class WordCounter {
 public:
  void add_sequence(std::string_view s) {
    pieces_.clear();
    pre_.split(s, pieces_);
    for (const std::string_view p : pieces_) {
      const auto [it, fresh] = index_.try_emplace(p, static_cast<std::int32_t>(words.size()));
      if (fresh) {
        words.push_back(p);
        counts.push_back(1);
      } else {
        ++counts[static_cast<std::size_t>(it->second)];
      }
    }
  }
  std::vector<std::string_view> words;
  std::vector<std::int64_t> counts;

 private:
  Gpt2PreTokenizer pre_;
  std::vector<std::string_view> pieces_;
  std::unordered_map<std::string_view, std::int32_t> index_;
};

// Pairs that gained occurrences, each with the (distinct, ascending) words where it did,
// in the order the pairs were first seen.
class PairWords {
 public:
  void add(Pair p, std::int32_t word) {
    const auto [it, fresh] = slot_.try_emplace(p, static_cast<std::uint32_t>(list_.size()));
    if (fresh) list_.emplace_back(p, std::vector<std::int32_t>{});
    std::vector<std::int32_t>& w = list_[it->second].second;
    if (w.empty() || w.back() != word) w.push_back(word);  // words are visited in order
  }
  std::vector<std::pair<Pair, std::vector<std::int32_t>>>& list() { return list_; }
  void clear() {
    slot_.clear();
    list_.clear();
  }

 private:
  std::unordered_map<Pair, std::uint32_t> slot_;
  std::vector<std::pair<Pair, std::vector<std::int32_t>>> list_;
};

struct Entry {
  std::int64_t count;              // snapshot of pair_counts[pair] when pushed
  Pair pair;
  std::uint64_t seq;               // push order of the entry (for the one tie HF leaves open)
  std::vector<std::int32_t> words;  // where the pair occurred when the entry was made
};

// Heap order (std::push_heap keeps the greatest on top): larger count, then smaller pair, then older.
struct LowerPriority {
  bool operator()(const Entry& x, const Entry& y) const {
    if (x.count != y.count) return x.count < y.count;
    if (x.pair != y.pair) return x.pair > y.pair;
    return x.seq > y.seq;
  }
};

// HF Word::merge: replace every non-overlapping (a, b), left to right, by t in w,
// reporting the pair-count changes as change(pair, +1 or -1).
template <class Change>
void merge_word(std::vector<std::int32_t>& w, std::int32_t a, std::int32_t b, std::int32_t t, Change&& change) {
  const std::size_t n = w.size();
  std::size_t r = 0, o = 0;  // read and write positions; w[0..o) is already merged
  while (r < n) {
    if (w[r] == a && r + 1 < n && w[r + 1] == b) {
      if (o > 0) {
        change(pair_of(w[o - 1], a), -1);
        change(pair_of(w[o - 1], t), +1);
      }
      if (r + 2 < n) {
        change(pair_of(b, w[r + 2]), -1);
        change(pair_of(t, w[r + 2]), +1);
      }
      w[o++] = t;
      r += 2;
    } else {
      w[o++] = w[r++];
    }
  }
  w.resize(o);
}

// UTF-8 of byte b's bytes_to_unicode character.
const std::array<std::string, 256>& byte_chars() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    for (int b = 0; b < 256; ++b) utf8::append_code_point(byte_to_code_point(static_cast<unsigned char>(b)), t[b]);
    return t;
  }();
  return table;
}

struct Vocab {
  std::vector<std::string> tokens;  // id -> token as in vocab.json
  std::unordered_map<std::string, std::int32_t> ids;
  std::int32_t add(const std::string& s) {  // the id of s, added if new
    const auto [it, fresh] = ids.try_emplace(s, static_cast<std::int32_t>(tokens.size()));
    if (fresh) tokens.push_back(s);
    return it->second;
  }
};

// Special tokens, then the 256 byte tokens by code point; ValueError for bad options.
Vocab initial_vocab(const BpeTrainOptions& o, std::array<std::int32_t, 256>& byte_id) {
  Vocab v;
  for (const std::string& s : o.special_tokens) {
    if (s.empty()) throw ValueError("bpe train: a special token is the empty string");
    utf8::check(s, "bpe train: special token");
    v.add(s);
  }
  const std::size_t specials = v.tokens.size();
  std::array<int, 256> by_char;
  for (int b = 0; b < 256; ++b) by_char[b] = b;
  std::sort(by_char.begin(), by_char.end(), [](int x, int y) {
    return byte_to_code_point(static_cast<unsigned char>(x)) < byte_to_code_point(static_cast<unsigned char>(y));
  });
  for (const int b : by_char) byte_id[b] = v.add(byte_chars()[b]);
  const auto base = static_cast<std::int64_t>(v.tokens.size());
  if (o.vocab_size < base)
    throw ValueError("bpe train: vocab_size " + std::to_string(o.vocab_size) + " is smaller than the " +
                     std::to_string(base) + " tokens every byte-level BPE starts with (256 byte tokens + " +
                     std::to_string(specials) + " special token" + (specials == 1 ? "" : "s") + ")");
  if (o.vocab_size > std::numeric_limits<std::int32_t>::max())
    throw ValueError("bpe train: vocab_size " + std::to_string(o.vocab_size) + " is more than qkv supports (2^31 - 1)");
  if (o.min_frequency < 0)
    throw ValueError("bpe train: min_frequency must be >= 0, got " + std::to_string(o.min_frequency));
  return v;
}

BpeTrainResult train_words(const WordCounter& wc, std::int64_t text_bytes, const BpeTrainOptions& o) {
  std::array<std::int32_t, 256> byte_id{};
  Vocab vocab = initial_vocab(o, byte_id);
  const auto vocab_size = static_cast<std::size_t>(o.vocab_size);

  // Words as id sequences (one id per byte).
  const std::size_t nw = wc.words.size();
  std::vector<std::vector<std::int32_t>> words(nw);
  for (std::size_t i = 0; i < nw; ++i) {
    words[i].reserve(wc.words[i].size());
    for (const char c : wc.words[i]) words[i].push_back(byte_id[static_cast<unsigned char>(c)]);
  }
  const std::vector<std::int64_t>& counts = wc.counts;

  // Pair counts and the words of each pair; one heap entry per pair.
  std::unordered_map<Pair, std::int64_t> pair_counts;
  PairWords where;
  for (std::size_t i = 0; i < nw; ++i) {
    const std::vector<std::int32_t>& w = words[i];
    for (std::size_t k = 0; k + 1 < w.size(); ++k) {
      const Pair p = pair_of(w[k], w[k + 1]);
      pair_counts[p] += counts[i];
      where.add(p, static_cast<std::int32_t>(i));
    }
  }
  std::vector<Entry> heap;
  heap.reserve(where.list().size());
  std::uint64_t seq = 0;
  for (auto& [p, ws] : where.list()) heap.push_back(Entry{pair_counts[p], p, seq++, std::move(ws)});
  where.clear();
  std::make_heap(heap.begin(), heap.end(), LowerPriority{});

  const std::int64_t wanted = o.vocab_size - static_cast<std::int64_t>(vocab.tokens.size());  // new tokens at most
  const auto report = [&](std::int64_t done) {
    if (o.progress) o.progress({BpeTrainProgress::Stage::Merge, done, wanted});
  };
  std::vector<std::pair<Pair, std::int32_t>> made;  // every merge, in order (a pair may repeat)
  BpeTrainStop stop = BpeTrainStop::VocabFull;
  report(0);
  for (;;) {
    if (vocab.tokens.size() >= vocab_size) {
      stop = BpeTrainStop::VocabFull;
      break;
    }
    if (heap.empty()) {
      stop = BpeTrainStop::NoPairsLeft;
      break;
    }
    std::pop_heap(heap.begin(), heap.end(), LowerPriority{});
    Entry top = std::move(heap.back());
    heap.pop_back();
    const std::int64_t now = pair_counts[top.pair];
    if (top.count != now) {  // stale snapshot: back in with the current count
      top.count = now;
      heap.push_back(std::move(top));
      std::push_heap(heap.begin(), heap.end(), LowerPriority{});
      continue;
    }
    if (top.count < 1) {
      stop = BpeTrainStop::NoPairsLeft;
      break;
    }
    if (top.count < o.min_frequency) {
      stop = BpeTrainStop::BelowMinFrequency;
      break;
    }
    const std::int32_t a = left_of(top.pair), b = right_of(top.pair);
    const std::int32_t t = vocab.add(vocab.tokens[static_cast<std::size_t>(a)] + vocab.tokens[static_cast<std::size_t>(b)]);
    made.emplace_back(top.pair, t);

    for (const std::int32_t i : top.words) {
      const std::int64_t c = counts[static_cast<std::size_t>(i)];
      merge_word(words[static_cast<std::size_t>(i)], a, b, t, [&](Pair p, int delta) {
        pair_counts[p] += delta * c;
        if (delta > 0) where.add(p, i);
      });
    }
    for (auto& [p, ws] : where.list()) {
      const std::int64_t c = pair_counts[p];
      if (c > 0) {
        heap.push_back(Entry{c, p, seq++, std::move(ws)});
        std::push_heap(heap.begin(), heap.end(), LowerPriority{});
      }
    }
    where.clear();
    if (made.size() % 64 == 0) report(static_cast<std::int64_t>(made.size()));
  }
  report(static_cast<std::int64_t>(made.size()));

  BpeTrainResult r;
  // A pair merged more than once keeps its last rank (HF's pair -> (rank, id) map).
  std::unordered_map<Pair, std::size_t> last;
  for (std::size_t k = 0; k < made.size(); ++k) last[made[k].first] = k;
  for (std::size_t k = 0; k < made.size(); ++k)
    if (last[made[k].first] == k)
      r.merges.emplace_back(vocab.tokens[static_cast<std::size_t>(left_of(made[k].first))],
                            vocab.tokens[static_cast<std::size_t>(right_of(made[k].first))]);
  r.vocab = std::move(vocab.tokens);
  r.text_bytes = text_bytes;
  r.words = static_cast<std::int64_t>(nw);
  r.stop = stop;
  return r;
}

void report_counting(const BpeTrainOptions& o, std::int64_t done, std::int64_t total) {
  if (o.progress) o.progress({BpeTrainProgress::Stage::CountWords, done, total});
}

// serde_json's escaping of a string (what HF's vocab.json uses).
void append_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

}  // namespace

BpeTrainResult train_byte_level_bpe(const std::vector<std::string_view>& texts, const BpeTrainOptions& o) {
  std::array<std::int32_t, 256> unused{};
  initial_vocab(o, unused);  // bad options fail before any work
  std::int64_t total = 0;
  for (std::size_t k = 0; k < texts.size(); ++k) {
    if (const auto bad = utf8::find_invalid(texts[k]))
      throw ValueError("bpe train: text " + std::to_string(k) + " is not valid UTF-8 at byte " +
                       std::to_string(bad->offset) + ": " + bad->reason);
    total += static_cast<std::int64_t>(texts[k].size());
  }
  if (total == 0) throw ValueError("bpe train: no text to train on (" + std::to_string(texts.size()) + " empty texts)");
  WordCounter wc;
  std::int64_t done = 0;
  for (const std::string_view t : texts) {
    wc.add_sequence(t);
    done += static_cast<std::int64_t>(t.size());
    report_counting(o, done, total);
  }
  return train_words(wc, total, o);
}

BpeTrainResult train_byte_level_bpe_files(const std::vector<std::string>& paths, const BpeTrainOptions& o) {
  std::array<std::int32_t, 256> unused{};
  initial_vocab(o, unused);
  if (paths.empty()) throw ValueError("bpe train: no text files given");
  std::vector<std::string> contents;
  contents.reserve(paths.size());
  std::int64_t total = 0;
  for (const std::string& path : paths) {
    contents.push_back(io::read_file(path, "bpe train"));
    const std::string& text = contents.back();
    if (const auto bad = utf8::find_invalid(text)) {
      const std::size_t nl = bad->offset == 0 ? std::string::npos : text.rfind('\n', bad->offset - 1);
      const std::size_t col = bad->offset - (nl == std::string::npos ? 0 : nl + 1);
      const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(bad->offset), '\n');
      throw ValueError("bpe train: '" + path + "' line " + std::to_string(line) + " is not valid UTF-8 at byte " +
                       std::to_string(col) + " of the line (byte " + std::to_string(bad->offset) +
                       " of the file): " + bad->reason);
    }
    total += static_cast<std::int64_t>(text.size());
  }
  if (total == 0) throw ValueError("bpe train: no text to train on (every file is empty)");
  WordCounter wc;
  std::int64_t done = 0;
  for (const std::string& text : contents) {
    // HF lines_with_ending: cut after every '\n' (a "\r\n" stays whole); the rest is a last line.
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      end = end == std::string::npos ? text.size() : end + 1;
      wc.add_sequence(std::string_view(text).substr(pos, end - pos));
      pos = end;
    }
    done += static_cast<std::int64_t>(text.size());
    report_counting(o, done, total);
  }
  return train_words(wc, total, o);
}

std::string bpe_vocab_json(const BpeTrainResult& r) {
  std::string out = "{";
  for (std::size_t id = 0; id < r.vocab.size(); ++id) {
    if (id) out += ',';
    append_json_string(out, r.vocab[id]);
    out += ':';
    out += std::to_string(id);
  }
  out += '}';
  return out;
}

std::string bpe_merges_txt(const BpeTrainResult& r) {
  std::string out = "#version: 0.2\n";
  for (const auto& [a, b] : r.merges) out.append(a).append(" ").append(b).append("\n");
  return out;
}

void save_bpe(const BpeTrainResult& r, const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec))
    throw IOError("bpe train: the output path '" + dir + "' exists and is not a folder");
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IOError("bpe train: cannot create the output folder '" + dir + "': " + ec.message());
  io::write_file_atomic(dir + "/vocab.json", bpe_vocab_json(r), "bpe train");
  io::write_file_atomic(dir + "/merges.txt", bpe_merges_txt(r), "bpe train");
}

}  // namespace qkv::tokenize
