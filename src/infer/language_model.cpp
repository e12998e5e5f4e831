// load_language_model and the prompt helpers (see language_model.h).
#include "qkv/infer/language_model.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"
#include "qkv/models/registry.h"

namespace qkv::infer {
namespace {

using i64 = std::int64_t;
namespace fs = std::filesystem;

// A folder's chat template as a parsed template (null when it has none).
std::shared_ptr<const tokenize::ChatTemplate> folder_chat_template(const std::string& dir) {
  const std::optional<ChatTemplateSource> t = folder_chat_template_source(dir);
  if (!t) return nullptr;
  return std::make_shared<const tokenize::ChatTemplate>(tokenize::ChatTemplate::parse(t->text, t->name));
}

void add_eos(std::vector<i64>& eos, std::optional<i64> id) {
  if (id && std::find(eos.begin(), eos.end(), *id) == eos.end()) eos.push_back(*id);
}

std::string base_name(const std::string& path) {
  fs::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p.filename().string();
}

}  // namespace

std::optional<ChatTemplateSource> folder_chat_template_source(const std::string& dir) {
  std::error_code ec;
  const fs::path tc = fs::path(dir) / "tokenizer_config.json";
  if (fs::is_regular_file(tc, ec)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(io::read_file(tc.string(), "load_language_model"));
    } catch (const nlohmann::json::exception& e) {
      throw FormatError(tc.string() + ": not valid JSON: " + e.what());
    }
    if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
      const std::string name = tc.string() + " chat_template";
      if (it->is_string()) return ChatTemplateSource{it->get<std::string>(), name};
      if (it->is_array())
        for (const auto& e : *it)
          if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
            return ChatTemplateSource{e["template"].get<std::string>(), name};
      throw FormatError(tc.string() + ": chat_template must be a string or a list with a \"default\" template");
    }
  }
  const fs::path jinja = fs::path(dir) / "chat_template.jinja";
  if (fs::is_regular_file(jinja, ec))
    return ChatTemplateSource{io::read_file(jinja.string(), "load_language_model"), jinja.string()};
  return std::nullopt;
}

std::string model_kind(const std::string& path) { return models::model_kind(path).declared; }

SamplingOptions llama_cpp_default_sampling() { return {.temperature = 0.8, .top_k = 40, .top_p = 0.95, .min_p = 0.05}; }

namespace {

// The model's sampling advice over llama.cpp's defaults: a folder's generation_config.json, a
// GGUF's general.sampling.* (what llama.cpp's converter writes from it). FormatError naming the
// file and the field for a value qkv's sampler refuses.
void read_default_sampling(const std::string& path, bool file, LanguageModel& lm) {
  SamplingOptions s = llama_cpp_default_sampling();
  std::string from;
  auto checked = [&](const std::string& where) {
    try {
      check_sampling(s);
    } catch (const ValueError& e) {
      throw FormatError(where + ": " + e.what());
    }
  };
  if (file) {
    auto f = io::GGUFFile::open_header(path);
    bool any = false;
    auto num = [&](const char* key) -> std::optional<double> {
      if (!f.find_value(key)) return std::nullopt;
      any = true;
      try {
        return f.find_float(key);  // f32 / f64 (llama.cpp writes them so)
      } catch (const FormatError&) {
        return static_cast<double>(*f.find_int(key));  // an integer type (top_k, penalty_last_n); else its error
      }
    };
    if (auto v = num("general.sampling.temp")) s.temperature = *v;
    if (auto v = num("general.sampling.top_k")) s.top_k = static_cast<i64>(*v);
    if (auto v = num("general.sampling.top_p")) s.top_p = *v;
    if (auto v = num("general.sampling.min_p")) s.min_p = *v;
    if (auto v = num("general.sampling.penalty_repeat")) s.repeat_penalty = *v;
    if (auto v = num("general.sampling.penalty_last_n")) s.repeat_last_n = static_cast<i64>(*v);
    if (any) {
      from = "the file's general.sampling";
      checked(path + " general.sampling");
    }
  } else {
    const fs::path gc = fs::path(path) / "generation_config.json";
    std::error_code ec;
    if (fs::is_regular_file(gc, ec)) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(io::read_file(gc.string(), "load_language_model"));
      } catch (const nlohmann::json::exception& e) {
        throw FormatError(gc.string() + ": not valid JSON (" + e.what() + ")");
      }
      bool any = false;
      auto num = [&](const char* key) -> std::optional<double> {
        const auto it = j.is_object() ? j.find(key) : j.end();
        if (!j.is_object() || it == j.end() || it->is_null()) return std::nullopt;
        if (!it->is_number()) throw FormatError(gc.string() + ": " + key + " is not a number");
        any = true;
        return it->get<double>();
      };
      if (auto v = num("temperature")) s.temperature = *v;
      if (auto v = num("top_k")) s.top_k = static_cast<i64>(*v);
      if (auto v = num("top_p")) s.top_p = *v;
      if (auto v = num("min_p")) s.min_p = *v;
      if (auto v = num("repetition_penalty")) s.repeat_penalty = *v;
      if (j.is_object() && j.contains("do_sample") && j["do_sample"].is_boolean()) {
        any = true;
        if (!j["do_sample"].get<bool>()) s.temperature = 0;  // the model asks for greedy decoding
      }
      if (any) {
        from = "generation_config.json";
        checked(gc.string());
      }
    }
  }
  lm.default_sampling = s;
  lm.default_sampling_source = from.empty() ? "llama.cpp's defaults" : from + " over llama.cpp's defaults";
}

}  // namespace

LanguageModel load_language_model(const std::string& path, const LanguageModelOptions& o) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IOError("'" + path + "' does not exist");
  LanguageModel lm;
  lm.path = path;
  lm.name = base_name(path);
  const bool file = fs::is_regular_file(path, ec);
  const models::LoadedCausalLM loaded =
      models::load_causal_lm(path, {.activations = o.activations, .kv_cache = o.kv_cache});
  lm.architecture = loaded.architecture;
  lm.model = loaded.model;
  lm.weight_bytes = loaded.weight_bytes;
  lm.q8_activations = loaded.q8_activations;
  for (i64 e : loaded.eos_ids) add_eos(lm.eos_ids, e);
  lm.bos_id = loaded.bos_id;
  lm.tokenizer = tokenize::find_tokenizer(path);
  read_default_sampling(path, file, lm);
  if (file) {
    auto f = io::GGUFFile::open_header(path);
    if (f.find_value("tokenizer.ggml.model")) {
      if (auto t = f.find_string("tokenizer.chat_template")) {
        try {
          lm.chat_template = std::make_shared<const tokenize::ChatTemplate>(
              tokenize::ChatTemplate::parse(std::string(*t), path + " chat template"));
        } catch (const tokenize::ChatTemplateError& e) {
          lm.chat_template_error = e.what();
        }
      }
    }
  } else {
    try {
      lm.chat_template = folder_chat_template(path);
    } catch (const tokenize::ChatTemplateError& e) {
      lm.chat_template_error = e.what();
    }
  }
  if (lm.tokenizer) {
    add_eos(lm.eos_ids, lm.tokenizer->eos_id());
    if (!lm.bos_id) lm.bos_id = lm.tokenizer->bos_id();
    lm.add_bos = lm.tokenizer->add_bos() && lm.bos_id.has_value();
  }
  if (!o.chat_template_text.empty()) {
    lm.chat_template_error.clear();
    lm.chat_template =
        std::make_shared<const tokenize::ChatTemplate>(tokenize::ChatTemplate::parse(o.chat_template_text));
  } else if (!o.chat_template_file.empty()) {
    lm.chat_template_error.clear();
    lm.chat_template = std::make_shared<const tokenize::ChatTemplate>(tokenize::ChatTemplate::parse(
        io::read_file(o.chat_template_file, "--chat-template"), o.chat_template_file));
  }
  return lm;
}

std::optional<i64> LanguageModel::eos_id() const {
  if (eos_ids.empty()) return std::nullopt;
  return eos_ids.front();
}

std::vector<i64> LanguageModel::chat_prompt_within(std::vector<tokenize::ChatMessage>& messages, i64 context, i64 room,
                                                   std::size_t* dropped, const std::map<std::string, std::string>& vars) const {
  if (context < 1 || room < 0) throw ValueError("chat_prompt_within: context must be >= 1 and room >= 0");
  const std::size_t first =
      !messages.empty() && (messages[0].role == "system" || messages[0].role == "developer") ? 1 : 0;
  std::size_t gone = 0;
  for (;;) {
    std::vector<i64> ids = chat_prompt(messages, true, vars);
    if (static_cast<i64>(ids.size()) + room <= context) {
      if (dropped) *dropped = gone;
      return ids;
    }
    if (messages.size() - first <= 1) {
      if (dropped) *dropped = gone;
      throw ValueError("the message has " + std::to_string(ids.size()) + " tokens with the conversation's template" +
                       (first ? " and system message" : "") + ", more than the context of " + std::to_string(context) +
                       " leaves (" + std::to_string(room) + " kept for the reply)");
    }
    // The oldest turn: its first message and what follows it up to the next user message.
    messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
    ++gone;
    while (messages.size() - first > 1 && messages[first].role != "user") {
      messages.erase(messages.begin() + static_cast<std::ptrdiff_t>(first));
      ++gone;
    }
  }
}

bool LanguageModel::is_eos(i64 id) const { return std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end(); }

const tokenize::Tokenizer& LanguageModel::tok() const {
  if (!tokenizer)
    throw ValueError(path + " has no tokenizer (tokenizer.json, tokenizer.model, or vocab.json and merges.txt); give token "
                            "ids instead");
  return *tokenizer;
}

std::vector<i64> LanguageModel::encode_prompt(const std::string& text) const {
  std::vector<i64> ids;
  if (add_bos) ids.push_back(*bos_id);
  const std::vector<i64> t = tok().encode(text);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

std::string LanguageModel::render_chat(const std::vector<tokenize::ChatMessage>& messages, bool add_generation_prompt,
                                       const std::map<std::string, std::string>& vars) const {
  if (!chat_template) {
    if (!chat_template_error.empty())
      throw ValueError(chat_template_error + " (pass another template with --chat-template FILE)");
    throw ValueError(path + " has no chat template; pass one with --chat-template FILE");
  }
  tokenize::ChatTemplateOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  opt.extra_vars_json = vars;
  if (tokenizer) {
    if (auto b = tokenizer->bos_id()) opt.bos_token = tokenizer->token_string(*b);
    if (auto e = tokenizer->eos_id()) opt.eos_token = tokenizer->token_string(*e);
  }
  return chat_template->render(messages, opt);
}

std::vector<i64> LanguageModel::chat_prompt(const std::vector<tokenize::ChatMessage>& messages,
                                            bool add_generation_prompt,
                                            const std::map<std::string, std::string>& vars) const {
  return tok().encode(render_chat(messages, add_generation_prompt, vars));
}

}  // namespace qkv::infer
