// qkv generate: text from a causal language model (a GGUF file or a Hugging Face folder of any family of the registry)
// through the KV cache (greedy or sampled), streamed to the terminal or as one JSON object per
// prompt; --chat renders the prompt as a user message through the model's chat template.
#include <chrono>
#include <filesystem>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "draft_flags.h"
#include "model_dir.h"
#include "qkv/core/error.h"
#include "qkv/infer/embed.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/language_model.h"
#include "qkv/infer/reply.h"
#include "qkv/infer/text_stream.h"
#include "qkv/io/files.h"
#include "sampling_flags.h"

namespace qkv::tool {
namespace {

namespace fs = std::filesystem;

using i64 = std::int64_t;

struct GenerateOptions {
  std::string model;
  std::optional<std::string> prompt;
  std::string prompt_ids, prompts_file, messages_file, system, chat_template, chat_kwargs, activations = "f32",
      kv_cache = "f32";
  i64 max_new = 32;
  SamplingFlags sampling;
  std::vector<std::string> stop;
  std::vector<std::string> positional;  // PROMPT given without --prompt
  i64 logprobs = -1;
  DraftFlags draft;
  bool no_cache = false, json = false, chat = false, ignore_eos = false;
  bool verbose_prompt = false, no_display_prompt = false;
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
  require_model_role(o.model, models::ModelRole::CausalLM, "generate");
  infer::GenerationOptions g;
  g.max_new_tokens = o.max_new;
  g.sampling = o.sampling.options();
  g.use_cache = !o.no_cache;
  g.logprobs = o.logprobs;
  const int sources = o.prompt.has_value() + !o.prompt_ids.empty() + !o.prompts_file.empty() + !o.messages_file.empty();
  if (sources != 1)
    throw ValueError("generate: give exactly one of PROMPT (or --prompt), --prompt-ids, --prompts-file, --messages");
  if (!o.messages_file.empty()) o.chat = true;
  if (o.chat && !o.prompt_ids.empty()) throw ValueError("generate: --chat renders text; it cannot take --prompt-ids");
  if (!o.system.empty() && !o.chat) throw ValueError("generate: --system needs --chat (a conversation)");
  if (!o.chat_kwargs.empty() && !o.chat) throw ValueError("generate: --chat-template-kwargs needs --chat or --messages");
  const std::map<std::string, std::string> vars =
      o.chat_kwargs.empty() ? std::map<std::string, std::string>{}
                            : tokenize::parse_chat_template_kwargs(o.chat_kwargs, "--chat-template-kwargs");
  if (!o.system.empty() && !o.messages_file.empty())
    throw ValueError("generate: --system with --messages: put the system message in the messages file");
  for (const std::string& s : o.stop)
    if (s.empty()) throw ValueError("--stop: an empty stop string would stop at once");
  if (o.activations != "f32" && o.activations != "q8")
    throw ValueError("--activations must be f32 or q8, got '" + o.activations + "'");
  if (o.no_cache && infer::parse_kv_type(o.kv_cache, "--kv-cache") != infer::KVType::F32)
    throw ValueError("--kv-cache " + o.kv_cache + " sets the KV cache's type; it cannot go with --no-cache");
  o.draft.check(o.no_cache, "generate");
  std::vector<tokenize::ChatMessage> messages;
  if (!o.messages_file.empty())
    messages = tokenize::parse_chat_messages_json(io::read_file(o.messages_file, "--messages"), o.messages_file);

  const infer::LanguageModelOptions load_options{
      .chat_template_file = o.chat_template,
      .activations = o.activations == "q8" ? kernels::QActivations::Q8 : kernels::QActivations::F32,
      .kv_cache = infer::parse_kv_type(o.kv_cache, "--kv-cache")};
  const infer::LanguageModel lm = infer::load_language_model(o.model, load_options);
  if (o.draft.on()) g.draft = o.draft.options(lm.tokenizer.get(), o.model, load_options.kv_cache);
  const bool ids_only = !o.prompt_ids.empty();
  const tokenize::Tokenizer* tok = lm.tokenizer.get();
  if (!ids_only && !tok) load_tokenizer(o.model, true, "to read text prompts; or give --prompt-ids");  // names what is missing
  if (!o.stop.empty() && !tok) throw IOError("--stop needs the tokenizer: '" + o.model + "' has none");
  std::vector<std::string> texts;
  std::vector<std::vector<i64>> prompts;
  if (ids_only) {
    prompts.push_back(parse_ids(o.prompt_ids, "--prompt-ids"));
  } else if (!o.messages_file.empty()) {
    texts.push_back(lm.render_chat(messages, true, vars));
    prompts.push_back(lm.chat_prompt(messages, true, vars));
  } else {
    texts = o.prompts_file.empty() ? std::vector<std::string>{*o.prompt} : infer::read_text_lines(o.prompts_file);
    if (texts.empty()) throw ValueError("--prompts-file: '" + o.prompts_file + "' has no lines");
    for (std::size_t i = 0; i < texts.size(); ++i) {
      const std::string where =
          o.prompts_file.empty() ? std::string("--prompt") : o.prompts_file + ": line " + std::to_string(i + 1);
      if (texts[i].empty()) throw ValueError(o.prompts_file.empty() ? "--prompt is empty" : where + " is empty");
      try {
        if (o.chat) {
          std::vector<tokenize::ChatMessage> conv;
          if (!o.system.empty()) conv.push_back({.role = "system", .content = o.system});
          conv.push_back({.role = "user", .content = texts[i]});
          texts[i] = lm.render_chat(conv, true, vars);
          prompts.push_back(lm.chat_prompt(conv, true, vars));
        } else {
          prompts.push_back(lm.encode_prompt(texts[i]));
        }
      } catch (const tokenize::ChatTemplateError&) {
        throw;
      } catch (const Error& e) {
        throw ValueError(where + ": " + e.what());
      }
    }
  }
  if (tok && tok->vocab_size() > lm.model->vocab_size())
    throw FormatError("'" + o.model + "': the tokenizer has " + std::to_string(tok->vocab_size()) +
                      " tokens, the model's vocabulary " + std::to_string(lm.model->vocab_size()));
  if (!o.ignore_eos && !lm.eos_ids.empty()) {
    g.eos_id = lm.eos_ids[0];
    g.stop_ids.assign(lm.eos_ids.begin() + 1, lm.eos_ids.end());
  }
  infer::check_generation(*lm.model, prompts, g);

  // Prompts given as ids have no text: with a tokenizer their continuation is shown as text alone.
  const bool have_text = !texts.empty();
  const bool stream = !o.json && prompts.size() == 1 && tok && have_text;
  // Per prompt: its text so far (whole characters; a --stop string ends it where it ends). A chat
  // reply of a reasoning model is its answer; its reasoning is apart ("reasoning" with --json) and
  // the markup of its format dropped (infer/reply.h).
  std::vector<std::optional<infer::ReplyStream>> streams(prompts.size());
  if (tok)
    for (std::size_t b = 0; b < streams.size(); ++b)
      streams[b].emplace(lm.tokenizer, o.chat ? infer::reply_format(*tok) : infer::ReplyFormat::Plain, prompts[b],
                         infer::TextStreamOptions{.stops = o.stop,
                                                  .skip = o.ignore_eos ? std::vector<i64>{} : lm.eos_ids,
                                                  .mode = infer::StopMode::Keep});
  // The prompt is shown before its continuation, except a chat's templated conversation (the
  // reply alone, as llama-cli shows it; --verbose-prompt shows it too) or with --no-display-prompt.
  const bool show_prompt = o.chat ? o.verbose_prompt : !o.no_display_prompt;
  if (stream && show_prompt) out << texts[0] << std::flush;
  auto on_token = [&](i64 b, i64 id) {
    auto& s = streams[static_cast<std::size_t>(b)];
    if (!s) return true;
    const infer::ReplyStream::Piece piece = s->push(id);
    if (stream) out << piece.content << std::flush;
    return !s->stopped();
  };
  infer::GenerationStats st;
  const auto results = infer::generate(*lm.model, prompts, g, on_token, &st);
  const double seconds = st.prefill_seconds + st.decode_seconds;
  for (std::size_t b = 0; b < streams.size(); ++b)
    if (streams[b]) {
      const infer::ReplyStream::Piece rest = streams[b]->finish();
      if (stream) out << rest.content;
    }
  // An id past the tokenizer's vocabulary (a padded embedding row) has no text.
  auto token_text = [&](i64 id) { return !tok ? std::to_string(id) : id < tok->vocab_size() ? tok->decode({id}) : ""; };
  if (stream && o.logprobs < 0) {
    out << "\n";
    const auto& r = results[0];
    const double decode_tps = r.new_ids.size() > 1 ? static_cast<double>(r.new_ids.size() - 1) / std::max(st.decode_seconds, 1e-9) : 0.0;
    std::cerr << r.new_ids.size() << " tokens in " << seconds << " s (prompt " << prompts[0].size() << " tokens in "
              << st.prefill_seconds << " s; " << decode_tps << " tokens/s decoding, "
              << (g.use_cache ? "KV cache" : "no cache") << ", stop: "
              << (streams[0] && streams[0]->stopped() ? "stop" : infer::stop_reason_name(r.reason)) << ")\n";
    if (g.draft.on()) std::cerr << draft_summary(st.speculative) << "\n";
    return 0;
  }
  if (stream) out << "\n";
  for (std::size_t b = 0; b < results.size(); ++b) {
    const auto& r = results[b];
    const double tps = static_cast<double>(r.new_ids.size()) / std::max(seconds, 1e-9);
    if (o.json) {
      nlohmann::ordered_json j;
      if (!texts.empty()) j["prompt"] = texts[b];
      j["prompt_ids"] = prompts[b];
      j["new_ids"] = r.new_ids;
      if (tok) j["text"] = streams[b]->text();
      if (streams[b] && streams[b]->format() != infer::ReplyFormat::Plain) j["reasoning"] = streams[b]->reasoning();
      j["tokens_per_s"] = tps;
      j["stop_reason"] = streams[b] && streams[b]->stopped() ? "stop" : infer::stop_reason_name(r.reason);
      if (g.draft.on()) {
        const infer::SpeculativeStats& sp = st.speculative;
        j["speculative"] = {{"drafted", sp.drafted},
                            {"accepted", sp.accepted},
                            {"acceptance", sp.acceptance()},
                            {"target_passes", sp.target_passes},
                            {"tokens_per_pass", sp.tokens_per_pass()}};
      }
      if (o.logprobs >= 0) {
        auto& lp = j["logprobs"] = nlohmann::ordered_json::array();
        for (const infer::TokenLogprob& t : r.logprobs) {
          nlohmann::ordered_json e{{"id", t.id}, {"token", token_text(t.id)}, {"logprob", t.logprob}};
          auto& top = e["top"] = nlohmann::ordered_json::array();
          for (const auto& [id, l] : t.top) top.push_back({{"id", id}, {"token", token_text(id)}, {"logprob", l}});
          lp.push_back(e);
        }
      }
      out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      continue;
    }
    if (!stream) {
      if (tok) {
        out << "[" << b << "] " << (have_text && show_prompt ? texts[b] : std::string()) << streams[b]->text() << "\n";
      } else {
        out << "[" << b << "]";
        for (i64 id : r.new_ids) out << " " << id;
        out << "\n";
      }
    }
    if (o.logprobs >= 0)
      for (const infer::TokenLogprob& t : r.logprobs) {
        out << "  " << nlohmann::json(token_text(t.id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
            << " " << t.logprob;
        for (const auto& [id, l] : t.top)
          out << "  | " << nlohmann::json(token_text(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << " " << l;
        out << "\n";
      }
  }
  out << std::flush;
  if (!o.json) {
    std::cerr << st.new_tokens << " tokens for " << results.size() << " prompts in " << seconds << " s ("
              << static_cast<double>(st.new_tokens) / std::max(seconds, 1e-9) << " tokens/s)\n";
    if (g.draft.on()) std::cerr << draft_summary(st.speculative) << "\n";
  }
  return 0;
}

QKV_TOOL_COMMAND(generate, {
    .name = "generate",
    .summary = "Generate text with a language model (a GGUF file or a Hugging Face folder) through the KV cache",
    .order = 11,
    .group = "Chat with and serve a model",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Reads " + role_needs(models::ModelRole::CausalLM) +
          " (quantized weights are used in place; with --prompt-ids a folder's tokenizer is optional), "
          "prefills the prompt in one pass through the KV cache and then generates one token per step until an "
          "end-of-sequence token (unless --ignore-eos), a --stop string or --max-new tokens. --chat renders the prompt "
          "as a user message (after --system) through the model's chat template; --messages FILE takes a whole "
          "conversation as OpenAI-style JSON [{\"role\": ..., \"content\": ...}]. "
          "--temperature 0 (the default) is greedy; otherwise tokens are sampled after --top-k and --top-p "
          "filtering (transformers' order) from a stream seeded by --seed (same seed, same text). "
          "--prompts-file generates every line as one batch (each prompt in its own cache slot, so its tokens are "
          "those it gets alone). Without --json one prompt's text streams to the terminal as it is made (never half "
          "a UTF-8 character); with --json one object per prompt, in input order: prompt, prompt_ids, new_ids "
          "(generated ids only), text (the continuation only, without the end-of-sequence token, ending at a stop "
          "string), tokens_per_s, stop_reason (length | eos | stop), logprobs with --logprobs N (each token's "
          "log-probability and the N most likely). --no-cache recomputes the whole sequence "
          "every step (same tokens, for comparison). "
          "--draft turns on speculative decoding: a drafter guesses up to --draft-max tokens (default 3: the longest draft the model checks with the bits of one-token steps) that the model "
          "checks in one pass, keeping those it agrees with (greedy output is the same token for token; sampled output "
          "keeps its distribution). --draft ngram drafts by prompt lookup (the tokens that followed the latest earlier "
          "match of the last --draft-ngram tokens, default 3, or fewer); --draft MODEL by a smaller model of the same "
          "vocabulary (a quantized copy of the model, say), run with Q8 activations (its guesses need not be exact). Its counts go to stderr, or with --json to each object's speculative: drafted, accepted, "
          "acceptance, target_passes, tokens_per_pass (over all prompts).\n\n"
          "Examples:\n"
          "  qkv generate --model tests/fixtures/gpt2_tiny \"In the beginning\" --max-new 40\n"
          "  qkv generate --model models/SmolLM2-135M-Instruct.Q4_1.gguf --chat \"What is the capital of France?\"\n"
          "  qkv generate --model DIR --prompts-file prompts.txt --temperature 0.8 --top-p 0.9 --seed 1 --json\n"
          "  qkv generate --model models/SmolLM2-135M-Instruct.Q4_1.gguf --chat \"Rewrite in the past tense: ...\" "
          "--draft ngram");
      auto opt = std::make_shared<GenerateOptions>();
      add_lm_model_option(sub, opt->model, "The model: a GGUF file or a model folder")->required();
      sub.add_option("--prompt", opt->prompt, "Prompt text (or give it as the PROMPT argument)");
      sub.add_option("prompt", opt->positional, "Prompt text (the same as --prompt)")->type_name("PROMPT");
      sub.add_option("--prompt-ids", opt->prompt_ids, "Prompt token ids, e.g. 1,2,3");
      sub.add_option("--prompts-file", opt->prompts_file, "A prompt per line, generated as one batch")
          ->check(input_file("a text file, one prompt per line"))
          ->type_name("FILE");
      sub.add_flag("--chat", opt->chat, "Send the prompt as a user message through the model's chat template");
      sub.add_flag("--verbose-prompt", opt->verbose_prompt,
                   "With --chat: print the templated conversation before the reply (not shown by default)");
      sub.add_flag("--no-display-prompt", opt->no_display_prompt, "Print the continuation without the prompt before it");
      sub.add_option("--system", opt->system, "With --chat: a system message before the prompt");
      sub.add_option("--messages", opt->messages_file, "A conversation as a JSON list of {role, content} (implies --chat)")
          ->check(input_file("a JSON file of messages"))
          ->type_name("FILE");
      sub.add_option("--chat-template", opt->chat_template, "A Jinja chat template file instead of the model's")
          ->check(input_file("a Jinja template file"))
          ->type_name("FILE");
      sub.add_option("--chat-template-kwargs", opt->chat_kwargs,
                     "Variables for the chat template as a JSON object, e.g. '{\"enable_thinking\": false}'")
          ->type_name("JSON");
      sub.add_option("--max-new", opt->max_new, "Most tokens to generate")->check(int_range(1, 1 << 20))->capture_default_str();
      add_sampling_flags(sub, opt->sampling);
      sub.add_option("--stop", opt->stop, "Stop a prompt's generation once its text contains this (repeatable)");
      sub.add_flag("--ignore-eos", opt->ignore_eos, "Do not stop at end-of-sequence tokens (generate --max-new tokens)");
      sub.add_option("--logprobs", opt->logprobs, "Print each token's log-probability and the N most likely (0-20)")
          ->check(int_range(0, 20));
      sub.add_option("--activations", opt->activations,
                     "f32 (exact, the default) or q8 (quantized weights meet activations quantized per 32 values)")
          ->capture_default_str();
      sub.add_option("--kv-cache", opt->kv_cache,
                     "f32 (the default) or f16: the KV cache's element type (f16 halves its memory and what each "
                     "step reads at depth; keys and values rounded to half precision once)")
          ->capture_default_str();
      sub.add_flag("--no-cache", opt->no_cache, "Recompute the whole sequence every step");
      add_draft_flags(sub, opt->draft);
      sub.add_flag("--json", opt->json, "One JSON object per prompt");
      return [opt] { return run_generate(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
