#include "qkv/tokenize/pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "qkv/core/error.h"
#include "qkv/tokenize/utf8.h"

namespace qkv::tokenize {

namespace {

// \s = [\t-\r\x{85}\p{Z}] (Unicode White_Space, Oniguruma's \s); \S = its complement.
constexpr const char* kPattern =
    "'s|'t|'re|'ve|'m|'ll|'d"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^\\t-\\r\\x{85}\\p{Z}\\p{L}\\p{N}]+"
    "|[\\t-\\r\\x{85}\\p{Z}]+(?![^\\t-\\r\\x{85}\\p{Z}])"
    "|[\\t-\\r\\x{85}\\p{Z}]+";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof buf) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

// One match-data block per thread (one ovector pair: only the whole match is read),
// so split() allocates nothing per call and any number of threads may call it.
pcre2_match_data* thread_match_data() {
  struct Holder {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    ~Holder() { pcre2_match_data_free(md); }
  };
  thread_local Holder h;
  if (!h.md) throw AllocError("pre-tokenize: cannot allocate PCRE2 match data");
  return h.md;
}

}  // namespace

struct Gpt2PreTokenizer::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  Impl() {
    int err = 0;
    PCRE2_SIZE err_off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                         &err, &err_off, nullptr);
    if (!code)
      throw Error("pre-tokenize: PCRE2 rejects the GPT-2 pattern at offset " + std::to_string(err_off) + ": " +
                  pcre2_message(err));
    jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // without JIT the interpreter runs it
  }
  ~Impl() { pcre2_code_free(code); }
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
};

Gpt2PreTokenizer::Gpt2PreTokenizer() : impl_(std::make_shared<const Impl>()) {}

const char* Gpt2PreTokenizer::pattern() { return kPattern; }

std::string Gpt2PreTokenizer::unicode_version() {
  char buf[64] = {};
  if (pcre2_config(PCRE2_CONFIG_UNICODE_VERSION, buf) < 0) return "unknown";
  return buf;
}

void Gpt2PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  utf8::check(text, "pre-tokenize");  // PCRE2 runs with NO_UTF_CHECK, which on bad UTF-8 is undefined
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const std::size_t n = text.size();
  pcre2_match_data* md = thread_match_data();
  std::size_t start = 0;
  while (start < n) {
    int rc = pcre2_match(impl_->code, subject, n, start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // the interpreter keeps its frames on the heap
      rc = pcre2_match(impl_->code, subject, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {  // cannot happen (every character matches an alternative); keep the rest
      out.push_back(text.substr(start));
      return;
    }
    if (rc < 0)
      throw Error("pre-tokenize: PCRE2 match failed at byte " + std::to_string(start) + ": " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    if (b > start) out.push_back(text.substr(start, b - start));  // unmatched gap: its own piece (HF "Isolated")
    if (e > b) {
      out.push_back(text.substr(b, e - b));
      start = e;
    } else {  // empty match (no alternative allows one): step over one character
      const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + b;
      const std::size_t len = b < n ? utf8::scan(p, n - b).len : 1;
      if (b < n) out.push_back(text.substr(b, len));
      start = b + len;
    }
  }
}

}  // namespace qkv::tokenize
