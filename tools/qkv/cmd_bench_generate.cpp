// qkv bench generate: tokens/s of greedy generation through the KV cache (or with
// --no-cache), next to the memory-bandwidth bound measured in the same run:
// at batch 1 every weight is read once per token, so the bound is
// read bandwidth / weight bytes. With --draft, speculative decoding runs after each plain run
// (interleaved): its tokens/s, the speed-up, the acceptance and whether the tokens are the same.
#include "cmd_bench_generate.h"

#include <algorithm>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "model_dir.h"
#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/infer/embed.h"
#include "qkv/infer/generate.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/peak.h"
#include "qkv/infer/language_model.h"
#include "qkv/models/gpt2.h"

namespace qkv::tool {

int run_bench_generate(const BenchGenerateOptions& o) {
  if (o.activations != "f32" && o.activations != "q8")
    throw ValueError("--activations must be f32 or q8, got '" + o.activations + "'");
  if (o.no_cache && infer::parse_kv_type(o.kv_cache, "--kv-cache") != infer::KVType::F32)
    throw ValueError("--kv-cache " + o.kv_cache + " sets the KV cache's type; it cannot go with --no-cache");
  o.draft.check(o.no_cache, "bench generate");
  std::shared_ptr<const infer::CausalLM> model;
  std::shared_ptr<const tokenize::Tokenizer> tokenizer;
  std::string arch = "gpt2";
  double weight_bytes = 0;  // bytes read per decode step
  nlohmann::ordered_json sizes;
  if (!o.model.empty()) {
    const infer::LanguageModel lm = infer::load_language_model(
        o.model, {.activations = o.activations == "q8" ? kernels::QActivations::Q8 : kernels::QActivations::F32,
                  .kv_cache = infer::parse_kv_type(o.kv_cache, "--kv-cache")});
    model = lm.model;
    tokenizer = lm.tokenizer;
    arch = lm.architecture;
    weight_bytes = static_cast<double>(lm.weight_bytes);
    if (o.activations != "f32" && !lm.q8_activations)
      throw ValueError("--activations q8 applies to decoder models with quantized weights only, not to " + lm.architecture);
  } else {
    models::GPT2Config c;
    c.n_layer = o.layers, c.n_embd = o.d_model, c.n_head = o.heads, c.vocab_size = o.vocab;
    c.n_positions = std::max<std::int64_t>(o.positions, o.prompt_len + o.new_tokens);
    if (c.n_embd % c.n_head) throw ValueError("--d-model must be divisible by --heads");
    manual_seed(0);
    auto m = std::make_shared<models::GPT2LMHeadModel>(c);
    m->eval();
    m->set_kv_type(infer::parse_kv_type(o.kv_cache, "--kv-cache"));
    // Every parameter except the position table, of which one row is read.
    weight_bytes = 4.0 * static_cast<double>(m->num_parameters() - m->wpe->weight.numel());
    model = m;
  }
  for (const auto& [key, value] : model->sizes()) sizes[key] = value;
  if (o.prompt_len + o.new_tokens > model->max_positions())
    throw ValueError("--prompt-len " + std::to_string(o.prompt_len) + " + --new " + std::to_string(o.new_tokens) +
                     " exceeds the model's " + std::to_string(model->max_positions()) + " positions");
  std::vector<std::vector<std::int64_t>> prompts;
  if (!o.prompt_ids.empty()) {
    // The prompts another engine uses: one line of ids per sequence.
    for (const std::string& line : infer::read_text_lines(o.prompt_ids))
      if (!line.empty()) prompts.push_back(parse_ids(line, "--prompt-ids"));
    if (static_cast<std::int64_t>(prompts.size()) != o.batch)
      throw ValueError("--prompt-ids: '" + o.prompt_ids + "' has " + std::to_string(prompts.size()) +
                       " prompts for --batch " + std::to_string(o.batch));
    for (const auto& p : prompts)
      if (static_cast<std::int64_t>(p.size()) != o.prompt_len)
        throw ValueError("--prompt-ids: every prompt must have --prompt-len " + std::to_string(o.prompt_len) +
                         " ids, one has " + std::to_string(p.size()));
  } else {
    // Seeded random prompts.
    Generator g(o.seed);
    prompts.resize(static_cast<std::size_t>(o.batch));
    for (auto& p : prompts)
      for (std::int64_t i = 0; i < o.prompt_len; ++i) p.push_back(g.randint(0, model->vocab_size()));
  }
  infer::GenerationOptions go{.max_new_tokens = o.new_tokens, .use_cache = !o.no_cache};  // no eos: exactly N tokens
  infer::GenerationOptions spec = go;
  if (o.draft.on()) {
    spec.draft = o.draft.options(tokenizer.get(), o.model.empty() ? std::string("the random GPT-2") : o.model,
                                 infer::parse_kv_type(o.kv_cache, "--kv-cache"));
    infer::check_generation(*model, prompts, spec);
  }
  // Warm-up: the block cache, the thread team, first-touch of the workspaces.
  infer::generate(*model, prompts, {.max_new_tokens = std::min<std::int64_t>(4, o.new_tokens), .use_cache = go.use_cache});
  const double rss_loaded = rss_mb_now();
  reset_peak_rss();
  std::vector<double> tps, step_ms, prefill_ms, spec_tps, spec_step_ms;
  std::vector<std::vector<std::int64_t>> first_ids;
  infer::SpeculativeStats spec_stats;
  bool same_ids = true;
  for (int r = 0; r < o.repeat; ++r) {
    infer::GenerationStats st;
    const auto res = infer::generate(*model, prompts, go, {}, &st);
    if (r == 0)
      for (const auto& x : res)
        first_ids.emplace_back(x.new_ids.begin(), x.new_ids.begin() + std::min<std::size_t>(32, x.new_ids.size()));
    tps.push_back(static_cast<double>(st.new_tokens) / (st.prefill_seconds + st.decode_seconds));
    step_ms.push_back(1e3 * st.decode_seconds / static_cast<double>(std::max<std::int64_t>(o.new_tokens - 1, 1)));
    prefill_ms.push_back(1e3 * st.prefill_seconds);
    if (!o.draft.on()) continue;
    infer::GenerationStats ss;
    const auto sres = infer::generate(*model, prompts, spec, {}, &ss);
    for (std::size_t b = 0; b < res.size(); ++b) same_ids = same_ids && sres[b].new_ids == res[b].new_ids;
    spec_tps.push_back(static_cast<double>(ss.new_tokens) / (ss.prefill_seconds + ss.decode_seconds));
    spec_step_ms.push_back(1e3 * ss.decode_seconds / static_cast<double>(std::max<std::int64_t>(o.new_tokens - 1, 1)));
    spec_stats = ss.speculative;
  }
  const double rss = peak_rss_mb();
  const kernels::ReadBandwidth bw = kernels::measure_read_bandwidth(o.bandwidth_mb << 20, 3);
  const double bound = bw.gbs * 1e9 / weight_bytes * static_cast<double>(o.batch);  // tokens/s at the bound
  // The same over a buffer of the weights' size: where the last-level cache holds the weights
  // (a 260 MiB L3 holds SmolLM2's 92 MB), a decode step reads them from there, not from DRAM.
  const kernels::ReadBandwidth bw_w = kernels::measure_read_bandwidth(static_cast<std::int64_t>(weight_bytes), 3);
  const double bound_w = bw_w.gbs * 1e9 / weight_bytes * static_cast<double>(o.batch);
  const double decode_tps = static_cast<double>(o.batch) * 1e3 / median(step_ms);
  const infer::KVCacheOptions co = model->cache_options(o.batch, o.prompt_len + o.new_tokens);
  // Keys and values of the attention layers, and the recurrent states of the others (Qwen3.5).
  std::int64_t kv_layers = 0, state_floats = 0;
  for (std::int64_t l = 0; l < co.num_layers; ++l) {
    const std::int64_t n = co.state_floats.empty() ? 0 : co.state_floats[static_cast<std::size_t>(l)];
    kv_layers += n == 0 ? 1 : 0;
    state_floats += n;
  }
  const double kv_bytes = (co.dtype == infer::KVType::F16 ? 4.0 : 8.0) * static_cast<double>(kv_layers * co.batch * co.max_len) *
                              static_cast<double>((co.num_kv_heads ? co.num_kv_heads : co.num_heads) * co.head_dim) +
                          4.0 * static_cast<double>(state_floats * co.batch);
  nlohmann::ordered_json j;
  j["bench"] = "generate";
  j["model"] = o.model.empty() ? "random" : o.model;
  j["architecture"] = arch;
  for (auto it = sizes.begin(); it != sizes.end(); ++it) j[it.key()] = it.value();
  j["batch"] = o.batch, j["prompt_len"] = o.prompt_len, j["new"] = o.new_tokens;
  j["cache"] = !o.no_cache;
  j["activations"] = o.activations;
  j["kv_cache"] = o.kv_cache;
  j["threads"] = num_threads();
  j["isa"] = kernels::isa_name(kernels::active_isa());
  j["repeat"] = o.repeat;
  j["tokens_per_s"] = median(tps);
  j["decode_tokens_per_s"] = decode_tps;
  j["ms_per_token"] = median(step_ms);
  j["prefill_ms"] = median(prefill_ms);
  j["prefill_tokens_per_s"] = static_cast<double>(o.batch * o.prompt_len) * 1e3 / median(prefill_ms);
  j["weight_bytes"] = weight_bytes;
  j["read_gbs"] = bw.gbs;
  j["bandwidth_bound_tokens_per_s"] = bound;
  j["fraction_of_bound"] = decode_tps / bound;
  j["read_gbs_weight_size"] = bw_w.gbs;
  j["bound_weight_size_tokens_per_s"] = bound_w;
  j["fraction_of_bound_weight_size"] = decode_tps / bound_w;
  j["weights_mb"] = weight_bytes / (1 << 20);
  j["cache_mb"] = kv_bytes / (1 << 20);
  j["peak_rss_mb"] = rss;
  j["rss_after_load_mb"] = rss_loaded;
  j["first_ids"] = first_ids;  // [B][<= 32] generated ids, to compare engines
  if (o.draft.on()) {
    const double spec_decode_tps = static_cast<double>(o.batch) * 1e3 / median(spec_step_ms);
    j["speculative"] = {{"draft", o.draft.draft},
                        {"draft_max", spec.draft.max},
                        {"drafted", spec_stats.drafted},
                        {"accepted", spec_stats.accepted},
                        {"acceptance", spec_stats.acceptance()},
                        {"tokens_per_pass", spec_stats.tokens_per_pass()},
                        {"tokens_per_s", median(spec_tps)},
                        {"decode_tokens_per_s", spec_decode_tps},
                        {"speedup", median(tps) > 0 ? median(spec_tps) / median(tps) : 0.0},
                        {"decode_speedup", spec_decode_tps / decode_tps},
                        {"same_ids", same_ids}};
  }
  if (o.json) {
    std::cout << j.dump() << "\n";
  } else {
    for (auto it = j.begin(); it != j.end(); ++it) std::cout << "  " << it.key() << ": " << it.value().dump() << "\n";
  }
  return 0;
}

}  // namespace qkv::tool
