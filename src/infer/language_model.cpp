// load_language_model and the prompt helpers (see language_model.h).
#include "qkv/infer/language_model.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/llama.h"
#include "qkv/tokenize/gguf_vocab.h"

namespace qkv::infer {
namespace {

using i64 = std::int64_t;
namespace fs = std::filesystem;

std::string folder_model_type(const std::string& dir) {
  const fs::path cfg = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return "";
  try {
    const auto j = nlohmann::json::parse(io::read_file(cfg.string(), "model_kind"));
    if (auto it = j.find("model_type"); it != j.end() && it->is_string()) return it->get<std::string>();
  } catch (const std::exception&) {
  }
  return "";
}

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

std::optional<tokenize::ByteLevelBPE> load_model_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    const io::GGUFFile f = io::GGUFFile::open_header(path);
    if (!f.find_value("tokenizer.ggml.model")) return std::nullopt;
    return tokenize::bpe_from_gguf(f);
  }
  const bool has_tok = fs::exists(fs::path(path) / "tokenizer.json", ec) ||
                       (fs::exists(fs::path(path) / "vocab.json", ec) && fs::exists(fs::path(path) / "merges.txt", ec));
  if (!has_tok) return std::nullopt;
  return tokenize::ByteLevelBPE::from_folder(path);
}

std::string model_kind(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    try {
      if (!io::is_gguf_file(path)) return "";
      const io::GGUFFile f = io::GGUFFile::open_header(path);
      if (auto a = f.find_string("general.architecture")) return std::string(*a);
    } catch (const Error&) {
    }
    return "";
  }
  return folder_model_type(path);
}

LanguageModel load_language_model(const std::string& path, const LanguageModelOptions& o) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IOError("'" + path + "' does not exist");
  LanguageModel lm;
  lm.path = path;
  lm.name = base_name(path);
  const bool file = fs::is_regular_file(path, ec);
  if (file) {
    if (!io::is_gguf_file(path))
      throw FormatError(path + " is not a GGUF file (a model is a .gguf file or a Hugging Face folder)");
    auto f = std::make_shared<const io::GGUFFile>(io::GGUFFile::open(path));
    lm.architecture = std::string(f->get_string("general.architecture"));
    if (lm.architecture != "llama" && lm.architecture != "mistral" && lm.architecture != "qwen2")
      throw FormatError(path + ": GGUF architecture '" + lm.architecture +
                        "' is not one qkv generates with (llama, mistral, qwen2)");
    auto m = models::load_llama_gguf(f);
    m->set_activations(o.activations);
    lm.weight_bytes = m->weight_bytes();
    for (i64 e : m->config().eos_token_ids) add_eos(lm.eos_ids, e);
    lm.bos_id = m->config().bos_token_id;
    m->set_kv_type(o.kv_cache);
    lm.model = m;
    if (f->find_value("tokenizer.ggml.model")) {
      lm.tokenizer = tokenize::bpe_from_gguf(*f);
      if (auto t = f->find_string("tokenizer.chat_template")) {
        try {
          lm.chat_template = std::make_shared<const tokenize::ChatTemplate>(
              tokenize::ChatTemplate::parse(std::string(*t), path + " chat template"));
        } catch (const tokenize::ChatTemplateError& e) {
          lm.chat_template_error = e.what();
        }
      }
    }
  } else {
    const std::string kind = folder_model_type(path);
    lm.architecture = kind;
    if (kind == "gpt2") {
      auto m = models::load_gpt2(path);
      lm.weight_bytes = m->num_parameters() * 4;
      add_eos(lm.eos_ids, m->config().eos_token_id);
      lm.bos_id = m->config().bos_token_id;
      m->set_kv_type(o.kv_cache);
      lm.model = m;
    } else if (kind == "llama" || kind == "mistral" || kind == "qwen2") {
      auto m = models::load_llama(path);
      m->set_activations(o.activations);
      lm.weight_bytes = m->weight_bytes();
      for (i64 e : m->config().eos_token_ids) add_eos(lm.eos_ids, e);
      lm.bos_id = m->config().bos_token_id;
      m->set_kv_type(o.kv_cache);
      lm.model = m;
    } else if (kind == "bert") {
      throw FormatError(path + " is a BERT folder; generation needs a causal language model (GPT-2, Llama, Mistral, "
                               "Qwen2)");
    } else if (kind.empty() && fs::exists(fs::path(path) / "config.json", ec)) {
      // A config.json without model_type (or one that does not parse): GPT-2's reader names
      // what is wrong with it, or loads a GPT-2 folder written without the field.
      auto m = models::load_gpt2(path);
      lm.architecture = "gpt2";
      lm.weight_bytes = m->num_parameters() * 4;
      add_eos(lm.eos_ids, m->config().eos_token_id);
      lm.bos_id = m->config().bos_token_id;
      m->set_kv_type(o.kv_cache);
      lm.model = m;
    } else if (kind.empty()) {
      throw FormatError(path + " is not a model folder qkv reads (no config.json with a model_type)");
    } else {
      throw FormatError(path + ": model_type \"" + kind +
                        "\" is not one qkv generates with (gpt2, llama, mistral, qwen2)");
    }
    lm.tokenizer = load_model_tokenizer(path);
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

bool LanguageModel::is_eos(i64 id) const { return std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end(); }

const tokenize::ByteLevelBPE& LanguageModel::tok() const {
  if (!tokenizer)
    throw ValueError(path + " has no tokenizer (tokenizer.json, or vocab.json and merges.txt); give token ids instead");
  return *tokenizer;
}

std::vector<i64> LanguageModel::encode_prompt(const std::string& text) const {
  std::vector<i64> ids;
  if (add_bos) ids.push_back(*bos_id);
  const std::vector<i64> t = tok().encode(text);
  ids.insert(ids.end(), t.begin(), t.end());
  return ids;
}

std::string LanguageModel::render_chat(const std::vector<tokenize::ChatMessage>& messages,
                                       bool add_generation_prompt) const {
  if (!chat_template) {
    if (!chat_template_error.empty())
      throw ValueError(chat_template_error + " (pass another template with --chat-template FILE)");
    throw ValueError(path + " has no chat template; pass one with --chat-template FILE");
  }
  tokenize::ChatTemplateOptions opt;
  opt.add_generation_prompt = add_generation_prompt;
  if (tokenizer) {
    if (auto b = tokenizer->bos_id()) opt.bos_token = tokenizer->token_bytes(*b);
    if (auto e = tokenizer->eos_id()) opt.eos_token = tokenizer->token_bytes(*e);
  }
  return chat_template->render(messages, opt);
}

std::vector<i64> LanguageModel::chat_prompt(const std::vector<tokenize::ChatMessage>& messages,
                                            bool add_generation_prompt) const {
  return tok().encode(render_chat(messages, add_generation_prompt));
}

}  // namespace qkv::infer
