// Training a GPT-2 byte-level BPE: the same vocabulary and merges as Hugging Face
// `tokenizers` 0.23 with
//
//   tok = Tokenizer(models.BPE())
//   tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
//   trainer = trainers.BpeTrainer(vocab_size=N, min_frequency=F, special_tokens=[...],
//                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
//   tok.train_from_iterator(texts, trainer)    # train_byte_level_bpe(texts, o)
//   tok.train([file, ...], trainer)            # train_byte_level_bpe_files(paths, o)
//   tok.model.save(dir)                        # save_bpe(result, dir)
//
// What it does (HF tokenizers/src/models/bpe/trainer.rs, read for this; the
// rules are restated in src/tokenize/bpe_train.cpp):
//   1. Each sequence (a text; for files, a line with its "\n" kept) is cut by the
//      GPT-2 regex (qkv/tokenize/pretokenize.h) into pieces; equal pieces are
//      counted once with their number of occurrences. Special tokens in the text
//      are ordinary text here (HF does not split them out while training).
//   2. Ids: the special tokens first (in the given order), then the 256 one-byte
//      tokens in the order of their bytes_to_unicode character (code point order:
//      '!'..'~', U+00A1.., then U+0100.. for space, controls, ...).
//   3. Repeatedly merge the most frequent adjacent pair (ties: the smallest
//      (left id, right id)) into a new token, until the vocabulary has vocab_size
//      entries, no pair is left, or the best pair occurs fewer than min_frequency
//      times. A merge whose string already is a token reuses that token's id.
//
// Shapes: V = vocab size (ids 0..V-1), M = number of merges (<= V - 256 - specials).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qkv::tokenize {

// Where training is, for a progress display.
struct BpeTrainProgress {
  enum class Stage { CountWords, Merge };
  Stage stage;
  std::int64_t done;   // CountWords: bytes of text pre-tokenized; Merge: merges made so far
  std::int64_t total;  // CountWords: bytes of all the text;       Merge: tokens to add (vocab_size - 256 - specials)
};

struct BpeTrainOptions {
  std::int64_t vocab_size = 30000;  // HF's default; at least 256 + the number of special tokens
  std::int64_t min_frequency = 0;   // a pair seen fewer times is not merged (HF's default 0)
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  std::function<void(const BpeTrainProgress&)> progress;  // optional; called now and then
};

// Why the merges stopped.
enum class BpeTrainStop { VocabFull, NoPairsLeft, BelowMinFrequency };

struct BpeTrainResult {
  // id -> token as written in vocab.json: byte tokens in GPT-2's bytes_to_unicode
  // alphabet (' ' -> "Ġ"), special tokens verbatim. [V]
  std::vector<std::string> vocab;
  // merges.txt in rank order, each (left token, right token) as in vocab. [M]
  std::vector<std::pair<std::string, std::string>> merges;
  std::int64_t text_bytes = 0;  // bytes of text trained on
  std::int64_t words = 0;       // distinct pre-tokenized pieces
  BpeTrainStop stop = BpeTrainStop::VocabFull;
};

// Each element of texts is one sequence (HF train_from_iterator). ValueError for
// vocab_size below 256 + specials, an empty special token, text that is not UTF-8
// (naming the text's index and the byte) or no text at all (every text empty).
BpeTrainResult train_byte_level_bpe(const std::vector<std::string_view>& texts, const BpeTrainOptions& o);

// The files, in order, read as HF's Tokenizer.train(files) reads them: every line
// with its line end ("\n", or "\r\n" kept whole) is one sequence; a last line
// without "\n" is one too. IOError naming a file that cannot be read; ValueError
// naming the file, line and byte for invalid UTF-8, and when all the files are empty.
BpeTrainResult train_byte_level_bpe_files(const std::vector<std::string>& paths, const BpeTrainOptions& o);

// vocab.json as HF writes it: one line, {"token":id,...} in id order, JSON escapes
// only for '"', '\\' and control characters (serde_json's compact form).
std::string bpe_vocab_json(const BpeTrainResult& r);
// merges.txt as HF writes it: "#version: 0.2\n" then "left right\n" per merge.
std::string bpe_merges_txt(const BpeTrainResult& r);
// Writes dir/vocab.json and dir/merges.txt (each atomically; dir is created if
// missing). IOError naming the path on failure. ByteLevelBPE::from_folder(dir),
// GPT2TokenizerFast(vocab_file, merges_file) and HF's BPE.from_file load them.
void save_bpe(const BpeTrainResult& r, const std::string& dir);

}  // namespace qkv::tokenize
