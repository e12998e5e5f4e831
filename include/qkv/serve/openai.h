// The OpenAI API's request bodies, parsed and checked: /v1/chat/completions, /v1/completions and
// /v1/embeddings. Unknown fields are ignored; a known field of the wrong type or out of range is
// an ApiError (HTTP 400) naming it, with OpenAI's message, `param` and `code`:
//   Invalid type for 'temperature': expected a number, but got a string instead.   (invalid_type)
//   Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, but got 0 instead.
// Bodies nested deeper than kMaxJsonDepth are refused before they are parsed.
//
// Thread safety: the functions are pure.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/tokenize/chat_template.h"

namespace qkv::serve {

// An error answered in OpenAI's shape {"error": {"message", "type", "param", "code"}}.
class ApiError : public Error {
 public:
  ApiError(int status, const std::string& message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error")
      : Error(message), status_(status), param_(std::move(param)), code_(std::move(code)), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }  // "" -> null
  const std::string& code() const { return code_; }    // "" -> null
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string param_, code_, type_;
};

// The JSON body of an ApiError (one line; invalid UTF-8 in the message replaced by U+FFFD).
std::string error_json(const ApiError& e);

inline constexpr int kMaxJsonDepth = 32;
inline constexpr std::size_t kMaxStopStrings = 4;
inline constexpr std::int64_t kMaxApiTopLogprobs = 20;
inline constexpr std::size_t kMaxEmbeddingInputs = 2048;
inline constexpr std::size_t kMaxLogitBias = 1024;  // logit_bias entries: a bound on the work per token

enum class ApiKind { Chat, Completion };

struct GenerationParams {
  ApiKind kind = ApiKind::Chat;
  std::string model;                     // "" when absent
  // chat: at least one; role system | developer | user | assistant | tool, content a string or the
  // text parts of a content array joined
  std::vector<tokenize::ChatMessage> messages;
  // chat: chat_template_kwargs, variables for the model's chat template (name -> JSON text)
  std::map<std::string, std::string> chat_template_kwargs;
  std::string prompt;                    // completion, as text ...
  std::vector<std::int64_t> prompt_ids;  // ... or as token ids (prompt_is_ids)
  bool prompt_is_ids = false;
  // >= 1, or 0 with echo (the prompt alone, scored with logprobs); max_completion_tokens wins over max_tokens
  std::optional<std::int64_t> max_tokens;
  // completion: echo, the prompt's text before the completion's, and with logprobs its tokens
  // scored (the first token's logprob and top_logprobs null), as OpenAI's legacy API
  bool echo = false;
  // The sampling fields a request may leave out: then the model's advice (its
  // generation_config.json, a GGUF's general.sampling) over llama.cpp's defaults, as llama-server.
  std::optional<double> temperature;       // [0, 2]
  std::optional<double> top_p;             // [0, 1] (0: greedy)
  std::optional<std::int64_t> top_k;       // >= 0 (0: off)
  std::optional<std::uint64_t> seed;
  std::vector<std::string> stop;           // up to kMaxStopStrings, none empty
  bool stream = false;
  bool ignore_eos = false;                 // llama.cpp's extension: end-of-sequence tokens do not stop
  bool include_usage = false;              // stream_options.include_usage
  bool logprobs = false;
  std::int64_t top_logprobs = 0;           // [0, 20]
  std::optional<double> min_p;             // [0, 1] (0: off)
  double frequency_penalty = 0.0;          // [-2, 2]
  double presence_penalty = 0.0;           // [-2, 2]
  std::optional<double> repeat_penalty;    // > 0 (1: off; llama-server's)
  std::optional<std::int64_t> repeat_last_n;  // >= -1 (llama-server's)
  std::vector<std::pair<std::int64_t, double>> logit_bias;  // token id -> bias in [-100, 100]
};

// body -> the checked fields of a chat (ApiKind::Chat) or completion request. ApiError 400.
GenerationParams parse_generation_request(std::string_view body, ApiKind kind);

struct EmbeddingParams {
  std::string model;               // "" when absent
  std::vector<std::string> input;  // 1 .. kMaxEmbeddingInputs texts, none empty ...
  // ... or as token ids of the model's vocabulary (input_is_ids): [1, 2] is one input, [[1, 2],
  // [3]] two; none empty
  std::vector<std::vector<std::int64_t>> input_ids;
  bool input_is_ids = false;
  bool base64 = false;             // encoding_format "base64" (else "float")
};

EmbeddingParams parse_embedding_request(std::string_view body);

// Depth of the deepest array or object in a JSON text (strings skipped), scanning at most until
// it passes `limit` (so a hostile body costs one pass and no recursion).
int json_depth(std::string_view text, int limit);

// Constant-time comparison for secrets (API keys): the time depends on the lengths only.
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace qkv::serve
