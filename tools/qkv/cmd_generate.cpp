// qkv generate: text from a GPT-2 folder through the KV cache (greedy or sampled),
// streamed to the terminal or as one JSON object per prompt.
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "model_dir.h"
#include "qkv/core/error.h"
#include "qkv/infer/embed.h"
#include "qkv/infer/generate.h"

namespace qkv::tool {
namespace {

using i64 = std::int64_t;

struct GenerateOptions {
  std::string model;
  std::optional<std::string> prompt;
  std::string prompt_ids, prompts_file;
  i64 max_new = 32;
  double temperature = 0.0;
  std::optional<i64> top_k;
  double top_p = 1.0;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  std::vector<std::string> positional;  // PROMPT given without --prompt
  bool no_cache = false, json = false;
  bool top_k_given = false, top_p_given = false, seed_given = false;
};

// Per prompt: text generated so far (complete characters only) and whether a stop string ended it.
struct Stream {
  std::optional<tokenize::StreamDecoder> dec;
  std::string text;
  bool stopped = false;
};

int run_generate(GenerateOptions o, std::ostream& out) {
  // Every check before the model is read.
  if (!o.positional.empty()) {
    if (o.positional.size() > 1)
      throw ValueError("generate: give one prompt (quote it: qkv generate --model DIR \"And God said\"), or one per line "
                       "of --prompts-file; got " + std::to_string(o.positional.size()) + " arguments");
    if (o.prompt) throw ValueError("generate: the prompt is given twice (--prompt and a PROMPT argument); give one");
    o.prompt = o.positional[0];
  }
  require_model_kind(o.model, {"gpt2"}, "generate", "a GPT-2 folder (config.json, model.safetensors, vocab.json, merges.txt)");
  if (o.temperature == 0) {  // greedy: the sampling options change nothing
    for (const auto& [given, flag] : {std::pair{o.top_k_given, "--top-k"}, {o.top_p_given, "--top-p"}, {o.seed_given, "--seed"}})
      if (given) warn(std::string(flag) + " has no effect with greedy decoding (--temperature 0); add --temperature T > 0 to sample");
  }
  infer::GenerationOptions g;
  g.max_new_tokens = o.max_new;
  g.sampling = {.temperature = o.temperature, .top_k = o.top_k.value_or(0), .top_p = o.top_p, .seed = o.seed};
  g.use_cache = !o.no_cache;
  if (o.top_k && *o.top_k <= 0) throw ValueError("--top-k must be >= 1, got " + std::to_string(*o.top_k));
  infer::check_sampling(g.sampling);
  const int sources = o.prompt.has_value() + !o.prompt_ids.empty() + !o.prompts_file.empty();
  if (sources != 1) throw ValueError("generate: give exactly one of PROMPT (or --prompt), --prompt-ids, --prompts-file");
  for (const std::string& s : o.stop)
    if (s.empty()) throw ValueError("--stop: an empty stop string would stop at once");

  const bool ids_only = !o.prompt_ids.empty();
  std::optional<tokenize::ByteLevelBPE> tok = load_tokenizer(o.model, !ids_only, "to read text prompts");
  if (!o.stop.empty() && !tok) throw IOError("--stop needs the tokenizer: '" + o.model + "' has no vocab.json/merges.txt");
  std::vector<std::string> texts;
  std::vector<std::vector<i64>> prompts;
  if (ids_only) {
    prompts.push_back(parse_ids(o.prompt_ids, "--prompt-ids"));
  } else {
    texts = o.prompts_file.empty() ? std::vector<std::string>{*o.prompt} : infer::read_text_lines(o.prompts_file);
    if (texts.empty()) throw ValueError("--prompts-file: '" + o.prompts_file + "' has no lines");
    for (std::size_t i = 0; i < texts.size(); ++i) {
      try {
        prompts.push_back(tok->encode(texts[i]));
      } catch (const Error& e) {
        throw ValueError((o.prompts_file.empty() ? std::string("--prompt") : o.prompts_file + ": line " + std::to_string(i + 1)) +
                         ": " + e.what());
      }
      if (prompts.back().empty())
        throw ValueError(o.prompts_file.empty() ? std::string("--prompt is empty")
                                                : o.prompts_file + ": line " + std::to_string(i + 1) + " is empty");
    }
  }
  const auto model = models::load_gpt2(o.model);
  if (tok && tok->vocab_size() > model->vocab_size())
    throw FormatError("'" + o.model + "': the tokenizer has " + std::to_string(tok->vocab_size()) +
                      " tokens, the model's vocab_size is " + std::to_string(model->vocab_size()));
  g.eos_id = tok && tok->eos_id() ? tok->eos_id() : model->config().eos_token_id;
  infer::check_generation(*model, prompts, g);

  const bool stream = !o.json && prompts.size() == 1 && tok;
  std::vector<Stream> streams(prompts.size());
  if (tok)
    for (Stream& s : streams) s.dec.emplace(*tok);
  if (stream) out << texts[0] << std::flush;
  auto on_token = [&](i64 b, i64 id) {
    Stream& s = streams[static_cast<std::size_t>(b)];
    if (!s.dec) return true;
    const bool special = g.eos_id && id == *g.eos_id;
    const std::string piece = special ? std::string() : s.dec->push(id);
    std::string shown = piece;
    for (const std::string& stop : o.stop) {
      // A stop string ends the text where it ends, even in the middle of a token's bytes.
      const std::size_t from = s.text.size() >= stop.size() ? s.text.size() - stop.size() + 1 : 0;
      const std::size_t at = (s.text + piece).find(stop, from);
      if (at != std::string::npos) {
        shown = (s.text + piece).substr(s.text.size(), at + stop.size() - s.text.size());
        s.stopped = true;
        break;
      }
    }
    s.text += shown;
    if (stream) out << shown << std::flush;
    return !s.stopped;
  };
  infer::GenerationStats st;
  const auto results = infer::generate(*model, prompts, g, on_token, &st);
  const double seconds = st.prefill_seconds + st.decode_seconds;
  for (std::size_t b = 0; b < results.size(); ++b) {
    Stream& s = streams[b];
    if (s.dec && !s.stopped) {
      const std::string rest = s.dec->finish();
      s.text += rest;
      if (stream) out << rest;
    }
  }
  if (stream) {
    out << "\n";
    std::cerr << results[0].new_ids.size() << " tokens in " << seconds << " s ("
              << static_cast<double>(results[0].new_ids.size()) / std::max(seconds, 1e-9) << " tokens/s, "
              << (g.use_cache ? "KV cache" : "no cache") << ", stop: " << infer::stop_reason_name(results[0].reason)
              << ")\n";
    return 0;
  }
  for (std::size_t b = 0; b < results.size(); ++b) {
    const auto& r = results[b];
    const double tps = static_cast<double>(r.new_ids.size()) / std::max(seconds, 1e-9);
    if (o.json) {
      nlohmann::ordered_json j;
      if (!texts.empty()) j["prompt"] = texts[b];
      j["prompt_ids"] = prompts[b];
      j["new_ids"] = r.new_ids;
      if (tok) j["text"] = streams[b].text;
      j["tokens_per_s"] = tps;
      j["stop_reason"] = streams[b].stopped ? "stop" : infer::stop_reason_name(r.reason);
      out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    } else if (tok) {
      out << "[" << b << "] " << texts[b] << streams[b].text << "\n";
    } else {
      out << "[" << b << "]";
      for (i64 id : r.new_ids) out << " " << id;
      out << "\n";
    }
  }
  if (!o.json)
    std::cerr << st.new_tokens << " tokens for " << results.size() << " prompts in " << seconds << " s ("
              << static_cast<double>(st.new_tokens) / std::max(seconds, 1e-9) << " tokens/s)\n";
  return 0;
}

QKV_TOOL_COMMAND(generate, {
    .name = "generate",
    .summary = "Generate text with a GPT-2 model folder through the KV cache",
    .order = 60,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Reads a Hugging Face GPT-2 folder (config.json, model.safetensors, vocab.json, merges.txt; with "
          "--prompt-ids the tokenizer files are optional), prefills the prompt in one pass through the KV cache and "
          "then generates one token per step until <|endoftext|>, a --stop string or --max-new tokens. "
          "--temperature 0 (the default) is greedy; otherwise tokens are sampled after --top-k and --top-p "
          "filtering (transformers' order) from a stream seeded by --seed (same seed, same text). "
          "--prompts-file generates every line as one batch (each prompt in its own cache slot, so its tokens are "
          "those it gets alone). Without --json one prompt's text streams to the terminal as it is made (never half "
          "a UTF-8 character); with --json one object per prompt, in input order: prompt, prompt_ids, new_ids "
          "(generated ids only), text (the continuation only, without a final <|endoftext|>, ending at a stop "
          "string), tokens_per_s, stop_reason (length | eos | stop). --no-cache recomputes the whole sequence "
          "every step (same tokens, for comparison).\n\n"
          "Examples:\n"
          "  qkv generate --model tests/fixtures/gpt2_tiny \"In the beginning\" --max-new 40\n"
          "  qkv generate --model DIR --prompts-file prompts.txt --temperature 0.8 --top-p 0.9 --seed 1 --json");
      auto opt = std::make_shared<GenerateOptions>();
      add_model_option(sub, opt->model, "GPT-2 model folder")->required();
      sub.add_option("--prompt", opt->prompt, "Prompt text (or give it as the PROMPT argument)");
      sub.add_option("prompt", opt->positional, "Prompt text (the same as --prompt)")->type_name("PROMPT");
      sub.add_option("--prompt-ids", opt->prompt_ids, "Prompt token ids, e.g. 1,2,3");
      sub.add_option("--prompts-file", opt->prompts_file, "A prompt per line, generated as one batch")
          ->check(input_file("a text file, one prompt per line"))
          ->type_name("FILE");
      sub.add_option("--max-new", opt->max_new, "Most tokens to generate")->check(int_range(1, 1 << 20))->capture_default_str();
      sub.add_option("--temperature", opt->temperature, "0 = greedy; > 0 samples")->check(real_at_least(0))->capture_default_str();
      CLI::Option* top_k = sub.add_option("--top-k", opt->top_k, "Sample among the K most likely tokens (K >= 1)");
      CLI::Option* top_p =
          sub.add_option("--top-p", opt->top_p, "Sample from the smallest set of tokens with probability >= P, in (0, 1]")
              ->check(real_range(0, 1))
              ->capture_default_str();
      CLI::Option* seed = add_seed_option(sub, opt->seed, "Seed of the sampling stream");
      sub.add_option("--stop", opt->stop, "Stop a prompt's generation once its text contains this (repeatable)");
      sub.add_flag("--no-cache", opt->no_cache, "Recompute the whole sequence every step");
      sub.add_flag("--json", opt->json, "One JSON object per prompt");
      return [opt, top_k, top_p, seed] {
        opt->top_k_given = top_k->count() > 0;
        opt->top_p_given = top_p->count() > 0;
        opt->seed_given = seed->count() > 0;
        return run_generate(*opt, std::cout);
      };
    }});

}  // namespace
}  // namespace qkv::tool
