// The corpus and tokenizer of a language-model training state (fuzz_checkpoint and
// fuzz_make_seeds share them, so the seeds' tokens_key matches what the target resumes with):
// the committed tiny GPT-2 tokenizer (tests/fixtures/gpt2_tiny) and a short committed text.
#pragma once
#include <string>

#include "fuzz_util.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/train/lm.h"

namespace qkv::fuzz {

struct LMWorld {
  tokenize::ByteLevelBPE bpe;
  train::TokenFile tokens;
};

inline LMWorld make_lm_world(const Scratch& scratch) {
  const std::string fixtures = std::string(QKV_SOURCE_DIR) + "/tests/fixtures";
  auto bpe = tokenize::ByteLevelBPE::from_folder(fixtures + "/gpt2_tiny");
  const std::string text = scratch.write("lm-world/text.txt", read_bytes(fixtures + "/text/bpe_mixed.txt"));
  train::CorpusTokens ct = train::tokenize_corpus({text}, bpe, scratch.path("lm-world/tokens.bin"));
  return {std::move(bpe), std::move(ct.tokens)};
}

}  // namespace qkv::fuzz
