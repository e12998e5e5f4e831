// The speculative-decoding flags shared by `qkv generate` and `qkv bench generate` (--draft,
// --draft-max, --draft-ngram): one spelling, one meaning, one check.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "qkv/infer/language_model.h"
#include "qkv/infer/speculative.h"

namespace qkv::tool {

// Prompt lookup's longest n-gram when --draft-ngram is not given (llama.cpp's lookup and
// transformers' prompt lookup match 2 to 4 tokens).
inline constexpr std::int64_t kDefaultDraftNgram = 3;

struct DraftFlags {
  std::string draft;  // "ngram" (prompt lookup) or a draft model's path; empty: no speculation
  std::optional<std::int64_t> max, ngram;

  bool on() const { return !draft.empty(); }
  // ValueError / IOError naming the flag, before any model is read: --draft-max or --draft-ngram
  // without --draft, --draft-ngram with a draft model, --draft with --no-cache, a draft model that
  // does not exist or is not a causal LM (`cmd` names the command in that message).
  void check(bool no_cache, const std::string& cmd) const;
  // The library's options: prompt lookup, or the draft model loaded (with Q8 activations: its
  // guesses need not be exact, the target checks each; the target's KV cache type) and its
  // tokenizer checked token by token against the target's (`target_name`'s) when both have one
  // (else the vocabulary sizes are checked by generate()).
  infer::DraftOptions options(const tokenize::Tokenizer* target_tokenizer, const std::string& target_name,
                              infer::KVType kv_cache) const;
};

// Adds --draft, --draft-max and --draft-ngram to `sub`.
void add_draft_flags(CLI::App& sub, DraftFlags& flags);

// One line of speculative decoding's counts ("speculative: 29 of 44 drafted tokens accepted ...").
std::string draft_summary(const infer::SpeculativeStats& sp);

}  // namespace qkv::tool
