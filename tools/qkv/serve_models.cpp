// Loading the models of `qkv serve` (see serve_models.h).
#include "serve_models.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/infer/embed.h"
#include "qkv/io/files.h"
#include "qkv/models/gpt2.h"
#include "qkv/tokenize/chat_template.h"

namespace qkv::tool {
namespace {

namespace fs = std::filesystem;
using i64 = std::int64_t;

std::string folder_model_type(const std::string& dir) {
  const fs::path cfg = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return "";
  try {
    const auto j = nlohmann::json::parse(io::read_file(cfg.string(), "serve"));
    if (auto it = j.find("model_type"); it != j.end() && it->is_string()) return it->get<std::string>();
  } catch (const std::exception&) {
  }
  return "";
}

std::string model_id(const std::string& path) {
  fs::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return p.filename().string();
}

serve::TextModel load_text(const std::string& path, const ServeModelOptions& o,
                           const std::shared_ptr<const tokenize::ChatTemplate>& tmpl_override) {
  auto model = models::load_gpt2(path);
  auto tok = std::make_shared<const tokenize::ByteLevelBPE>(tokenize::ByteLevelBPE::from_folder(path));
  serve::TextModel m;
  m.id = model_id(path);
  const i64 ctx = o.context ? o.context : std::min(model->max_positions(), kDefaultServeContext);
  if (ctx > model->max_positions())
    throw ValueError("--ctx " + std::to_string(ctx) + " is more than the " + std::to_string(model->max_positions()) +
                     " positions of '" + path + "'");
  m.scheduler = std::make_shared<infer::Scheduler>(
      model, infer::SchedulerOptions{.slots = o.slots, .context = ctx, .max_queue = o.max_queue, .prefill_chunk = o.prefill_chunk});
  m.tokenizer = tok;
  if (tok->eos_id()) m.eos_ids = {*tok->eos_id()};
  m.encode_prompt = [tok](const std::string& text) { return tok->encode(text); };
  if (tmpl_override) {
    m.chat_prompt = [tok, tmpl_override](const std::vector<serve::ChatTurn>& turns) {
      std::vector<tokenize::ChatMessage> msgs;
      for (const auto& t : turns) msgs.push_back({t.role, t.content, ""});
      tokenize::ChatTemplateOptions co;
      co.add_generation_prompt = true;
      if (tok->eos_id()) co.eos_token = tok->token_bytes(*tok->eos_id());
      return tok->encode(tmpl_override->render(msgs, co));
    };
  }
  return m;
}

}  // namespace

ServedModels load_served_models(const std::vector<std::string>& paths, const ServeModelOptions& o) {
  std::shared_ptr<const tokenize::ChatTemplate> tmpl;
  if (!o.chat_template_file.empty())
    tmpl = std::make_shared<const tokenize::ChatTemplate>(
        tokenize::ChatTemplate::parse(io::read_file(o.chat_template_file, "--chat-template"), o.chat_template_file));
  ServedModels out;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw IOError("serve: model '" + path + "' does not exist");
    const std::string kind = folder_model_type(path);
    std::string line;
    if (kind == "bert") {
      auto e = std::make_shared<const infer::SentenceEmbedder>(infer::SentenceEmbedder::from_folder(path));
      out.embedding.push_back({model_id(path), std::make_shared<infer::EmbedBatcher>(e)});
      line = model_id(path) + " (embeddings, " + std::to_string(e->dimension()) + " dimensions)";
    } else if (kind == "gpt2") {
      out.text.push_back(load_text(path, o, tmpl));
      const auto& s = *out.text.back().scheduler;
      line = out.text.back().id + " (text, " + std::to_string(s.options().slots) + " slots x " +
             std::to_string(s.options().context) + " positions" + (out.text.back().chat_prompt ? ", chat" : "") + ")";
    } else {
      throw FormatError("serve: '" + path + "' is not a model qkv serves (a GPT-2 or BERT folder)" +
                        (kind.empty() ? std::string() : ", its model_type is '" + kind + "'"));
    }
    out.summary += (out.summary.empty() ? "" : ", ") + line;
  }
  return out;
}

}  // namespace qkv::tool
