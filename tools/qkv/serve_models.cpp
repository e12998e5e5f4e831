// Loading the models of `qkv serve` (see serve_models.h).
#include "serve_models.h"

#include <algorithm>
#include <filesystem>
#include <memory>

#include "qkv/core/error.h"
#include "qkv/infer/embed.h"
#include "qkv/infer/language_model.h"

namespace qkv::tool {
namespace {

namespace fs = std::filesystem;
using i64 = std::int64_t;

serve::TextModel load_text(const std::string& path, const ServeModelOptions& o) {
  auto lm = std::make_shared<const infer::LanguageModel>(
      infer::load_language_model(path, {.chat_template_file = o.chat_template_file, .activations = o.activations, .kv_cache = o.kv_cache}));
  const i64 P = lm->model->max_positions();
  const i64 ctx = o.context ? o.context : std::min(P, kDefaultServeContext);
  if (ctx > P)
    throw ValueError("--ctx " + std::to_string(ctx) + " is more than the " + std::to_string(P) + " positions of '" + path +
                     "'");
  return serve::make_text_model(
      std::move(lm), {.slots = o.slots, .context = ctx, .max_queue = o.max_queue, .prefill_chunk = o.prefill_chunk});
}

}  // namespace

ServedModels load_served_models(const std::vector<std::string>& paths, const ServeModelOptions& o) {
  ServedModels out;
  for (const std::string& path : paths) {
    std::error_code ec;
    if (!fs::exists(path, ec)) throw IOError("serve: model '" + path + "' does not exist");
    std::string line;
    if (infer::model_kind(path) == "bert") {
      auto e = std::make_shared<const infer::SentenceEmbedder>(infer::SentenceEmbedder::from_folder(path));
      std::string id = fs::path(path).lexically_normal().filename().string();
      if (id.empty()) id = fs::path(path).lexically_normal().parent_path().filename().string();  // "dir/"
      line = id + " (embeddings, " + std::to_string(e->dimension()) + " dimensions)";
      out.embedding.push_back({id, std::make_shared<infer::EmbedBatcher>(e)});
    } else {
      out.text.push_back(load_text(path, o));
      const serve::TextModel& m = out.text.back();
      const auto& s = m.scheduler->options();
      line = m.id + " (" + m.lm->architecture + ", " + std::to_string(s.slots) + " slots x " + std::to_string(s.context) +
             " positions" + (m.lm->chat_template ? ", chat" : "") + ")";
    }
    out.summary += (out.summary.empty() ? "" : ", ") + line;
  }
  for (const std::string& a : o.aliases) {
    std::vector<std::string>* to = nullptr;
    std::string name = a;
    auto find = [&](const std::string& id) -> std::vector<std::string>* {
      for (auto& m : out.text)
        if (m.id == id) return &m.aliases;
      for (auto& m : out.embedding)
        if (m.id == id) return &m.aliases;
      return nullptr;
    };
    if (const auto eq = a.find('='); eq != std::string::npos && find(a.substr(eq + 1))) {
      name = a.substr(0, eq);
      to = find(a.substr(eq + 1));
    } else if (out.text.size() + out.embedding.size() == 1) {
      to = out.text.empty() ? &out.embedding[0].aliases : &out.text[0].aliases;
    } else {
      std::string ids;
      for (const auto& m : out.text) ids += (ids.empty() ? "" : ", ") + m.id;
      for (const auto& m : out.embedding) ids += (ids.empty() ? "" : ", ") + m.id;
      throw ValueError("--model-alias '" + a + "': with several models give NAME=ID, ID one of " + ids);
    }
    if (name.empty()) throw ValueError("--model-alias '" + a + "': the name is empty");
    to->push_back(name);
    out.summary += ", alias " + name;
  }
  return out;
}

}  // namespace qkv::tool
