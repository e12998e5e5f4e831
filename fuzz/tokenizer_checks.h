// The properties every qkv tokenizer must have on any text, checked through the generic
// interface (tokenize::Tokenizer): shared by fuzz_tokenizer and fuzz_gguf.
//   encode / encode_ordinary / encode_with_specials: ids in 0..V-1 (at most max_length() ids
//   with the specials); a StreamDecoder fed the ids gives what decode() gives, and decode()
//   is valid UTF-8; the special ids are in range and is_special / token_text / token_string
//   answer for them; ByteLevelBPE's pre_tokenize works on valid UTF-8.
// Encoding may refuse only with a ValueError: for invalid UTF-8, or a pre-tokenizer pattern
// that hits PCRE2's match limit ("PCRE2 gave up").
#pragma once
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/tokenizer.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::fuzz {

inline void check_token_ids(const std::shared_ptr<const tokenize::Tokenizer>& tok, const std::vector<std::int64_t>& ids) {
  const std::int64_t v = tok->vocab_size();
  for (std::int64_t id : ids) QKV_FUZZ_CHECK(id >= 0 && id < v);
  tokenize::StreamDecoder stream(tok);
  std::string streamed;
  for (std::int64_t id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  const std::string decoded = tok->decode(ids);
  if (streamed != decoded) {  // what differs, for the report
    std::fprintf(stderr, "%s tokenizer, ids:", tok->kind().c_str());
    for (std::int64_t id : ids) std::fprintf(stderr, " %lld", static_cast<long long>(id));
    std::fprintf(stderr, "\nstreamed: \"%s\"\ndecoded:  \"%s\"\n", streamed.c_str(), decoded.c_str());
  }
  QKV_FUZZ_CHECK(streamed == decoded);
  QKV_FUZZ_CHECK(!tokenize::utf8::find_invalid(decoded).has_value());
  tok->decode_bytes(ids);
}

inline void exercise_tokenizer(const std::shared_ptr<const tokenize::Tokenizer>& tok, const std::string& text) {
  const bool valid = !tokenize::utf8::find_invalid(text).has_value();
  const std::int64_t v = tok->vocab_size();
  QKV_FUZZ_CHECK(v >= 1);
  try {
    check_token_ids(tok, tok->encode(text));
    check_token_ids(tok, tok->encode_ordinary(text));
    const std::vector<std::int64_t> with = tok->encode_with_specials(text);
    check_token_ids(tok, with);
    if (const auto m = tok->max_length()) QKV_FUZZ_CHECK(static_cast<std::int64_t>(with.size()) <= *m);
    if (const auto* bpe = dynamic_cast<const tokenize::ByteLevelBPE*>(tok.get())) bpe->pre_tokenize(text);
  } catch (const ValueError& e) {  // invalid UTF-8, or a pattern that backtracks without end
    QKV_FUZZ_CHECK(!valid || std::string(e.what()).find("PCRE2 gave up") != std::string::npos);
  }
  for (const auto& id : {tok->bos_id(), tok->eos_id(), tok->pad_id(), tok->unk_id()})
    if (id) {
      QKV_FUZZ_CHECK(*id >= 0 && *id < v);
      tok->is_special(*id);
      tok->token_text(*id);
      tok->token_string(*id);
    }
  if (tok->add_bos()) QKV_FUZZ_CHECK(tok->bos_id().has_value());
  if (tok->add_eos()) QKV_FUZZ_CHECK(tok->eos_id().has_value());
  for (const std::string& s : tok->special_tokens())
    if (const auto id = tok->token_to_id(s)) QKV_FUZZ_CHECK(*id >= 0 && *id < v);
  // The first and last ids decode (one at a time and together).
  for (const std::int64_t id : {std::int64_t{0}, v - 1}) {
    tok->token_text(id);
    const std::string s = tok->token_string(id);
    if (const auto back = tok->token_to_id(s)) QKV_FUZZ_CHECK(*back >= 0 && *back < v);
  }
  check_token_ids(tok, {0, v - 1, v / 2});
}

}  // namespace qkv::fuzz
