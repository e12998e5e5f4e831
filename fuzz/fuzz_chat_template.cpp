// libFuzzer target: chat templates (Jinja2 subset). The input is an archive (fuzz_util.h) of
// `template` (the Jinja text), optionally `messages.json` (OpenAI-style messages) and `vars.json`
// (a JSON object of extra variables); an input that is no archive is the template alone, rendered
// over a small conversation. Parsing and rendering may only fail with a qkv::Error (a
// ChatTemplateError for the template); a rendered text stays within the output limit, and the
// same render twice gives the same text (templates that read the clock excepted). Limits are
// tight so every input runs in milliseconds.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "qkv/core/error.h"
#include "qkv/tokenize/chat_template.h"

using namespace qkv;
using tokenize::ChatMessage;
using tokenize::ChatTemplate;
using tokenize::ChatTemplateOptions;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::string text(in), messages_json, vars_json;
  if (in.rfind("--- ", 0) == 0) {
    auto files = fuzz::parse_archive(in);
    text = files["template"];
    messages_json = files["messages.json"];
    vars_json = files["vars.json"];
  }
  std::vector<ChatMessage> messages = {{"system", "Be brief.", ""},
                                       {"user", "Hi \"you\"\n", ""},
                                       {"assistant", " Hello! ", "{\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"a\": 1}}}]}"},
                                       {"user", "Why? é 🚀", ""}};
  if (!messages_json.empty()) {
    try {
      messages = tokenize::parse_chat_messages_json(messages_json, "messages.json");
    } catch (const Error& e) {
      fuzz::note_refusal("messages", e);
    }
  }
  ChatTemplateOptions o;
  o.add_generation_prompt = size % 2 == 1;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.limits.max_output_bytes = 1 << 20;
  o.limits.max_work = 1 << 24;
  o.limits.max_loop_iterations = 1 << 16;
  o.limits.max_call_depth = 32;
  if (!vars_json.empty()) {
    try {
      const auto vars = nlohmann::ordered_json::parse(vars_json);
      if (vars.is_object())
        for (const auto& [k, v] : vars.items()) o.extra_vars_json[k] = v.dump();
    } catch (const nlohmann::json::exception&) {
    }
  }
  try {
    const ChatTemplate t = ChatTemplate::parse(text, "fuzz");
    std::string first;
    try {
      first = t.render(messages, o);
    } catch (const Error& e) {
      fuzz::note_refusal("render", e);
      return 0;
    }
    QKV_FUZZ_CHECK(first.size() <= o.limits.max_output_bytes);
    if (text.find("strftime_now") == std::string::npos) QKV_FUZZ_CHECK(t.render(messages, o) == first);
  } catch (const Error& e) {
    fuzz::note_refusal("parse", e);
  }
  return 0;
}
