// qkv perplexity: a text's perplexity under a causal language model in sliding windows
// (infer/score.h), optionally the run's log-probabilities saved (--save-logits) or compared with
// a saved reference (--kl-reference: KL divergence and token statistics, infer/kl_divergence.h).
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "command.h"
#include "model_dir.h"
#include "output.h"
#include "progress.h"
#include "qkv/core/error.h"
#include "qkv/core/memory.h"
#include "qkv/infer/kl_divergence.h"
#include "qkv/infer/language_model.h"
#include "qkv/infer/logprob_file.h"
#include "qkv/infer/score.h"
#include "qkv/io/files.h"

namespace qkv::tool {
namespace {

using i64 = std::int64_t;
using ojson = nlohmann::ordered_json;

struct PerplexityOptions {
  std::string model, text, kl_reference, save_logits, activations = "f32", kv_cache = "f32";
  i64 context = 0, stride = 0;
  bool json = false, overwrite = false, progress = true;
};

// "99.9%" for a percentile's fraction; "max" / "median" / "min" for 1, 0.5, 0.
std::string fraction_name(double f) {
  if (f >= 1) return "max";
  if (f <= 0) return "min";
  if (f == 0.5) return "median";
  return fmt::format("{:g}%", 100 * f);
}

ojson percentiles_json(const std::vector<std::pair<double, double>>& p) {
  ojson j = ojson::object();
  for (const auto& [f, v] : p) j[fraction_name(f)] = v;
  return j;
}

ojson kl_json(const infer::KLStats& k, const std::string& reference) {
  return {{"reference", reference},
          {"tokens", k.count},
          {"mean", k.kl_mean},
          {"mean_err", k.kl_mean_err},
          {"percentiles", percentiles_json(k.kl_percentiles)},
          {"delta_p",
           {{"mean", k.dp_mean},
            {"mean_err", k.dp_mean_err},
            {"rms", k.dp_rms},
            {"rms_err", k.dp_rms_err},
            {"percentiles", percentiles_json(k.dp_percentiles)}}},
          {"same_top", k.same_top},
          {"same_top_err", k.same_top_err},
          {"perplexity", k.ppl},
          {"reference_perplexity", k.ppl_ref},
          {"ln_ppl_ratio", k.ln_ppl_ratio},
          {"ln_ppl_ratio_err", k.ln_ppl_ratio_err},
          {"nll_correlation", k.nll_correlation}};
}

void print_kl(std::ostream& out, const infer::KLStats& k, const std::string& reference) {
  out << "KL divergence from " << reference << " over " << k.count << " tokens:\n";
  out << fmt::format("  PPL(model) {:.6f}   PPL(reference) {:.6f}   ln(PPL ratio) {:.6f} +- {:.6f}   nll correlation {:.2f}%\n",
                     k.ppl, k.ppl_ref, k.ln_ppl_ratio, k.ln_ppl_ratio_err, 100 * k.nll_correlation);
  out << fmt::format("  mean KL {:.6f} +- {:.6f}\n", k.kl_mean, k.kl_mean_err);
  for (const auto& [f, v] : k.kl_percentiles)
    if (f != 0.75 && f != 0.25) out << fmt::format("  {:<7} KL {:.6f}\n", fraction_name(f), v);
  out << fmt::format("  mean delta-p {:.3f} +- {:.3f} %\n", 100 * k.dp_mean, 100 * k.dp_mean_err);
  for (const auto& [f, v] : k.dp_percentiles) out << fmt::format("  {:<7} delta-p {:.3f}%\n", fraction_name(f), 100 * v);
  out << fmt::format("  RMS delta-p {:.3f} +- {:.3f} %\n", 100 * k.dp_rms, 100 * k.dp_rms_err);
  out << fmt::format("  same top p {:.3f} +- {:.3f} %\n", 100 * k.same_top, 100 * k.same_top_err);
}

int run_perplexity(const PerplexityOptions& o, std::ostream& out) {
  // Every check of the options, the inputs and the output before the model is read.
  require_model_role(o.model, models::ModelRole::CausalLM, "perplexity");
  check_input_file(o.text, "perplexity: --text");
  if (o.context != 0 && o.stride != 0 && o.stride > o.context)
    throw ValueError(fmt::format("perplexity: --stride {} is larger than --context {}; each window must overlap or meet "
                                 "the next (stride <= context)", o.stride, o.context));
  if (o.activations != "f32" && o.activations != "q8")
    throw ValueError("--activations must be f32 or q8, got '" + o.activations + "'");
  if (!o.save_logits.empty()) {
    if (same_file(o.save_logits, o.text)) throw ValueError("perplexity: --save-logits names the --text file; give another path");
    if (!o.kl_reference.empty() && same_file(o.save_logits, o.kl_reference))
      throw ValueError("perplexity: --save-logits names the --kl-reference file it reads; give another path");
    check_output_file(o.save_logits, {.cmd = "perplexity", .flag = "--save-logits", .overwrite = o.overwrite});
  }
  std::optional<infer::ReferenceLogprobs> ref;
  if (!o.kl_reference.empty()) {
    check_input_file(o.kl_reference, "perplexity: --kl-reference", "a log-probabilities file (--save-logits)");
    ref = infer::ReferenceLogprobs::open(o.kl_reference);
  }
  const std::string text = io::read_file(o.text, "perplexity: --text");

  const infer::LanguageModel lm = infer::load_language_model(
      o.model, {.activations = o.activations == "q8" ? kernels::QActivations::Q8 : kernels::QActivations::F32,
                .kv_cache = infer::parse_kv_type(o.kv_cache, "--kv-cache")});
  if (!lm.tokenizer) load_tokenizer(o.model, true, "to read --text");  // names what is missing
  const std::vector<i64> ids = lm.encode_prompt(text);
  const i64 T = static_cast<i64>(ids.size()), P = lm.model->max_positions(), V = lm.model->vocab_size();
  if (T < 2)
    throw ValueError(fmt::format("perplexity: --text '{}' gives {} token{}; a perplexity needs at least 2 (the first "
                                 "token is never scored)", o.text, T, T == 1 ? "" : "s"));
  // The windows: the flags, else the reference's, else the defaults (infer/score.h).
  infer::ScoreOptions so{.context = o.context, .stride = o.stride};
  if (ref) {
    if (so.context == 0) so.context = ref->plan().context;
    if (so.stride == 0) so.stride = std::min(ref->plan().stride, so.context);
  }
  so = infer::resolve_score_options(*lm.model, so);
  if (so.context > P)
    throw ValueError(fmt::format("perplexity: --context {} is more than the model's {} positions", so.context, P));
  if (so.stride > so.context)
    throw ValueError(fmt::format("perplexity: --stride {} is larger than the context {} (stride <= context)", so.stride,
                                 so.context));
  if (ref) {
    ref->check_matches(ids, V, so.context, so.stride, "--kl-reference");
    so.reference = &*ref;
  }
  infer::check_score(*lm.model, ids, so);
  const std::vector<i64> positions = infer::scored_positions(infer::score_windows(T, so.context, so.stride));
  std::unique_ptr<infer::LogprobWriter> save;
  if (!o.save_logits.empty()) {
    save = std::make_unique<infer::LogprobWriter>(
        o.save_logits, infer::LogprobPlan{.tokens = ids, .positions = positions, .vocab = V, .context = so.context,
                                          .stride = so.stride, .model = lm.name});
    so.save = save.get();
    if (!o.json)
      std::cerr << "saving the log-probabilities of " << positions.size() << " tokens (" << format_bytes(save->file_bytes())
                << ") to " << o.save_logits << "\n";
  }

  ProgressBar bar("perplexity", static_cast<i64>(positions.size()), ProgressOptions{.enabled = o.progress});
  const infer::ScoreResult r =
      infer::score_tokens(*lm.model, ids, so, [&](i64 done, i64) { bar.update(done, "tokens scored"); });
  if (save) save->commit();
  bar.finish();

  const double tps = static_cast<double>(r.count()) / std::max(r.seconds, 1e-9);
  if (o.json) {
    ojson j;
    j["model"] = lm.name;
    j["perplexity"] = r.perplexity();
    j["nll"] = r.mean_nll();
    j["nll_sum"] = r.nll_sum;
    j["tokens"] = r.count();
    j["text_tokens"] = T;
    j["context"] = r.context;
    j["stride"] = r.stride;
    j["windows"] = r.windows;
    j["seconds"] = r.seconds;
    j["tokens_per_s"] = tps;
    if (save) j["saved_logits"] = o.save_logits;
    if (r.kl) j["kl"] = kl_json(*r.kl, o.kl_reference);
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  out << fmt::format("perplexity {:.4f} over {} tokens (mean nll {:.4f} nats; {} text tokens, context {}, stride {}, "
                     "{} window{})\n",
                     r.perplexity(), r.count(), r.mean_nll(), T, r.context, r.stride, r.windows, r.windows == 1 ? "" : "s");
  if (r.kl) print_kl(out, *r.kl, o.kl_reference);
  if (save) out << "saved the log-probabilities to " << o.save_logits << "\n";
  std::cerr << fmt::format("{} tokens scored in {:.2f} s ({:.1f} tokens/s)\n", r.count(), r.seconds, tps);
  return 0;
}

QKV_TOOL_COMMAND(perplexity, {
    .name = "perplexity",
    .summary = "A text's perplexity under a language model (sliding windows), and KL divergence against a saved run",
    .order = 54,
    .group = "Inspect, convert and measure",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Scores the --text file, tokenized as qkv generate reads a prompt (BOS first when the model adds one), with " +
          role_needs(models::ModelRole::CausalLM) +
          ". Every token is scored by the model in windows of --context tokens that start every --stride tokens "
          "(transformers' sliding-window rule: each window scores only the tokens the previous one did not, with "
          "the window's earlier tokens as their context; the text's first token is never scored). Perplexity = "
          "exp(mean negative log-likelihood over the scored tokens), natural logs computed in float64 from the "
          "model's float32 logits. --context defaults to the model's positions capped at 2048, --stride to half the "
          "context (with --kl-reference: the reference's). "
          "--save-logits FILE writes every scored position's log-probabilities over the whole vocabulary (a "
          "safetensors file of tokens, positions and float32 log-probabilities: 4 x vocabulary bytes per token, "
          "192 KiB for SmolLM2; written beside FILE and renamed into place when complete). "
          "--kl-reference FILE compares the model with such a file made by another model from the same text, "
          "tokens and windows (a quantized copy against the float model, say), as llama-perplexity "
          "--kl-divergence does: mean KL divergence with its uncertainty and percentiles, delta-p (the text's "
          "token's probability, model minus reference), RMS delta-p, how often both give the same top token, "
          "both perplexities and the correlation of their per-token log-likelihoods. "
          "Progress goes to stderr; --json prints one object: model, perplexity, nll (mean, nats), nll_sum, "
          "tokens (scored), text_tokens, context, stride, windows, seconds, tokens_per_s, saved_logits, and kl "
          "with --kl-reference.\n\n"
          "Examples:\n"
          "  qkv perplexity --model models/SmolLM2-135M-Instruct.Q4_1.gguf --text chapter.txt --context 512 --stride 256\n"
          "  qkv perplexity --model f32.gguf --text wiki.txt --context 512 --save-logits f32-logits.safetensors\n"
          "  qkv perplexity --model q4_1.gguf --text wiki.txt --kl-reference f32-logits.safetensors");
      auto opt = std::make_shared<PerplexityOptions>();
      add_lm_model_option(sub, opt->model, "The model: a GGUF file or a model folder")->required();
      sub.add_option("--text", opt->text, "The text to score (UTF-8)")
          ->check(input_file("a text file"))
          ->type_name("FILE")
          ->required();
      sub.add_option("--context", opt->context,
                     "Tokens per window (default: the model's positions, at most 2048; with --kl-reference its own)")
          ->check(int_range(2, 1 << 24));
      sub.add_option("--stride", opt->stride, "Tokens between window starts (default: half the context)")
          ->check(int_range(1, 1 << 24));
      sub.add_option("--kl-reference", opt->kl_reference,
                     "Compare with the log-probabilities another model saved with --save-logits (KL divergence)")
          ->check(input_file("a log-probabilities file (--save-logits)"))
          ->type_name("FILE");
      sub.add_option("--save-logits", opt->save_logits,
                     "Save every scored position's log-probabilities (safetensors, for --kl-reference)")
          ->type_name("FILE");
      add_overwrite_flag(sub, opt->overwrite, "the --save-logits file");
      sub.add_option("--activations", opt->activations,
                     "f32 (exact, the default) or q8 (quantized weights meet activations quantized per 32 values)")
          ->capture_default_str();
      sub.add_option("--kv-cache", opt->kv_cache, "f32 (the default) or f16: the KV cache's element type")
          ->capture_default_str();
      sub.add_flag("--json", opt->json, "Print one JSON object");
      add_no_progress_flag(sub, opt->progress);
      return [opt] { return run_perplexity(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
