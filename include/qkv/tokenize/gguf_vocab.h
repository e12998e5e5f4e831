// A byte-level BPE tokenizer from GGUF metadata (tokenizer.ggml.*), as llama.cpp's
// llama-vocab.cpp reads it, with the ids Hugging Face `tokenizers` gives for the model's own
// tokenizer.json. bpe_from_gguf_vocab takes plain vectors (any reader); bpe_from_gguf reads
// them from an io::GGUFFile.
//
//   tokenizer.ggml.model        "gpt2" (byte-level BPE, here) or "llama" (SentencePiece:
//                               sentencepiece.h; tokens, scores, token types, add_space_prefix).
//   tokenizer.ggml.pre          the pre-tokenizer (absent: "default", as llama.cpp):
//     default                   llama.cpp's fallback: Isolated splits by [\p{P}\$\+<=>\^~\|]+,
//                               GPT-2's regex, \p{N}+, [0-9][0-9][0-9]; then byte-level
//     gpt-2 (or gpt2)           GPT-2's regex (HF ByteLevel, use_regex)
//     smollm                    Digits(individual_digits) then GPT-2's regex (SmolLM2's
//                               tokenizer.json; llama.cpp's \p{N} then the GPT-2 regex)
//     llama3, llama-v3,         Llama 3's Split regex, then byte-level; a piece that is a
//     llama-bpe                 vocabulary token is that token (ignore_merges); BOS added
//                               unless tokenizer.ggml.add_bos_token says otherwise
//     qwen2                     NFC (Qwen2's tokenizer.json; llama.cpp skips it), then Qwen2's
//                               Split regex, then byte-level
//     gpt-4o                    GPT-4o's o200k Split regex (Phi-4-mini), then byte-level
//   tokenizer.ggml.tokens       tokens in GPT-2's byte alphabet, id = position (a token listed
//                               twice: the last id is the one text maps to, as in llama.cpp)
//   tokenizer.ggml.merges       "a b", rank = position
//   tokenizer.ggml.token_type   per token: 1 normal, 2 unknown, 3 control, 4 user-defined,
//                               5 unused, 6 byte (0 undefined); the types a byte-level
//                               vocabulary does not use count as normal. Control and unknown tokens are
//                               special: matched whole before BPE except by encode_ordinary;
//                               user-defined tokens are always matched whole (llama.cpp,
//                               and transformers' GGUF loader, do the same).
//   bos / eos / padding / unknown_token_id, add_bos_token, add_eos_token.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <memory>

#include "qkv/io/gguf_writer.h"
#include "qkv/tokenize/bpe.h"

namespace qkv::io {
class GGUFFile;
}

namespace qkv::tokenize {

struct GgufVocab {
  std::string model;                      // tokenizer.ggml.model
  std::optional<std::string> pre;         // tokenizer.ggml.pre
  std::vector<std::string> tokens;        // tokenizer.ggml.tokens
  std::optional<std::vector<std::string>> merges;  // tokenizer.ggml.merges (required for "gpt2")
  std::vector<std::int64_t> token_types;  // tokenizer.ggml.token_type; empty: all normal
  std::vector<float> scores;              // tokenizer.ggml.scores ("llama": the pieces' scores; empty: all 0)
  std::optional<std::int64_t> bos_id, eos_id, pad_id, unk_id;  // tokenizer.ggml.{bos,eos,padding,unknown}_token_id
  std::optional<bool> add_bos, add_eos;   // tokenizer.ggml.add_bos_token / add_eos_token
  std::optional<bool> add_space_prefix;   // tokenizer.ggml.add_space_prefix ("llama"; absent: true)
};

// The tokenizer GGUF metadata describes. `source` (the file) starts every message: FormatError
// "GGUF '<source>': tokenizer.ggml.<key>...: ..." for an unsupported model or pre-tokenizer, a
// token_type list of another length or with an unknown value, a merge whose tokens are not
// in the list, an id out of range, add_bos_token without a BOS id. An empty or non-UTF-8
// control token, or one whose text an earlier one already has, is not matched in text.
ByteLevelBPE bpe_from_gguf_vocab(const GgufVocab& vocab, const std::string& source);
// The tokenizer of any vocabulary model qkv reads: "gpt2" (bpe_from_gguf_vocab) or "llama"
// (SentencePiece::from_gguf_vocab); FormatError naming another model and listing these.
std::shared_ptr<const Tokenizer> tokenizer_from_gguf_vocab(const GgufVocab& vocab, const std::string& source);

// The tokenizer.ggml.* keys of a GGUF file (GGUFFile::open_header is enough: no tensor data).
// FormatError naming the file and the key when a key has the wrong type (the reader's
// message) or tokenizer.ggml.model is absent; then bpe_from_gguf_vocab's checks.
GgufVocab gguf_vocab_from(const io::GGUFFile& file);
ByteLevelBPE bpe_from_gguf(const io::GGUFFile& file);

// The GGUF pre-tokenizer types bpe_from_gguf_vocab knows.
std::vector<std::string> gguf_pre_tokenizer_types();

// The tokenizer.ggml.* keys of a vocabulary (and the chat template when not empty), as
// llama.cpp's converter writes them.
io::GGUFMetadata gguf_tokenizer_metadata(const GgufVocab& v, const std::string& chat_template);

// The GGUF vocabulary of a Hugging Face folder's tokenizer: a SentencePiece one (tokenizer.model,
// or a tokenizer.json of one) as "llama" (pieces, scores, token types, add_space_prefix); a
// byte-level BPE (tokenizer.json's model BPE with its vocab and merges, added tokens: special
// ones as control tokens, the others user-defined; or vocab.json + merges.txt) as "gpt2", with
// llama.cpp's pre-tokenizer type found by running every type qkv knows against the folder's own
// pre-tokenizer on probe texts (FormatError when none matches).
GgufVocab gguf_vocab_from_folder(const std::string& dir);

}  // namespace qkv::tokenize
