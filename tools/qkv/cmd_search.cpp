// qkv search: semantic search over an index written by `qkv embed --out`.
#include <algorithm>
#include <iostream>
#include <memory>
#include <numeric>

#include <nlohmann/json.hpp>

#include "cmd_search.h"
#include "command.h"
#include "embed_index.h"
#include "model_dir.h"
#include "format.h"
#include "qkv/core/error.h"
#include "qkv/infer/embed.h"

namespace qkv::tool {
// Runs qkv search (see the command's --help).
int run_search(const SearchOptions& o, std::ostream& out) {
  require_model_role(o.model, models::ModelRole::Encoder, "search");
  const EmbeddingIndex ix = load_index(o.index);
  const infer::SentenceEmbedder e = infer::SentenceEmbedder::from_folder(o.model);
  if (ix.embeddings.size(1) != e.dimension())
    throw ValueError("search: " + o.index + " holds " + std::to_string(ix.embeddings.size(1)) +
                     "-dimensional embeddings but the model --model " + o.model + " makes " +
                     std::to_string(e.dimension()) + "-dimensional ones");
  Tensor q;
  try {
    q = e.embed(o.queries);
  } catch (const ValueError& err) {
    throw ValueError(std::string("search: query ") + err.what());
  }
  const Tensor scores = infer::cosine_similarity_matrix(q, ix.embeddings);  // [Q, N]
  const std::int64_t N = scores.size(1), k = std::min<std::int64_t>(o.top_k, N);
  const double* s = scores.data<double>();
  for (std::size_t qi = 0; qi < o.queries.size(); ++qi) {
    const double* row = s + static_cast<std::int64_t>(qi) * N;
    std::vector<std::int64_t> order(static_cast<std::size_t>(N));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](std::int64_t a, std::int64_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
    if (o.json) {
      nlohmann::ordered_json res = nlohmann::ordered_json::array();
      for (std::int64_t r = 0; r < k; ++r) {
        const std::int64_t i = order[static_cast<std::size_t>(r)];
        res.push_back(nlohmann::ordered_json{
            {"rank", r + 1}, {"score", row[i]}, {"line", ix.line(i)}, {"text", ix.texts[static_cast<std::size_t>(i)]}});
      }
      out << nlohmann::ordered_json{{"query", o.queries[qi]}, {"results", res}}.dump() << '\n';
      continue;
    }
    out << "query: " << o.queries[qi] << '\n';
    for (std::int64_t r = 0; r < k; ++r) {
      const std::int64_t i = order[static_cast<std::size_t>(r)];
      out << "  " << r + 1 << ". " << fixed(row[i], 4) << "  " << ix.texts[static_cast<std::size_t>(i)] << "  (line "
          << ix.line(i) << ")\n";
    }
  }
  return 0;
}
QKV_TOOL_COMMAND(search, {
    .name = "search",
    .summary = "Semantic search: the lines of an embedding index closest to each query",
    .order = 21,
    .group = "Embed and search",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Embeds each QUERY with --model (the model the index was built with) and prints the --top-k lines of "
          "--index (written by 'qkv embed --file corpus.txt --out index.safetensors') with the highest cosine "
          "similarity, best first (ties: earlier line first). --json prints one object per query: "
          "{\"query\": ..., \"results\": [{\"rank\", \"score\", \"line\", \"text\"}, ...]}. Example:\n"
          "  qkv search --index index.safetensors --model models/all-MiniLM-L6-v2 \"Who eats?\"");
      auto opt = std::make_shared<SearchOptions>();
      sub.add_option("--index", opt->index, "Index file written by qkv embed --out")
          ->check(input_file("an index file written by qkv embed --out"))
          ->type_name("FILE")
          ->required();
      add_model_option(sub, opt->model, "BERT / sentence-transformers model folder (the one the index was built with)")
          ->required();
      sub.add_option("--top-k", opt->top_k, "Results per query (default 5)")->check(int_range(1, 1000000));
      sub.add_flag("--json", opt->json, "One JSON object per query");
      sub.add_option("queries", opt->queries, "Query texts")->required();
      return [opt] { return run_search(*opt, std::cout); };
    }});

}  // namespace qkv::tool
