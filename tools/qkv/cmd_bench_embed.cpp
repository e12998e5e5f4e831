// qkv bench embed: sentences per second of SentenceEmbedder (tokenisation included, as
// sentence-transformers' encode() includes it), the matrix products' GFLOP/s, median of --repeat.
#include "cmd_bench_embed.h"
#include "model_dir.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/embed.h"
#include "qkv/kernels/cpu.h"

namespace qkv::tool {

std::vector<std::string> bench_sentences(std::int64_t n) {
  static const char* const words[] = {
      "the",      "a",         "model",     "reads",    "every",      "sentence", "and",     "writes",   "one",
      "vector",   "search",    "finds",     "meaning",  "not",        "keywords", "in",      "large",    "corpora",
      "attention", "layers",   "mix",       "tokens",   "quickly",    "while",    "people",  "ask",      "questions",
      "about",    "weather",   "football",  "recipes",  "travel",     "music",    "history", "science",  "of",
      "cities",   "rivers",    "mountains", "2024",     "3.5",        "percent",  "café",    "naïve",    "résumé",
      "東京",      "数据",       "embedding", "retrieval", "clustering", "with",     "without", "because",  "however",
      "!",        "?",         ",",         ".",        "transformers", "unbelievably", "tokenization"};
  const std::size_t nw = sizeof(words) / sizeof(words[0]);
  std::uint64_t s = 0x9E3779B97F4A7C15ull;  // splitmix64: the same stream everywhere
  auto next = [&s] {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::vector<std::string> out;
  out.reserve(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint64_t r = next() % 100;
    // 70% short (3-20 words), 25% medium (20-60), 5% long (60-250; some exceed 256 tokens).
    const std::uint64_t len = r < 70 ? 3 + next() % 18 : r < 95 ? 20 + next() % 41 : 60 + next() % 191;
    std::string t;
    for (std::uint64_t w = 0; w < len; ++w) {
      if (w) t += ' ';
      t += words[next() % nw];
    }
    out.push_back(std::move(t));
  }
  return out;
}

namespace {

struct BenchEmbedOptions {
  std::string model, dump;
  std::int64_t batch = 32, sentences = 1000;
  int repeat = 3, warmup = 1;
  bool json = false;
};

int run_bench_embed(const BenchEmbedOptions& o) {
  const std::vector<std::string> texts = bench_sentences(o.sentences);
  if (!o.dump.empty()) {
    std::ofstream f(o.dump, std::ios::binary);
    for (const auto& t : texts) f << t << '\n';
    if (!f) throw IOError("bench embed: cannot write " + o.dump);
  }
  require_model_role(o.model, models::ModelRole::Encoder, "bench embed");
  const infer::SentenceEmbedder e = infer::SentenceEmbedder::from_folder(o.model);
  // FLOPs of the matrix products embed() runs: no padding (BertRunner), so per token and per
  // query-key pair of each sentence. padded_tokens: what batches padded to their longest row
  // (sentence-transformers' way, sorted by length as embed sorts) would have computed.
  std::vector<std::int64_t> lens;
  std::int64_t tokens = 0;
  for (const auto& t : texts) lens.push_back(static_cast<std::int64_t>(e.tokenizer().encode_with_specials(t).size()));
  for (auto l : lens) tokens += l;
  const double flops = e.runner().matmul_flops(lens);
  // The warm-up runs the first 4 batches embed() runs: the 4 x batch longest sentences (embed
  // sorts longest first), so the timed runs find their largest buffers already allocated.
  std::vector<std::size_t> by_len(texts.size());
  for (std::size_t i = 0; i < by_len.size(); ++i) by_len[i] = i;
  std::stable_sort(by_len.begin(), by_len.end(), [&](std::size_t a, std::size_t b) { return lens[a] > lens[b]; });
  std::vector<std::string> warm;
  for (std::size_t i = 0; i < std::min<std::size_t>(by_len.size(), 4 * static_cast<std::size_t>(o.batch)); ++i)
    warm.push_back(texts[by_len[i]]);
  std::sort(lens.rbegin(), lens.rend());
  std::int64_t padded = 0;
  for (std::size_t s = 0; s < lens.size(); s += static_cast<std::size_t>(o.batch))
    padded += static_cast<std::int64_t>(std::min<std::size_t>(static_cast<std::size_t>(o.batch), lens.size() - s)) * lens[s];
  const infer::EmbedOptions eo{.batch_size = o.batch};
  for (int i = 0; i < o.warmup; ++i) e.embed(warm, eo);
  std::vector<double> secs;
  for (int i = 0; i < o.repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    e.embed(texts, eo);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(secs.begin(), secs.end());
  const double med = secs.size() % 2 ? secs[secs.size() / 2] : 0.5 * (secs[secs.size() / 2 - 1] + secs[secs.size() / 2]);
  const nlohmann::json j = {{"bench", "embed"},
                            {"model", o.model},
                            {"sentences", o.sentences},
                            {"batch", o.batch},
                            {"threads", num_threads()},
                            {"isa", kernels::isa_name(kernels::active_isa())},
                            {"repeat", o.repeat},
                            {"median_s", med},
                            {"min_s", secs.front()},
                            {"sentences_per_s", static_cast<double>(o.sentences) / med},
                            {"tokens", tokens},
                            {"padded_tokens", padded},
                            {"gflop", flops / 1e9},
                            {"gflops", flops / (med * 1e9)}};
  if (o.json) {
    std::cout << j.dump() << '\n';
    return 0;
  }
  for (auto it = j.begin(); it != j.end(); ++it) std::cout << "  " << it.key() << ": " << it.value().dump() << '\n';
  return 0;
}

}  // namespace

std::pair<CLI::App*, Action> add_bench_embed(CLI::App& bench) {
  auto o = std::make_shared<BenchEmbedOptions>();
  CLI::App* s = bench.add_subcommand(
      "embed", "Sentence embeddings of a BERT folder (all-MiniLM-L6-v2) on 1000 generated sentences of mixed length");
  add_model_option(*s, o->model, "BERT / sentence-transformers model folder")->required();
  s->add_option("--batch", o->batch, "Sentences per forward pass (default 32)")->check(int_range(1, 4096));
  s->add_option("--sentences", o->sentences, "How many generated sentences (default 1000)")->check(int_range(1, 1000000));
  s->add_option("--repeat", o->repeat, "Timed runs over all sentences (default 3)")->check(int_range(1, 1000));
  s->add_option("--warmup", o->warmup, "Untimed runs over the first 4 batches (the 4 x batch longest sentences) first (default 1)")->check(int_range(0, 100));
  s->add_option("--dump-sentences", o->dump, "Also write the generated sentences to this file (one per line)");
  s->add_flag("--json", o->json, "One JSON object (sentences_per_s, batch, threads, gflops, ...)");
  return {s, [o] { return run_bench_embed(*o); }};
}

}  // namespace qkv::tool
