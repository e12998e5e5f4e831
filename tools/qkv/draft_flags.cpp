// The speculative-decoding flags (see draft_flags.h).
#include "draft_flags.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "command.h"
#include "model_dir.h"
#include "qkv/core/error.h"

namespace qkv::tool {

void DraftFlags::check(bool no_cache, const std::string& cmd) const {
  if (!on() && (max || ngram))
    throw ValueError(std::string(max ? "--draft-max" : "--draft-ngram") +
                     " sets how speculative decoding drafts; it needs --draft ngram or --draft MODEL");
  if (ngram && draft != "ngram")
    throw ValueError("--draft-ngram sets prompt lookup's n-gram length; it goes with --draft ngram, not a draft model");
  if (on() && no_cache)
    throw ValueError("--draft verifies drafted tokens through the KV cache; it cannot go with --no-cache");
  if (on() && draft != "ngram") {
    if (!std::filesystem::exists(draft))
      throw IOError("--draft: '" + draft + "' does not exist (give ngram for prompt lookup, or a draft model's GGUF "
                    "file or folder)");
    require_model_role(draft, models::ModelRole::CausalLM, cmd + " --draft");
  }
}

infer::DraftOptions DraftFlags::options(const tokenize::Tokenizer* target_tokenizer, const std::string& target_name,
                                        infer::KVType kv_cache) const {
  infer::DraftOptions d;
  d.max = max.value_or(infer::kExactDraftMax);
  if (draft == "ngram") {
    d.ngram = ngram.value_or(kDefaultDraftNgram);
    return d;
  }
  const infer::LanguageModel m =
      infer::load_language_model(draft, {.activations = kernels::QActivations::Q8, .kv_cache = kv_cache});
  if (target_tokenizer && m.tokenizer) infer::check_same_vocabulary(*target_tokenizer, target_name, *m.tokenizer, draft);
  d.model = m.model;
  return d;
}

void add_draft_flags(CLI::App& sub, DraftFlags& flags) {
  sub.add_option("--draft", flags.draft,
                 "Speculative decoding: ngram (prompt lookup) or a draft model (a GGUF file or folder of the same "
                 "vocabulary)")
      ->type_name("ngram|MODEL");
  sub.add_option("--draft-max", flags.max,
                 fmt::format("With --draft: the most tokens per draft (1-{}, default {})", infer::kMaxDraftTokens,
                             infer::kExactDraftMax))
      ->check(int_range(1, infer::kMaxDraftTokens));
  sub.add_option("--draft-ngram", flags.ngram,
                 fmt::format("With --draft ngram: the longest n-gram prompt lookup matches (1-{}, default {})",
                             infer::kMaxDraftNgram, kDefaultDraftNgram))
      ->check(int_range(1, infer::kMaxDraftNgram));
}

std::string draft_summary(const infer::SpeculativeStats& sp) {
  return fmt::format("speculative: {} of {} drafted tokens accepted ({:.0f}%), {} target passes, {:.2f} tokens per pass",
                     sp.accepted, sp.drafted, 100 * sp.acceptance(), sp.target_passes, sp.tokens_per_pass());
}

}  // namespace qkv::tool
