// Parsing and checking the OpenAI API's request bodies (see openai.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "qkv/serve/openai.h"

namespace qkv::serve {
namespace {

using json = nlohmann::json;
using i64 = std::int64_t;

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a decimal";
    default: return "an unsupported value";
  }
}

// "5", "0.9", "1e+300": the value as the message quotes it.
std::string show(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

[[noreturn]] void wrong_type(const std::string& param, const char* expected, const json& v) {
  throw ApiError(400, "Invalid type for '" + param + "': expected " + expected + ", but got " + type_name(v) + " instead.",
                 param, "invalid_type");
}

[[noreturn]] void bad_value(const std::string& param, const std::string& why) {
  throw ApiError(400, "Invalid '" + param + "': " + why, param, "invalid_value");
}

// The field, or nullptr when absent or null (OpenAI treats null as "not given").
const json* field(const json& o, const char* name) {
  const auto it = o.find(name);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

i64 get_int(const json& v, const std::string& param, i64 lo, i64 hi) {
  if (!v.is_number_integer()) wrong_type(param, "an integer", v);
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(hi))
    throw ApiError(400, "Invalid '" + param + "': integer above maximum value. Expected a value <= " + std::to_string(hi) +
                            ", but got " + show(v) + " instead.",
                   param, "integer_above_max_value");
  const i64 x = v.is_number_unsigned() ? static_cast<i64>(v.get<std::uint64_t>()) : v.get<i64>();
  if (x < lo)
    throw ApiError(400, "Invalid '" + param + "': integer below minimum value. Expected a value >= " + std::to_string(lo) +
                            ", but got " + show(v) + " instead.",
                   param, "integer_below_min_value");
  if (x > hi)
    throw ApiError(400, "Invalid '" + param + "': integer above maximum value. Expected a value <= " + std::to_string(hi) +
                            ", but got " + show(v) + " instead.",
                   param, "integer_above_max_value");
  return x;
}

std::string fmt_bound(double b) {
  json j = b;
  if (b == std::floor(b)) j = static_cast<i64>(b);
  return j.dump();
}

double get_number(const json& v, const std::string& param, double lo, double hi) {
  if (!v.is_number()) wrong_type(param, "a number", v);
  const double x = v.get<double>();
  if (!(x >= lo))
    throw ApiError(400, "Invalid '" + param + "': decimal below minimum value. Expected a value >= " + fmt_bound(lo) +
                            ", but got " + show(v) + " instead.",
                   param, "decimal_below_min_value");
  if (!(x <= hi))
    throw ApiError(400, "Invalid '" + param + "': decimal above maximum value. Expected a value <= " + fmt_bound(hi) +
                            ", but got " + show(v) + " instead.",
                   param, "decimal_above_max_value");
  return x;
}

bool get_bool(const json& v, const std::string& param) {
  if (!v.is_boolean()) wrong_type(param, "a boolean", v);
  return v.get<bool>();
}

const std::string& get_string(const json& v, const std::string& param) {
  if (!v.is_string()) wrong_type(param, "a string", v);
  return v.get_ref<const std::string&>();
}

[[noreturn]] void missing(const std::string& param) {
  throw ApiError(400, "Missing required parameter: '" + param + "'.", param, "missing_required_parameter");
}

// The body as a JSON object (400 for anything else).
json parse_object(std::string_view body) {
  if (json_depth(body, kMaxJsonDepth) > kMaxJsonDepth)
    throw ApiError(400, "We could not parse the JSON body of your request: it is nested deeper than " +
                            std::to_string(kMaxJsonDepth) + " levels.",
                   "", "invalid_json");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 9: ..."
    std::string why = e.what();
    if (const auto p = why.find("] "); p != std::string::npos) why = why.substr(p + 2);
    throw ApiError(400, "We could not parse the JSON body of your request (" + why + ").", "", "invalid_json");
  }
  if (!j.is_object())
    throw ApiError(400, "The body of your request must be a JSON object, not " + type_name(j) + ".", "", "invalid_json");
  return j;
}

std::string message_content(const json& m, const std::string& param, const std::string& role) {
  const json* c = field(m, "content");
  if (!c) {
    if (role == "assistant") return "";  // an assistant turn of tool calls may have none
    missing(param + ".content");
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) wrong_type(param + ".content", "a string or an array of content parts", *c);
  std::string text;
  for (std::size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    const std::string pp = param + ".content[" + std::to_string(k) + "]";
    if (!part.is_object()) wrong_type(pp, "an object", part);
    const json* type = field(part, "type");
    if (!type) missing(pp + ".type");
    if (get_string(*type, pp + ".type") != "text")
      bad_value(pp + ".type", "only 'text' content parts are supported, got " + show(*type) + ".");
    const json* t = field(part, "text");
    if (!t) missing(pp + ".text");
    text += get_string(*t, pp + ".text");
  }
  return text;
}

std::vector<tokenize::ChatMessage> parse_messages(const json& o) {
  const json* ms = field(o, "messages");
  if (!ms) missing("messages");
  if (!ms->is_array()) wrong_type("messages", "an array", *ms);
  if (ms->empty())
    throw ApiError(400, "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.",
                   "messages", "empty_array");
  std::vector<tokenize::ChatMessage> out;
  out.reserve(ms->size());
  for (std::size_t i = 0; i < ms->size(); ++i) {
    const json& m = (*ms)[i];
    const std::string p = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(p, "an object", m);
    const json* r = field(m, "role");
    if (!r) missing(p + ".role");
    const std::string& role = get_string(*r, p + ".role");
    if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
      throw ApiError(400, "Invalid value: '" + role + "'. Supported values are: 'system', 'developer', 'user', 'assistant' and 'tool'.",
                     p + ".role", "invalid_value");
    out.push_back({.role = role, .content = message_content(m, p, role)});
  }
  return out;
}

std::vector<i64> parse_ids(const json& a, const std::string& param) {
  if (a.empty()) bad_value(param, "empty array. Expected at least one token id.");
  std::vector<i64> ids;
  ids.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    ids.push_back(get_int(a[i], param + "[" + std::to_string(i) + "]", 0, std::numeric_limits<i64>::max()));
  return ids;
}

void parse_prompt(const json& o, GenerationParams& p) {
  const json* pr = field(o, "prompt");
  if (!pr) missing("prompt");
  if (pr->is_string()) {
    p.prompt = pr->get<std::string>();
    return;
  }
  if (!pr->is_array()) wrong_type("prompt", "a string, an array of token ids, or an array of one of those", *pr);
  if (pr->empty()) bad_value("prompt", "empty array. Expected a string or token ids.");
  const json& first = (*pr)[0];
  if (first.is_number()) {
    p.prompt_ids = parse_ids(*pr, "prompt");
    p.prompt_is_ids = true;
    return;
  }
  if (pr->size() > 1) bad_value("prompt", "only one prompt per request is supported, got " + std::to_string(pr->size()) + ".");
  if (first.is_string()) {
    p.prompt = first.get<std::string>();
  } else if (first.is_array()) {
    p.prompt_ids = parse_ids(first, "prompt[0]");
    p.prompt_is_ids = true;
  } else {
    wrong_type("prompt[0]", "a string or an array of token ids", first);
  }
}

void parse_stop(const json& o, GenerationParams& p) {
  const json* s = field(o, "stop");
  if (!s) return;
  auto add = [&](const json& v, const std::string& param) {
    const std::string& t = get_string(v, param);
    if (t.empty()) bad_value(param, "empty string. Stop sequences must be at least one character.");
    p.stop.push_back(t);
  };
  if (s->is_string()) {
    add(*s, "stop");
  } else if (s->is_array()) {
    if (s->size() > kMaxStopStrings)
      throw ApiError(400, "Invalid 'stop': array too long. Expected an array with maximum length " +
                              std::to_string(kMaxStopStrings) + ", but got an array with length " +
                              std::to_string(s->size()) + " instead.",
                     "stop", "array_above_max_length");
    for (std::size_t i = 0; i < s->size(); ++i) add((*s)[i], "stop[" + std::to_string(i) + "]");
  } else {
    wrong_type("stop", "a string or an array of strings", *s);
  }
}

// No field is silently ignored. The fields a request may hold: those the server implements, and
// those of OpenAI's (or llama-server's) API it does not implement yet at their neutral value only
// (the value that changes nothing: a client library that always sends frequency_penalty 0 or
// tools [] works); anything else is a 400 naming the field, as OpenAI answers an unknown one.
enum class Endpoint { Chat, Completion, Embedding };

bool neutral(const std::string& name, const json& v) {
  if (name == "best_of") return v.is_number_integer() && v.get<i64>() == 1;
  if (name == "metadata") return v.is_object();
  if (name == "tools" || name == "functions") return v.is_array() && v.empty();
  if (name == "tool_choice" || name == "function_call") return v.is_string() && (v == "none" || v == "auto");
  if (name == "parallel_tool_calls" || name == "cache_prompt") return v.is_boolean();
  if (name == "response_format") return v.is_object() && v.size() == 1 && v.contains("type") && v["type"] == "text";
  if (name == "store") return v.is_boolean() && !v.get<bool>();
  if (name == "service_tier") return v.is_string() && (v == "auto" || v == "default");
  if (name == "modalities") return v == json::array({"text"});
  return false;
}

void check_fields(const json& o, Endpoint e) {
  static const std::vector<std::string> common = {"model", "user"};
  static const std::vector<std::string> generation = {
      "max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "stream", "stream_options", "logprobs", "n",
      "ignore_eos", "max_completion_tokens", "min_p", "frequency_penalty", "presence_penalty", "repeat_penalty",
      "repeat_last_n", "logit_bias"};
  static const std::vector<std::string> chat = {"messages", "top_logprobs", "chat_template_kwargs"};
  static const std::vector<std::string> completion = {"prompt", "echo", "suffix"};
  static const std::vector<std::string> embedding = {"input", "encoding_format"};
  // Known to the APIs, implemented here only at their neutral value (neutral()).
  static const std::vector<std::string> gen_neutral = {"cache_prompt"};
  static const std::vector<std::string> chat_neutral = {"tools", "tool_choice", "parallel_tool_calls", "functions",
                                                        "function_call", "response_format", "store", "metadata",
                                                        "service_tier", "modalities"};
  static const std::vector<std::string> completion_neutral = {"best_of"};
  auto in = [](const std::vector<std::string>& v, const std::string& k) { return std::find(v.begin(), v.end(), k) != v.end(); };
  for (const auto& [k, v] : o.items()) {
    if (v.is_null()) continue;  // not given
    if (k == "user") get_string(v, "user");  // an end user's id, which changes nothing here
    if (in(common, k)) continue;
    const bool gen = e != Endpoint::Embedding;
    if ((gen && in(generation, k)) || (e == Endpoint::Chat && in(chat, k)) || (e == Endpoint::Completion && in(completion, k)) ||
        (e == Endpoint::Embedding && in(embedding, k)))
      continue;
    const bool known = (gen && in(gen_neutral, k)) || (e == Endpoint::Chat && in(chat_neutral, k)) ||
                       (e == Endpoint::Completion && in(completion_neutral, k)) || (e == Endpoint::Embedding && k == "dimensions");
    if (known && neutral(k, v)) continue;
    if (k == "dimensions")
      throw ApiError(400, "Unsupported parameter: 'dimensions': the served embedding model's vectors have a fixed size "
                          "(it was not trained to be shortened).", k, "unsupported_parameter");
    if (known)
      throw ApiError(400, "Unsupported parameter: '" + k + "' is not supported by this server (only its neutral value, "
                              "which changes nothing), got " + show(v) + ".",
                     k, "unsupported_parameter");
    throw ApiError(400, "Unrecognized request argument supplied: " + k, k, "unsupported_parameter");
  }
}

}  // namespace

std::string error_json(const ApiError& e) {
  json err = {{"message", e.what()},
              {"type", e.type()},
              {"param", e.param().empty() ? json(nullptr) : json(e.param())},
              {"code", e.code().empty() ? json(nullptr) : json(e.code())}};
  return json{{"error", err}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

int json_depth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

bool constant_time_equal(std::string_view given, std::string_view secret) {
  // Every byte of the secret is compared, whatever `given` holds: the time depends on
  // secret.size() only.
  volatile unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (std::size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

GenerationParams parse_generation_request(std::string_view body, ApiKind kind) {
  const json o = parse_object(body);
  check_fields(o, kind == ApiKind::Chat ? Endpoint::Chat : Endpoint::Completion);
  GenerationParams p;
  p.kind = kind;
  if (const json* m = field(o, "model")) p.model = get_string(*m, "model");
  if (kind == ApiKind::Chat) {
    p.messages = parse_messages(o);
    if (const json* k = field(o, "chat_template_kwargs")) {
      if (!k->is_object()) wrong_type("chat_template_kwargs", "an object", *k);
      try {
        p.chat_template_kwargs = tokenize::parse_chat_template_kwargs(k->dump(), "chat_template_kwargs");
      } catch (const ValueError& e) {
        bad_value("chat_template_kwargs", std::string(e.what()) + ".");
      }
    }
  } else {
    parse_prompt(o, p);
    if (const json* e = field(o, "echo")) p.echo = get_bool(*e, "echo");
    if (const json* s = field(o, "suffix"); s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
      bad_value("suffix", "suffix is not supported.");
  }
  if (const json* n = field(o, "n"); n && get_int(*n, "n", 1, 128) != 1)
    bad_value("n", "only n = 1 is supported, got " + show(*n) + ".");
  constexpr i64 kMaxI = std::numeric_limits<i64>::max();
  // 0 tokens: the prompt echoed (and scored) alone.
  const i64 least = p.echo ? 0 : 1;
  if (const json* m = field(o, "max_tokens")) p.max_tokens = get_int(*m, "max_tokens", least, kMaxI);
  if (const json* m = field(o, "max_completion_tokens")) p.max_tokens = get_int(*m, "max_completion_tokens", least, kMaxI);
  if (const json* t = field(o, "temperature")) p.temperature = get_number(*t, "temperature", 0.0, 2.0);
  if (const json* t = field(o, "top_p")) p.top_p = get_number(*t, "top_p", 0.0, 1.0);
  if (const json* t = field(o, "top_k")) p.top_k = get_int(*t, "top_k", 0, kMaxI);
  if (const json* s = field(o, "seed")) {
    if (!s->is_number_integer()) wrong_type("seed", "an integer", *s);
    p.seed = s->is_number_unsigned() ? s->get<std::uint64_t>() : static_cast<std::uint64_t>(s->get<i64>());
  }
  parse_stop(o, p);
  if (const json* s = field(o, "stream")) p.stream = get_bool(*s, "stream");
  if (const json* e = field(o, "ignore_eos")) p.ignore_eos = get_bool(*e, "ignore_eos");
  if (const json* so = field(o, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (const json* u = field(*so, "include_usage")) p.include_usage = get_bool(*u, "stream_options.include_usage");
  }
  if (kind == ApiKind::Chat) {
    if (const json* l = field(o, "logprobs")) p.logprobs = get_bool(*l, "logprobs");
    if (const json* t = field(o, "top_logprobs")) {
      p.top_logprobs = get_int(*t, "top_logprobs", 0, kMaxApiTopLogprobs);
      if (!p.logprobs && p.top_logprobs > 0)
        bad_value("top_logprobs", "top_logprobs requires 'logprobs' to be true.");
    }
  } else if (const json* l = field(o, "logprobs")) {
    // Completions: logprobs is the number of alternatives (0 .. 20).
    p.top_logprobs = get_int(*l, "logprobs", 0, kMaxApiTopLogprobs);
    p.logprobs = true;
  }
  if (const json* m = field(o, "min_p")) p.min_p = get_number(*m, "min_p", 0.0, 1.0);
  if (const json* f = field(o, "frequency_penalty")) p.frequency_penalty = get_number(*f, "frequency_penalty", -2.0, 2.0);
  if (const json* f = field(o, "presence_penalty")) p.presence_penalty = get_number(*f, "presence_penalty", -2.0, 2.0);
  if (const json* r = field(o, "repeat_penalty")) {
    p.repeat_penalty = get_number(*r, "repeat_penalty", 0.0, 1e6);
    if (*p.repeat_penalty == 0) bad_value("repeat_penalty", "expected a value > 0 (1 = off), got 0.");
  }
  if (const json* r = field(o, "repeat_last_n")) p.repeat_last_n = get_int(*r, "repeat_last_n", -1, std::numeric_limits<i64>::max());
  if (const json* b = field(o, "logit_bias")) {
    if (!b->is_object()) wrong_type("logit_bias", "an object (token id -> bias)", *b);
    if (b->size() > kMaxLogitBias)
      bad_value("logit_bias", "at most " + std::to_string(kMaxLogitBias) + " tokens, got " + std::to_string(b->size()) + ".");
    for (const auto& [key, v] : b->items()) {
      i64 id = -1;
      std::size_t used = 0;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != key.size() || id < 0 || key[0] == '+' || key[0] == ' ')
        bad_value("logit_bias", "'" + key + "' is not a token id (keys are token ids as strings, such as \"15043\").");
      p.logit_bias.emplace_back(id, get_number(v, "logit_bias." + key, -100.0, 100.0));
    }
  }
  return p;
}

EmbeddingParams parse_embedding_request(std::string_view body) {
  const json o = parse_object(body);
  check_fields(o, Endpoint::Embedding);
  EmbeddingParams p;
  if (const json* m = field(o, "model")) p.model = get_string(*m, "model");
  const json* in = field(o, "input");
  if (!in) missing("input");
  auto add = [&](const json& v, const std::string& param) {
    if (v.is_array()) {  // token ids
      if (!p.input.empty()) wrong_type(param, "a string (the inputs before it are texts)", v);
      p.input_is_ids = true;
      p.input_ids.push_back(parse_ids(v, param));
      return;
    }
    if (p.input_is_ids) wrong_type(param, "an array of token ids (the inputs before it are)", v);
    const std::string& t = get_string(v, param);
    if (t.empty()) bad_value(param, "empty string. Each input must be at least one character.");
    p.input.push_back(t);
  };
  if (in->is_array()) {
    if (in->empty()) bad_value("input", "empty array. Expected at least one text.");
    if (in->size() > kMaxEmbeddingInputs)
      throw ApiError(400, "Invalid 'input': array too long. Expected an array with maximum length " +
                              std::to_string(kMaxEmbeddingInputs) + ", but got an array with length " +
                              std::to_string(in->size()) + " instead.",
                     "input", "array_above_max_length");
    if ((*in)[0].is_number()) {  // one input as token ids
      p.input_is_ids = true;
      p.input_ids.push_back(parse_ids(*in, "input"));
    } else {
      for (std::size_t i = 0; i < in->size(); ++i) add((*in)[i], "input[" + std::to_string(i) + "]");
    }
  } else {
    add(*in, "input");
  }
  if (const json* f = field(o, "encoding_format")) {
    const std::string& s = get_string(*f, "encoding_format");
    if (s == "base64") p.base64 = true;
    else if (s != "float") bad_value("encoding_format", "expected 'float' or 'base64', got " + show(*f) + ".");
  }
  return p;
}

}  // namespace qkv::serve
