// Chat templates against transformers (tests/reference/make_chat_template_fixtures.py): six real
// templates (SmolLM2 from its GGUF, Qwen2.5, Llama 3, Llama 3.2, Mistral v0.2, Gemma 2) over
// several conversations, and one small template per Jinja construct, rendered byte for byte as
// transformers' apply_chat_template renders them; the templates' raise_exception messages
// exactly; and jinja2's other errors as errors.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "qkv/tokenize/chat_template.h"

namespace {

using json = nlohmann::ordered_json;
using qkv::tokenize::ChatMessage;
using qkv::tokenize::ChatTemplate;
using qkv::tokenize::ChatTemplateError;
using qkv::tokenize::ChatTemplateOptions;

std::string fixture_dir() { return std::string(QKV_FIXTURE_DIR) + "/chat_templates/"; }

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const json& cases() {
  static const json doc = json::parse(read_file(fixture_dir() + "cases.json"));
  return doc;
}

// Renders a case; "output" or the error it gives ("!raised: <detail>" / "!error: <what>").
std::string run(const std::string& text, const json& messages, bool add_generation_prompt, const json& bos,
                const json& eos, const json& vars) {
  try {
    const ChatTemplate t = ChatTemplate::parse(text);
    ChatTemplateOptions o;
    o.add_generation_prompt = add_generation_prompt;
    if (bos.is_string()) o.bos_token = bos.get<std::string>();
    if (eos.is_string()) o.eos_token = eos.get<std::string>();
    for (const auto& [k, v] : vars.items()) o.extra_vars_json[k] = v.dump();
    const std::vector<ChatMessage> msgs = qkv::tokenize::parse_chat_messages_json(messages.dump(), "fixture");
    return t.render(msgs, o);
  } catch (const ChatTemplateError& e) {
    return (e.raised_by_template() ? "!raised: " : "!error: ") + std::string(e.detail());
  }
}

void check(const json& c, const std::string& got) {
  if (c.contains("output")) {
    EXPECT_EQ(got, c["output"].get<std::string>());
  } else if (c["raised"].get<bool>()) {
    EXPECT_EQ(got, "!raised: " + c["error"].get<std::string>());
  } else {
    EXPECT_EQ(got.rfind("!error: ", 0), 0u) << "transformers fails with " << c["error"] << "; qkv renders " << got;
  }
}

TEST(ChatTemplateFixtures, RealTemplatesRenderLikeTransformers) {
  const json& doc = cases();
  std::map<std::string, std::string> texts;
  for (const auto& [name, t] : doc["templates"].items()) texts[name] = read_file(fixture_dir() + t["file"].get<std::string>());
  int n = 0, errors = 0;
  for (const json& c : doc["renders"]) {
    const std::string name = c["template"];
    const json& t = doc["templates"][name];
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>() +
                 (c["add_generation_prompt"].get<bool>() ? " / add_generation_prompt" : ""));
    check(c, run(texts[name], c["messages"], c["add_generation_prompt"], t["bos_token"], t["eos_token"],
                 c["extra_vars"]));
    ++n;
    errors += c.contains("error");
  }
  EXPECT_GE(n, 160);
  EXPECT_GE(errors, 12);  // Mistral's and the Gemmas' raise_exception checks among them
  // SmolLM2, Qwen2.5, Qwen3, Qwen3.5, Llama 3, 3.1, 3.2, Mistral, Gemma 2, 3, Phi-3.5, Phi-4-mini, SmolLM3.
  EXPECT_EQ(texts.size(), 13u);
}

TEST(ChatTemplateFixtures, EachConstructRendersLikeJinja2) {
  const json& doc = cases();
  int n = 0;
  for (const json& c : doc["constructs"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    check(c, run(c["template"], doc["construct_messages"], false, nullptr, nullptr, c["vars"]));
    ++n;
  }
  EXPECT_GE(n, 100);
}

// The SmolLM2 template of the fixtures is the one in the model file the demo uses.
TEST(ChatTemplateFixtures, SmolLM2TemplateIsTheModelsOwn) {
  const std::string text = read_file(fixture_dir() + "smollm2.jinja");
  EXPECT_NE(text.find("You are a helpful AI assistant named SmolLM, trained by Hugging Face"), std::string::npos);
  const ChatTemplate t = ChatTemplate::parse(text, "SmolLM2");
  ChatTemplateOptions o;
  o.add_generation_prompt = true;
  EXPECT_EQ(t.render({{"user", "Hi", ""}}, o),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
