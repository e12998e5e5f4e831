// The one interface of qkv's tokenizers: text <-> token ids, the special tokens, and the model's
// BOS / EOS habits. Behind it: byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM, Phi-4), SentencePiece
// (Llama 2, TinyLlama, Mistral v0.1, Gemma, Phi-3) and WordPiece (BERT). Nothing outside
// tokenize/ names one of them: load_tokenizer finds the right one for a model folder or GGUF file.
//
//   auto tok = tokenize::load_tokenizer("models/SmolLM2-135M-Instruct.Q4_1.gguf");
//   std::vector<std::int64_t> ids = tok->encode("Hello world");   // as transformers' tokenizer
//   std::string text = tok->decode(ids);                          //   (add_special_tokens=False)
//
// A loaded tokenizer is immutable and safe to use from several threads at once.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace qkv::io {
class GGUFFile;
}

namespace qkv::tokenize {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // "byte-level BPE", "SentencePiece" or "WordPiece" (for listings and messages).
  virtual std::string kind() const = 0;

  // text (UTF-8) -> ids, as transformers' tokenizer(text, add_special_tokens=False): special
  // tokens written in the text are matched as tokens. ValueError naming the byte offset for
  // invalid UTF-8.
  virtual std::vector<std::int64_t> encode(std::string_view text) const = 0;
  // As encode, but special tokens in the text are ordinary text (HF split_special_tokens=True;
  // llama.cpp parse_special=false): for untrusted input that must not inject "<|endoftext|>".
  virtual std::vector<std::int64_t> encode_ordinary(std::string_view text) const = 0;
  // What the model is fed for one text: encode's ids with the special tokens the tokenizer
  // adds around them (BOS / EOS per add_bos / add_eos; BERT's [CLS] ... [SEP]), as transformers'
  // tokenizer(text) (add_special_tokens=True).
  virtual std::vector<std::int64_t> encode_with_specials(std::string_view text) const;

  // ids -> text as transformers' decode(ids) (skip_special_tokens=False): invalid UTF-8 byte runs
  // become U+FFFD (one per maximal invalid subpart). IndexError for an id outside 0..V-1.
  virtual std::string decode(const std::vector<std::int64_t>& ids) const;
  // The bytes the ids stand for, before any replacement (nor the start's trimming of decode).
  virtual std::string decode_bytes(const std::vector<std::int64_t>& ids) const;
  // The bytes one token stands for inside a text (a byte-level token's bytes; a SentencePiece
  // piece with its U+2581 as spaces, <0xNN> as that byte; a WordPiece "##" continuation without
  // its marks). IndexError for an id outside 0..V-1.
  virtual std::string token_text(std::int64_t id) const = 0;
  // The token as the vocabulary writes it ("Ġthe", "▁the", "##ing", "<|im_end|>").
  virtual std::string token_string(std::int64_t id) const = 0;
  // Whether decode drops one space at the start of the text (SentencePiece's dummy prefix).
  virtual bool strips_leading_space() const { return false; }
  // The most ids encode_with_specials gives (BERT's model_max_length), or nullopt: no limit.
  virtual std::optional<std::int64_t> max_length() const { return std::nullopt; }

  // V: the number of token ids (vocabulary and added tokens).
  virtual std::int64_t vocab_size() const = 0;
  // The id of a token as the vocabulary writes it (token_string), or of an added token's text.
  virtual std::optional<std::int64_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::int64_t> bos_id() const = 0;
  virtual std::optional<std::int64_t> eos_id() const = 0;
  virtual std::optional<std::int64_t> pad_id() const = 0;
  virtual std::optional<std::int64_t> unk_id() const = 0;
  // Whether the model wants bos_id() before a prompt / eos_id() after it.
  virtual bool add_bos() const = 0;
  virtual bool add_eos() const = 0;
  // The special tokens as written, sorted.
  virtual std::vector<std::string> special_tokens() const = 0;
  // Whether id is a special token (decoders may hide it). IndexError for an id outside 0..V-1.
  virtual bool is_special(std::int64_t id) const = 0;
};

// The tokenizer of a model: a GGUF file's vocabulary (tokenizer.ggml.*: "gpt2" byte-level BPE,
// "llama" SentencePiece), or a folder's tokenizer.json (byte-level BPE, SentencePiece-style BPE
// with byte fallback, WordPiece), tokenizer.model (SentencePiece), vocab.json + merges.txt
// (GPT-2) or vocab.txt (BERT), with tokenizer_config.json's special tokens. nullopt when it has
// none; IOError / FormatError naming the file and the field for a damaged or unsupported one.
std::shared_ptr<const Tokenizer> find_tokenizer(const std::string& path);
// The same, and IOError naming the path and the files looked for when there is none.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::string& path);
// A GGUF file's vocabulary (its header is enough); FormatError when it has none or an unsupported one.
std::shared_ptr<const Tokenizer> tokenizer_from_gguf(const io::GGUFFile& file);
// GPT-2's two files given as their contents (a tokenizer sent between processes): `vocab_name`
// and `merges_name` stand for the files in messages.
std::shared_ptr<const Tokenizer> tokenizer_from_bpe_files(const std::string& vocab_json, const std::string& merges_txt,
                                                          const std::string& vocab_name, const std::string& merges_name);

// Streaming decode for generation: push ids one at a time; each call returns only whole UTF-8
// characters (never half of one). Bytes that can no longer become a character come out as
// U+FFFD, so the concatenation of every push() and finish() equals decode() of all the ids.
// Keeps the tokenizer alive.
class StreamDecoder {
 public:
  explicit StreamDecoder(std::shared_ptr<const Tokenizer> tokenizer);
  // The text completed by token `id` (possibly empty). An id >= V stands for no text: a model's
  // embedding may have more rows than its tokenizer has tokens (Qwen's 151936 rows for 151669
  // tokens), and a generated id there decodes to nothing, as transformers decodes it. IndexError
  // for a negative id.
  std::string push(std::int64_t id);
  // The rest: an incomplete tail becomes U+FFFD (as decode() would); the decoder is then empty.
  std::string finish();

 private:
  std::shared_ptr<const Tokenizer> tok_;
  std::string pending_;  // at most 3 bytes of a character not yet complete
  bool started_ = false;  // a byte was given out (the leading space is only dropped before)
};

}  // namespace qkv::tokenize
