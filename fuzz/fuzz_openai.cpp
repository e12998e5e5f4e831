// libFuzzer target: the OpenAI request bodies `qkv serve` reads (serve/openai.h). The input is one
// body, parsed as a chat request, a completion request and an embedding request. Each may only
// fail with a serve::ApiError of status 400 (what the server answers), whose error_json is one
// line of valid JSON; an accepted request holds only values the parser promises (ranges, counts,
// non-empty stop strings and inputs), whatever the body.
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.h"
#include "qkv/serve/openai.h"

using namespace qkv;
using serve::ApiError;
using serve::ApiKind;

namespace {

void check_error(const ApiError& e) {
  QKV_FUZZ_CHECK(e.status() == 400);
  const std::string body = serve::error_json(e);
  QKV_FUZZ_CHECK(body.find('\n') == std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  QKV_FUZZ_CHECK(!j.is_discarded() && j.contains("error") && j["error"]["message"].is_string());
  fuzz::note_refusal("request", e);
}

void check_generation(const serve::GenerationParams& p, ApiKind kind) {
  QKV_FUZZ_CHECK(p.kind == kind);
  if (kind == ApiKind::Chat) QKV_FUZZ_CHECK(!p.messages.empty());
  if (p.max_tokens) QKV_FUZZ_CHECK(*p.max_tokens >= 1);
  if (p.temperature) QKV_FUZZ_CHECK(std::isfinite(*p.temperature) && *p.temperature >= 0 && *p.temperature <= 2);
  if (p.top_p) QKV_FUZZ_CHECK(std::isfinite(*p.top_p) && *p.top_p >= 0 && *p.top_p <= 1);
  if (p.top_k) QKV_FUZZ_CHECK(*p.top_k >= 0);
  if (p.min_p) QKV_FUZZ_CHECK(*p.min_p >= 0 && *p.min_p <= 1);
  if (p.repeat_penalty) QKV_FUZZ_CHECK(std::isfinite(*p.repeat_penalty) && *p.repeat_penalty > 0);
  if (p.repeat_last_n) QKV_FUZZ_CHECK(*p.repeat_last_n >= -1);
  QKV_FUZZ_CHECK(p.frequency_penalty >= -2 && p.frequency_penalty <= 2);
  QKV_FUZZ_CHECK(p.presence_penalty >= -2 && p.presence_penalty <= 2);
  for (const auto& [id, b] : p.logit_bias) QKV_FUZZ_CHECK(id >= 0 && b >= -100 && b <= 100);
  QKV_FUZZ_CHECK(p.stop.size() <= serve::kMaxStopStrings);
  for (const std::string& s : p.stop) QKV_FUZZ_CHECK(!s.empty());
  QKV_FUZZ_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= serve::kMaxApiTopLogprobs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (ApiKind kind : {ApiKind::Chat, ApiKind::Completion}) {
    try {
      check_generation(serve::parse_generation_request(body, kind), kind);
    } catch (const ApiError& e) {
      check_error(e);
    }
  }
  try {
    const serve::EmbeddingParams p = serve::parse_embedding_request(body);
    QKV_FUZZ_CHECK(!p.input.empty() && p.input.size() <= serve::kMaxEmbeddingInputs);
    for (const std::string& s : p.input) QKV_FUZZ_CHECK(!s.empty());
  } catch (const ApiError& e) {
    check_error(e);
  }
  // The depth scan never recurses and stops past its limit.
  QKV_FUZZ_CHECK(serve::json_depth(body, serve::kMaxJsonDepth) <= serve::kMaxJsonDepth + 1);
  return 0;
}
