// qkv embed: sentence embeddings of a sentence-transformers BERT folder (all-MiniLM-L6-v2),
// printed, as JSON lines, as a cosine-similarity matrix, or written as a search index.
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cmd_embed.h"
#include "command.h"
#include "embed_index.h"
#include "model_dir.h"
#include "format.h"
#include "output.h"
#include "progress.h"
#include "qkv/core/error.h"
#include "qkv/infer/embed.h"

namespace qkv::tool {
namespace {

void print_similarity(const std::vector<std::string>& texts, const Tensor& emb, bool json, std::ostream& out) {
  const Tensor s = infer::cosine_similarity_matrix(emb, emb);
  const std::int64_t n = s.size(0);
  const double* p = s.data<double>();
  if (json) {
    nlohmann::json rows = nlohmann::json::array();
    for (std::int64_t i = 0; i < n; ++i) {
      nlohmann::json r = nlohmann::json::array();
      for (std::int64_t j = 0; j < n; ++j) r.push_back(p[i * n + j]);
      rows.push_back(r);
    }
    out << nlohmann::ordered_json{{"texts", texts}, {"similarity", rows}}.dump() << '\n';
    return;
  }
  std::vector<std::string> headers{""};
  for (std::int64_t j = 0; j < n; ++j) headers.push_back("[" + std::to_string(j) + "]");
  Table t(headers);
  for (std::int64_t i = 0; i < n; ++i) {
    std::vector<std::string> row{"[" + std::to_string(i) + "]"};
    for (std::int64_t j = 0; j < n; ++j) row.push_back(fixed(p[i * n + j], 3));
    t.add_row(row);
  }
  out << "cosine similarity:\n";
  t.print(out);
  for (std::int64_t i = 0; i < n; ++i) out << "  [" << i << "] " << texts[static_cast<std::size_t>(i)] << '\n';
}

}  // namespace

// Runs qkv embed (see the command's --help).
int run_embed(const EmbedCmdOptions& o, std::ostream& out) {
  if (o.file.empty() == o.texts.empty())
    throw ValueError("embed: give either --file FILE or TEXT arguments (not both, not neither)");
  if (!o.file.empty()) check_input_file(o.file, "embed: --file");
  if (o.similarity && !o.out.empty())
    throw ValueError("embed: --similarity prints the similarity matrix and --out writes a search index; give one of them");
  require_model_role(o.model, models::ModelRole::Encoder, "embed");
  if (!o.out.empty())
    check_output_file(o.out, {.cmd = "embed", .overwrite = o.overwrite});
  std::vector<std::string> texts = o.file.empty() ? o.texts : infer::read_text_lines(o.file);
  // A search corpus: blank lines are not documents. The index keeps each text's line number.
  std::vector<std::int64_t> lines;
  std::int64_t blank = 0;
  if (!o.out.empty()) {
    std::vector<std::string> kept;
    for (std::size_t i = 0; i < texts.size(); ++i) {
      if (texts[i].find_first_not_of(" \t\r\f\v") == std::string::npos) {
        ++blank;
        continue;
      }
      kept.push_back(std::move(texts[i]));
      lines.push_back(static_cast<std::int64_t>(i) + 1);
    }
    texts = std::move(kept);
    if (texts.empty())
      throw ValueError("embed: " + (o.file.empty() ? std::string("the texts are") : o.file + " is") +
                       " blank; a search index needs at least one line of text");
  }
  const infer::SentenceEmbedder e = infer::SentenceEmbedder::from_folder(o.model);
  infer::EmbedOptions eo{.batch_size = o.batch};
  std::unique_ptr<ProgressBar> bar;
  if (o.progress && static_cast<std::int64_t>(texts.size()) > 4 * o.batch) {
    bar = std::make_unique<ProgressBar>("embed", static_cast<std::int64_t>(texts.size()));
    eo.progress = [&](std::int64_t done, std::int64_t) { bar->update(done); };
  }
  Tensor emb;
  try {
    emb = e.embed(texts, eo);
  } catch (const ValueError& err) {
    // "text 3: ..." -> name the line of the file.
    throw ValueError(std::string("embed: ") + (o.file.empty() ? "" : o.file + ": ") + err.what());
  }
  if (!o.out.empty()) {
    save_index(o.out, {.embeddings = emb, .texts = texts, .model = o.model, .lines = lines});
    if (bar) bar->finish();
    if (!o.json)
      out << "wrote " << texts.size() << " embeddings [" << emb.size(0) << ", " << emb.size(1) << "] to " << o.out
          << (blank ? " (" + std::to_string(blank) + " blank line" + (blank == 1 ? "" : "s") + " skipped)" : "") << '\n';
    else
      out << nlohmann::ordered_json{{"index", o.out}, {"count", texts.size()}, {"dimension", emb.size(1)}, {"blank_lines_skipped", blank}}.dump()
          << '\n';
    return 0;
  }
  if (bar) bar->finish();
  if (o.similarity) {
    print_similarity(texts, emb, o.json, out);
    return 0;
  }
  const std::int64_t C = emb.size(1);
  const float* p = emb.data<float>();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    if (o.json) {
      nlohmann::ordered_json j;
      j["text"] = texts[i];
      j["embedding"] = std::vector<float>(p + static_cast<std::int64_t>(i) * C, p + static_cast<std::int64_t>(i + 1) * C);
      out << j.dump() << '\n';
    } else {
      out << "[" << i << "] " << texts[i] << "\n    " << first_values(emb.select(0, static_cast<std::int64_t>(i)), 8)
          << "  (dim " << C << ")\n";
    }
  }
  return 0;
}
QKV_TOOL_COMMAND(embed, {
    .name = "embed",
    .summary = "Sentence embeddings of a BERT sentence-transformers model (all-MiniLM-L6-v2), similarity, search index",
    .order = 20,
    .group = "Embed and search",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Embeds each TEXT (or each line of --file, empty lines included; an index (--out) skips blank lines and "
          "keeps each text's line number) with the model folder --model "
          "(a sentence-transformers folder: config.json, model.safetensors, vocab.txt, tokenizer_config.json, "
          "modules.json, 1_Pooling/config.json; `make models` fetches models/all-MiniLM-L6-v2). The embeddings "
          "equal sentence-transformers' (mean pooling over the attention mask, L2 normalisation). "
          "--json prints one JSON object per input, in input order: {\"text\": ..., \"embedding\": [...]}. "
          "--similarity prints the cosine-similarity matrix instead. --out FILE writes a search index "
          "(safetensors: the embeddings and their texts) for 'qkv search'. Examples:\n"
          "  qkv embed --model models/all-MiniLM-L6-v2 \"A man is eating food.\" \"A man rides a horse.\"\n"
          "  qkv embed --model models/all-MiniLM-L6-v2 --file corpus.txt --out index.safetensors");
      auto opt = std::make_shared<EmbedCmdOptions>();
      add_model_option(sub, opt->model, "BERT / sentence-transformers model folder")->required();
      sub.add_option("--file", opt->file, "Embed each line of this UTF-8 file")->check(input_file("a text file"))->type_name("FILE");
      sub.add_option("--batch", opt->batch, "Sentences per forward pass (default 32)")->check(int_range(1, 4096));
      sub.add_flag("--json", opt->json, "One JSON object per input line");
      sub.add_flag("--similarity", opt->similarity, "Print the cosine-similarity matrix of the inputs");
      sub.add_option("--out", opt->out, "Write a search index (safetensors) for 'qkv search'")->type_name("FILE");
      add_overwrite_flag(sub, opt->overwrite, "the --out file");
      add_no_progress_flag(sub, opt->progress);
      sub.add_option("texts", opt->texts, "Texts to embed (instead of --file)");
      return [opt] { return run_embed(*opt, std::cout); };
    }});

}  // namespace qkv::tool
