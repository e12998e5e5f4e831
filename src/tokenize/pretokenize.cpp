// Pre-tokenizers: GPT-2's regex and the Split / Digits / ByteLevel pipeline (pretokenize.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "qkv/tokenize/pretokenize.h"

#include <pcre2.h>

#include <string>

#include "qkv/core/error.h"
#include "qkv/tokenize/utf8.h"
#include "regex.h"

namespace qkv::tokenize {

namespace {

using detail::Regex;
using detail::Span;

// GPT-2's regex with \s = [\t-\r\x{85}\p{Z}] (Unicode White_Space, Oniguruma's \s) and \S its
// complement: what detail::onig_to_pcre2 makes of Hugging Face's ByteLevel pattern
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (tested).
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^\\t-\\r\\x{85}\\p{Z}\\p{L}\\p{N}]+"
    "|[\\t-\\r\\x{85}\\p{Z}]+(?![^\\t-\\r\\x{85}\\p{Z}])"
    "|[\\t-\\r\\x{85}\\p{Z}]+";

const Regex& gpt2_regex() {
  static const Regex re(kPattern, /*literal=*/false, "GPT-2's pre-tokenizer regex");
  return re;
}

// The pieces of one match list under a behaviour (HF NormalizedString::split), appended to out.
void keep(std::string_view text, std::vector<Span>& spans, SplitBehavior behavior, bool invert,
          std::vector<std::string_view>& out) {
  if (invert)
    for (Span& s : spans) s.match = !s.match;
  auto push = [&](std::size_t b, std::size_t e) {
    if (e > b) out.push_back(text.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (const Span& s : spans) push(s.begin, s.end);
      return;
    case SplitBehavior::Removed:
      for (const Span& s : spans)
        if (!s.match) push(s.begin, s.end);
      return;
    case SplitBehavior::Contiguous:
    case SplitBehavior::MergedWithPrevious: {
      // Contiguous: a span joins the previous one when both match or both do not;
      // MergedWithPrevious: a match joins the span before it unless that one matched too.
      std::vector<Span> merged;
      bool previous_match = false;
      for (const Span& s : spans) {
        const bool join = behavior == SplitBehavior::Contiguous ? s.match == previous_match
                                                                 : s.match && !previous_match;
        if (join && !merged.empty())
          merged.back().end = s.end;
        else
          merged.push_back(s);
        previous_match = s.match;
      }
      for (const Span& s : merged) push(s.begin, s.end);
      return;
    }
    case SplitBehavior::MergedWithNext: {  // from the right: a match joins the span after it unless that one matched
      std::vector<Span> merged;
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->match && !previous_match && !merged.empty())
          merged.back().begin = it->begin;
        else
          merged.push_back(*it);
        previous_match = it->match;
      }
      for (auto it = merged.rbegin(); it != merged.rend(); ++it) push(it->begin, it->end);
      return;
    }
  }
}

}  // namespace

// ---------------------------------------------------------------- GPT-2

Gpt2PreTokenizer::Gpt2PreTokenizer() { gpt2_regex(); }

const char* Gpt2PreTokenizer::pattern() { return kPattern; }

std::string Gpt2PreTokenizer::unicode_version() {
  char buf[64] = {};
  if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) < 0) return "unknown";
  return buf;
}

void Gpt2PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  utf8::check(text, "pre-tokenize");  // PCRE2 runs with NO_UTF_CHECK, which on bad UTF-8 is undefined
  thread_local std::vector<Span> spans;
  spans.clear();
  gpt2_regex().find_matches(text, spans);
  keep(text, spans, SplitBehavior::Isolated, false, out);
}

// ---------------------------------------------------------------- pipeline

struct PreTokenizer::Impl {
  std::vector<PreTokenizeStep> steps;
  std::vector<std::optional<Regex>> regex;  // per step: Split's pattern, Digits' \p{N}; ByteLevel uses gpt2_regex()

  // Appends the pieces step k makes of `piece` to out.
  void apply(std::size_t k, std::string_view piece, std::vector<std::string_view>& out, PieceArena& arena,
             std::vector<Span>& spans) const {
    const PreTokenizeStep& st = steps[k];
    if (st.kind == PreTokenizeStep::Kind::ByteLevel) {
      if (st.add_prefix_space && !piece.starts_with(' ')) {
        arena.push_back(" " + std::string(piece));
        piece = arena.back();
      }
      if (!st.use_regex) {
        out.push_back(piece);
        return;
      }
      spans.clear();
      gpt2_regex().find_matches(piece, spans);
      keep(piece, spans, SplitBehavior::Isolated, false, out);
      return;
    }
    spans.clear();
    regex[k]->find_matches(piece, spans);
    if (st.kind == PreTokenizeStep::Kind::Digits)  // each \p{N} character is a match (HF: char::is_numeric)
      keep(piece, spans, st.individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false, out);
    else
      keep(piece, spans, st.behavior, st.invert, out);
  }
};

PreTokenizer::PreTokenizer(std::vector<PreTokenizeStep> steps, const std::string& what) {
  auto impl = std::make_shared<Impl>();
  impl->steps = std::move(steps);
  for (std::size_t k = 0; k < impl->steps.size(); ++k) {
    const PreTokenizeStep& st = impl->steps[k];
    const std::string where = what + ": step " + std::to_string(k);
    if (st.kind == PreTokenizeStep::Kind::Split)
      impl->regex.emplace_back(Regex(st.pattern, !st.regex, where));
    else if (st.kind == PreTokenizeStep::Kind::Digits)
      impl->regex.emplace_back(Regex("\\p{N}", false, where));
    else
      impl->regex.emplace_back(std::nullopt);
  }
  impl_ = std::move(impl);
}

const std::vector<PreTokenizeStep>& PreTokenizer::steps() const { return impl_->steps; }

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out, PieceArena& arena) const {
  if (text.empty()) return;  // HF drops empty pieces, and every step keeps an empty text empty
  const auto& steps = impl_->steps;
  thread_local std::vector<Span> spans;
  if (steps.empty()) {
    out.push_back(text);
    return;
  }
  std::vector<std::string_view> cur{text}, next;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    std::vector<std::string_view>& dst = k + 1 == steps.size() ? out : next;
    if (&dst == &next) next.clear();
    for (const std::string_view piece : cur) impl_->apply(k, piece, dst, arena, spans);
    if (&dst == &next) cur.swap(next);
  }
}

}  // namespace qkv::tokenize
