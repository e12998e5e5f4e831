// Oniguruma-syntax patterns on PCRE2, with Hugging Face's match lists (regex.h).
#include "regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <optional>

#include "qkv/core/error.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize::detail {

namespace {

constexpr std::string_view kSpace = "\\t-\\r\\x{85}\\p{Z}";  // White_Space, Oniguruma's \s
constexpr std::string_view kHex = "0-9A-Fa-f";                // Oniguruma's \h

// Backtracking budget of one match attempt, and the interpreter's heap for it (KiB). The
// tokenizers' patterns need a few steps per character; a hostile pattern (nested
// quantifiers) stops here with an error instead of running for hours or taking gigabytes.
constexpr std::uint32_t kMatchLimit = 50'000'000;
constexpr std::uint32_t kHeapLimitKiB = 256 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// One match-data block per thread (one ovector pair: only the whole match is read), so a
// match allocates nothing and any number of threads may run the same pattern.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder h;
  if (!h.md) throw AllocError("pre-tokenize: cannot allocate PCRE2 match data");
  return h.md;
}

// "(?imx-imx)" or "(?imx-imx:" at p[i] (i at '('): the index of its ')' or ':', else npos.
std::size_t option_group_end(std::string_view p, std::size_t i) {
  if (p.substr(i, 2) != "(?") return std::string_view::npos;
  std::size_t j = i + 2;
  while (j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-')) ++j;
  if (j == i + 2 || j >= p.size() || (p[j] != ')' && p[j] != ':')) return std::string_view::npos;
  return j;
}

}  // namespace

std::string onig_to_pcre2(std::string_view p, const std::string& what) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  bool class_first = false;  // just after '[' or '[^': a ']' here is a literal
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    const bool first = class_first;
    class_first = false;
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kSpace) : "[" + std::string(kSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kSpace) + "]";
      } else if (e == 'h') {
        out += in_class ? std::string(kHex) : "[" + std::string(kHex) + "]";
      } else if (e == 'H') {
        if (in_class) throw FormatError(what + ": \\H inside a character class is not supported");
        out += "[^" + std::string(kHex) + "]";
      } else {
        out += '\\';
        out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == '[') {
        const std::size_t close = p.substr(i, 2) == "[:" ? p.find(":]", i + 2) : std::string_view::npos;
        if (close == std::string_view::npos)
          throw FormatError(what + ": nested character classes are not supported (a '[' inside [...])");
        out.append(p.substr(i, close + 2 - i));  // a POSIX class [:alpha:]
        i = close + 1;
        continue;
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&')
        throw FormatError(what + ": class intersections (&&) are not supported");
      if (c == ']' && !first) in_class = false;
      if (c == '^' && first && out.back() == '[') class_first = true;  // "[^]..." keeps ']' literal
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      class_first = true;
      out += c;
      continue;
    }
    if (c == '(') {
      const std::size_t end = option_group_end(p, i);
      if (end != std::string_view::npos) {
        for (std::size_t k = i; k <= end; ++k) out += p[k] == 'm' && k > i + 1 ? 's' : p[k];
        i = end;
        continue;
      }
    }
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* context = nullptr;
  std::string what;
  ~Impl() {
    pcre2_match_context_free(context);
    pcre2_code_free(code);
  }
};

Regex::Regex(std::string_view pattern, bool literal, const std::string& what) {
  auto impl = std::make_shared<Impl>();
  impl->what = what;
  if (const auto bad = utf8::find_invalid(pattern))
    throw FormatError(what + ": the pattern is not valid UTF-8 (byte " + std::to_string(bad->offset) + ")");
  const std::string translated = literal ? std::string(pattern) : onig_to_pcre2(pattern, what);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  const std::uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options, &err,
                             &err_off, nullptr);
  if (!impl->code)
    throw FormatError(what + ": PCRE2 cannot compile the pattern (at offset " + std::to_string(err_off) +
                      " of the pattern as rewritten for PCRE2): " + pcre2_message(err));
  pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE);  // without JIT the interpreter runs it
  impl->context = pcre2_match_context_create(nullptr);
  if (!impl->context) throw AllocError("pre-tokenize: cannot allocate a PCRE2 match context");
  pcre2_set_match_limit(impl->context, kMatchLimit);
  pcre2_set_heap_limit(impl->context, kHeapLimitKiB);
  impl_ = std::move(impl);
}

void Regex::find_matches(std::string_view text, std::vector<Span>& out) const {
  const std::size_t n = text.size();
  if (n == 0) {
    out.push_back({0, 0, false});
    return;
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  pcre2_match_data* md = thread_match_data();
  std::size_t from = 0;  // onig's last_end: where the next search starts
  std::optional<std::size_t> last_match_end;
  std::size_t prev = 0;  // end of what is already in `out`
  while (from <= n) {
    int rc = pcre2_match(impl_->code, subject, n, from, PCRE2_NO_UTF_CHECK, md, impl_->context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its frames on the heap
      rc = pcre2_match(impl_->code, subject, n, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, impl_->context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      throw ValueError("pre-tokenize: " + impl_->what + ": PCRE2 gave up matching at byte " + std::to_string(from) +
                       " of a " + std::to_string(n) + "-byte piece: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t s = ov[0], e = ov[1];
    if (s == e && last_match_end == e) {  // an empty match right after the last one: step one character
      from += from < n ? utf8::scan(reinterpret_cast<const unsigned char*>(text.data()) + from, n - from).len : 1;
      continue;
    }
    from = e;
    last_match_end = e;
    if (prev != s) out.push_back({prev, s, false});
    out.push_back({s, e, true});
    prev = e;
  }
  if (prev != n) out.push_back({prev, n, false});
}

}  // namespace qkv::tokenize::detail
