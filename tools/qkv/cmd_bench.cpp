// qkv bench attention|gemm|mha|encoder-step: median time, GFLOP/s and memory
// of the engine's attention (scaled_dot_product_attention, forward or
// forward+backward), GEMM, nn::MultiHeadAttention self-attention and one
// training step of an nn::TransformerEncoder on this machine. Benchmarks are
// not tests: bench/compare_pytorch.py runs the same shapes in PyTorch in the
// same run and prints ratios.
//
// FLOPs are counted from the matrix products only (softmax, layer norm,
// elementwise ops and the optimiser are not counted); both engines are
// credited the same count, so the ratio is the ratio of times. With
// B batch, L length, E model width, H heads, D = E / H, F feed-forward width:
//   attention  forward 4 B H L^2 D (causal: half); forward+backward 3.5x the
//              forward (FlashAttention's convention: backward recomputes
//              S = Q K^T, 5 matmuls against the forward's 2)
//   gemm       2 M N K
//   mha        forward 8 B L E^2 (w_q, w_k, w_v, w_o) + 4 B L^2 E (Q K^T, P V);
//              forward+backward 3x the projections (dX and dW; the input
//              requires grad) + 3.5x the attention: 24 B L E^2 + 14 B L^2 E
//   encoder-step  per layer: projections 8 B L E^2 and feed-forward 4 B L E F,
//              3x for a training step, + attention 3.5 * 4 B L^2 E; minus
//              6 B L E^2 because layer 0's q/k/v projections need no input
//              gradient (the input is data):
//              N (24 B L E^2 + 12 B L E F + 14 B L^2 E) - 6 B L E^2
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "cmd_bench_generate.h"
#include "cmd_bench_embed.h"
#include "command.h"
#include "format.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gemm.h"
#include "qkv/kernels/peak.h"
#include "qkv/qkv.h"

namespace qkv::tool {
namespace {

// Options every bench subcommand takes.
struct CommonOptions {
  int repeat = 0;  // 0: choose by size
  int warmup = 1;
  bool json = false;
};

struct AttentionOptions {
  std::int64_t batch = 4, heads = 8, len = 1024, dim = 64;
  bool causal = false, backward = false;
};

struct GemmOptions {
  std::int64_t m = 1024, n = 1024, k = 1024;
};

struct MhaOptions {
  std::int64_t batch = 4, len = 512, embed = 512, heads = 8;
  bool backward = false;
};

struct PeakOptions {
  double seconds = 0.5;
  bool json = false;
};

struct EncoderStepOptions {
  std::int64_t batch = 8, len = 128, d_model = 256, heads = 4, d_ff = 1024, layers = 2;
};

double float_mb(std::int64_t floats) { return 4.0 * static_cast<double>(floats) / (1024.0 * 1024.0); }


// Runs `step` c.warmup times untimed, then `repeat` times timed (c.repeat, or
// enough runs for ~20 GFLOP clamped to [min_repeat, max_repeat]), and returns
// the fields every report shares: threads, isa, repeat, median_ms, min_ms,
// gflops (flops / median), peak_rss_mb (the process's peak resident set) and
// extra_rss_mb (the peak during the runs minus what was resident before them:
// outputs, gradients, optimiser state and workspaces; the inputs already exist).
nlohmann::json measure(const CommonOptions& c, double flops, int min_repeat, int max_repeat,
                       const std::function<void()>& step) {
  const int repeat =
      c.repeat > 0 ? c.repeat : std::clamp(static_cast<int>(2e10 / std::max(flops, 1.0)), min_repeat, max_repeat);
  const double peak_before = peak_rss_mb();
  // With the high-water mark reset, the peak after the runs is the peak during them.
  reset_peak_rss();
  const double rss_before = rss_mb_now();
  for (int i = 0; i < c.warmup; ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const double med = median(ms), peak_runs = peak_rss_mb();
  return {{"threads", num_threads()},
          {"isa", kernels::isa_name(kernels::active_isa())},
          {"repeat", repeat},
          {"median_ms", med},
          {"min_ms", *std::min_element(ms.begin(), ms.end())},
          {"gflops", flops / (med * 1e6)},
          {"peak_rss_mb", std::max(peak_before, peak_runs)},
          {"extra_rss_mb", std::max(0.0, peak_runs - rss_before)}};
}

// Prints the shape fields `j` merged with the timing fields, as one JSON line
// or as indented "key: value" lines.
int report(nlohmann::json j, const nlohmann::json& timing, const CommonOptions& c) {
  j.update(timing);
  if (c.json) {
    std::cout << j.dump() << '\n';
    return 0;
  }
  for (auto it = j.begin(); it != j.end(); ++it) std::cout << "  " << it.key() << ": " << it.value().dump() << '\n';
  return 0;
}

// The FP32 FMA throughput now, on --threads workers: what "% of peak" divides by.
int run_peak(const PeakOptions& o) {
  const kernels::FmaPeak r = kernels::fma_peak(o.seconds);
  const nlohmann::json j = {{"bench", "peak"},
                            {"threads", r.threads},
                            {"isa", kernels::isa_name(kernels::active_isa())},
                            {"gflops", r.gflops},
                            {"gflops_per_thread", r.gflops / r.threads},
                            {"seconds", r.seconds},
                            {"fmas_per_thread", r.fmas},
                            {"lanes", r.lanes}};
  if (o.json) {
    std::cout << j.dump() << '\n';
    return 0;
  }
  for (auto it = j.begin(); it != j.end(); ++it) std::cout << "  " << it.key() << ": " << it.value().dump() << '\n';
  return 0;
}

int run_attention(const AttentionOptions& o, const CommonOptions& c) {
  const std::int64_t B = o.batch, H = o.heads, L = o.len, D = o.dim;
  // q, k, v, out and dout (and with --backward their three gradients), checked before any is made.
  MemoryEstimate need;
  need.add({B, H, L, D}, o.backward ? 8 : 5).check("bench attention (" + shape_str({B, H, L, D}) + " float32)");
  Generator g(1);
  Tensor q = Tensor::randn({B, H, L, D}, &g), k = Tensor::randn({B, H, L, D}, &g), v = Tensor::randn({B, H, L, D}, &g);
  Tensor dout = Tensor::randn({B, H, L, D}, &g);
  if (o.backward) {
    q.requires_grad_();
    k.requires_grad_();
    v.requires_grad_();
  }
  const Mask mask = o.causal ? Mask::causal() : Mask();
  const double fwd_flops = 4.0 * static_cast<double>(B * H) * static_cast<double>(L) * static_cast<double>(L) *
                           static_cast<double>(D) * (o.causal ? 0.5 : 1.0);
  const double flops = o.backward ? 3.5 * fwd_flops : fwd_flops;
  const nlohmann::json timing = measure(c, flops, 3, 50, [&] {
    if (o.backward) {
      q.zero_grad();
      k.zero_grad();
      v.zero_grad();
      Tensor out = scaled_dot_product_attention(q, k, v, mask).output;
      out.backward(dout);
    } else {
      autograd::NoGradGuard ng;
      Tensor out = scaled_dot_product_attention(q, k, v, mask).output;
    }
  });
  return report({{"bench", "attention"},
                 {"batch", B},
                 {"heads", H},
                 {"len", L},
                 {"dim", D},
                 {"causal", o.causal},
                 {"backward", o.backward},
                 {"inputs_mb", float_mb(4 * q.numel())}},  // q, k, v, dout
                timing, c);
}

int run_gemm(const GemmOptions& o, const CommonOptions& c) {
  MemoryEstimate need;
  need.add({o.m, o.k}).add({o.k, o.n}).add({o.m, o.n}).check("bench gemm (M " + std::to_string(o.m) + ", N " +
                                                            std::to_string(o.n) + ", K " + std::to_string(o.k) + ")");
  Generator g(2);
  Tensor a = Tensor::randn({o.m, o.k}, &g), b = Tensor::randn({o.k, o.n}, &g), out = Tensor::zeros({o.m, o.n});
  const double flops = 2.0 * static_cast<double>(o.m) * static_cast<double>(o.n) * static_cast<double>(o.k);
  const nlohmann::json timing = measure(c, flops, 5, 200, [&] {
    kernels::sgemm(false, false, o.m, o.n, o.k, 1.0f, a.data<float>(), o.k, b.data<float>(), o.n, 0.0f,
                   out.data<float>(), o.n);
  });
  return report({{"bench", "gemm"}, {"m", o.m}, {"n", o.n}, {"k", o.k}}, timing, c);
}

// Self-attention through nn::MultiHeadAttention, need_weights = false (the
// fused attention path). Forward only: eval mode, no autograd graph.
// --backward: train mode (dropout 0), the input requires grad, and
// out.backward(dout) fills the input's and all parameters' gradients.
int run_mha(const MhaOptions& o, const CommonOptions& c) {
  const std::int64_t B = o.batch, L = o.len, E = o.embed, H = o.heads;
  MemoryEstimate need;  // x, dout, q, k, v, attention output, out (and their gradients with --backward)
  need.add({B, L, E}, o.backward ? 14 : 7).add({E, E}, 4).check("bench mha (" + shape_str({B, L, E}) + " float32)");
  nn::MultiHeadAttention mha({.embed_dim = E, .num_heads = H, .dropout = 0.0});
  Generator g(3);
  Tensor x = Tensor::randn({B, L, E}, &g), dout = Tensor::randn({B, L, E}, &g);
  if (o.backward) {
    mha.train();
    x.requires_grad_();
  } else {
    mha.eval();
  }
  const double b = static_cast<double>(B), l = static_cast<double>(L), e = static_cast<double>(E);
  const double proj = 8.0 * b * l * e * e, attn = 4.0 * b * l * l * e;
  const double flops = o.backward ? 3.0 * proj + 3.5 * attn : proj + attn;
  const nlohmann::json timing = measure(c, flops, 3, 50, [&] {
    if (o.backward) {
      x.zero_grad();
      mha.zero_grad();
      Tensor out = mha.forward(x, x, x, Mask(), /*need_weights=*/false).output;
      out.backward(dout);
    } else {
      autograd::NoGradGuard ng;
      Tensor out = mha.forward(x, x, x, Mask(), /*need_weights=*/false).output;
    }
  });
  return report({{"bench", "mha"},
                 {"batch", B},
                 {"len", L},
                 {"embed", E},
                 {"heads", H},
                 {"head_dim", mha.head_dim()},
                 {"backward", o.backward},
                 {"params", mha.num_parameters()},
                 {"inputs_mb", float_mb((o.backward ? 2 : 1) * x.numel())}},  // x (, dout)
                timing, c);
}

// One training step of a post-norm ReLU TransformerEncoder (PyTorch's
// nn.TransformerEncoder of nn.TransformerEncoderLayer(batch_first=True,
// dropout=0.0) defaults: layer_norm_eps 1e-5, no final norm):
//   zero grads; loss = mean(encoder(x)); loss.backward(); Adam(lr 1e-3) step.
int run_encoder_step(const EncoderStepOptions& o, const CommonOptions& c) {
  const std::int64_t B = o.batch, L = o.len, E = o.d_model, H = o.heads, F = o.d_ff, N = o.layers;
  {
    // Per layer: weights, gradients and Adam's two moments, and the activations autograd keeps.
    MemoryEstimate need, acts;
    nn::add_encoder_block_memory(need, {.d_model = E, .num_heads = H, .d_ff = F});
    need.scale(4).add(acts.add({B, L, E}, 16).add({B, L, F}, 4)).scale(N);
    need.check("bench encoder-step (" + std::to_string(N) + " layers, " + shape_str({B, L, E}) + ", d_ff " +
               std::to_string(F) + ")");
  }
  nn::TransformerEncoder enc({.num_layers = N,
                              .layer = {.d_model = E,
                                        .num_heads = H,
                                        .d_ff = F,
                                        .dropout = 0.0,
                                        .activation = nn::Activation::ReLU,
                                        .norm_first = false,
                                        .layer_norm_eps = 1e-5},
                              .final_norm = false});
  enc.train();
  optim::Adam adam(enc.named_parameters(), optim::AdamOptions{.lr = 1e-3});
  Generator g(4);
  Tensor x = Tensor::randn({B, L, E}, &g);
  const double b = static_cast<double>(B), l = static_cast<double>(L), e = static_cast<double>(E),
               f = static_cast<double>(F), n = static_cast<double>(N);
  const double per_layer = 3.0 * (8.0 * b * l * e * e + 4.0 * b * l * e * f) + 3.5 * 4.0 * b * l * l * e;
  const double flops = std::max(0.0, n * per_layer - (N > 0 ? 6.0 * b * l * e * e : 0.0));
  const nlohmann::json timing = measure(c, flops, 3, 50, [&] {
    adam.zero_grad();
    Tensor loss = mean(enc.forward(x));
    loss.backward();
    adam.step();
  });
  const std::int64_t params = enc.num_parameters();
  return report({{"bench", "encoder-step"},
                 {"batch", B},
                 {"len", L},
                 {"d_model", E},
                 {"heads", H},
                 {"d_ff", F},
                 {"layers", N},
                 {"dropout", 0.0},
                 {"norm_first", false},
                 {"activation", "relu"},
                 {"optimizer", "adam"},
                 {"params", params},
                 {"params_mb", float_mb(4 * params)},  // weights, gradients, Adam's two moments
                 {"inputs_mb", float_mb(x.numel())}},
                timing, c);
}

}  // namespace

QKV_TOOL_COMMAND(bench, {
    .name = "bench",
    .summary = "Time the engine's attention, GEMM, multi-head attention, an encoder training step or sentence embeddings",
    .order = 53,
    .group = "Inspect, convert and measure",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "qkv bench attention --batch B --heads H --len L --dim D [--causal] [--backward]\n"
          "qkv bench gemm --m M --n N --k K\n"
          "qkv bench mha --batch B --len L --embed E --heads H [--backward]\n"
          "qkv bench encoder-step --batch B --len L --d-model E --heads H --d-ff F --layers N\n"
          "qkv bench peak [--seconds S]\n"
          "qkv bench generate (--model DIR | --layers L --d-model D --heads H --vocab V) [--batch B] "
          "[--prompt-len P] [--new N] [--no-cache] [--draft ngram|MODEL [--draft-max K] [--draft-ngram N]]\n"
          "qkv bench embed --model DIR [--batch B] [--json]\n"
          "Prints the median time over --repeat runs after --warmup runs, the throughput and the peak "
          "resident memory. FLOPs count the matrix products only: attention 4BHL^2D (causal half), "
          "forward+backward 3.5x (FlashAttention's convention); gemm 2MNK; mha 8BLE^2 + 4BL^2E, with "
          "--backward 24BLE^2 + 14BL^2E; encoder-step N(24BLE^2 + 12BLEF + 14BL^2E) - 6BLE^2. "
          "embed: sentences/s of qkv embed on 1000 generated sentences (tokenisation included), FLOPs "
          "of the unpadded products N(8TE^2 + 4TEF + 4E sum_s L_s^2) over T tokens (padded_tokens: "
          "what per-batch padding would have computed). "
          "generate --draft: speculative decoding timed after each plain run (interleaved), reported as "
          "speculative: drafted, accepted, acceptance, tokens_per_pass, tokens_per_s, speedup over plain, "
          "same_ids (the greedy tokens equal plain decoding's). "
          "--json prints one JSON object per line (median_ms, gflops, peak_rss_mb, extra_rss_mb, ...). "
          "peak: the FP32 FMA throughput of a register-only loop on --threads workers, now (a shared "
          "machine's peak moves with its load; measure it in the same run as what you divide by it). "
          "bench/compare_pytorch.py runs the same shapes in PyTorch side by side; see BENCHMARKS.md.");
      sub.require_subcommand(1);
      auto common = std::make_shared<CommonOptions>();
      auto add_common = [common](CLI::App* s) {
        s->add_option("--repeat", common->repeat, "Timed runs (default: by size)")->check(int_range(1, 100000));
        s->add_option("--warmup", common->warmup, "Untimed runs first")->check(int_range(0, 1000))->capture_default_str();
        s->add_flag("--json", common->json, "One JSON object per line");
      };
      std::vector<std::pair<CLI::App*, Action>> runs;

      auto att = std::make_shared<AttentionOptions>();
      CLI::App* s = sub.add_subcommand("attention", "scaled_dot_product_attention on [B, H, L, D] float32");
      s->add_option("--batch", att->batch, "B")->check(int_range(1, 1 << 20))->capture_default_str();
      s->add_option("--heads", att->heads, "H")->check(int_range(1, 1 << 20))->capture_default_str();
      s->add_option("--len", att->len, "L (queries = keys)")->check(int_range(1, 1 << 24))->capture_default_str();
      s->add_option("--dim", att->dim, "D (head dim)")->check(int_range(1, 4096))->capture_default_str();
      s->add_flag("--causal", att->causal, "Causal mask");
      s->add_flag("--backward", att->backward, "Time forward + backward");
      add_common(s);
      runs.emplace_back(s, [att, common] { return run_attention(*att, *common); });

      auto gm = std::make_shared<GemmOptions>();
      s = sub.add_subcommand("gemm", "C[M,N] = A[M,K] @ B[K,N] float32");
      s->add_option("--m", gm->m, "M")->check(int_range(1, 1 << 20))->capture_default_str();
      s->add_option("--n", gm->n, "N")->check(int_range(1, 1 << 20))->capture_default_str();
      s->add_option("--k", gm->k, "K")->check(int_range(1, 1 << 20))->capture_default_str();
      add_common(s);
      runs.emplace_back(s, [gm, common] { return run_gemm(*gm, *common); });

      auto mha = std::make_shared<MhaOptions>();
      s = sub.add_subcommand("mha", "nn::MultiHeadAttention self-attention on [B, L, E], need_weights false");
      s->add_option("--batch", mha->batch, "B (default 4)")->check(int_range(1, 1 << 20));
      s->add_option("--len", mha->len, "L (default 512)")->check(int_range(1, 1 << 24));
      s->add_option("--embed", mha->embed, "E, embed_dim (default 512)")->check(int_range(1, 1 << 16));
      s->add_option("--heads", mha->heads, "H, must divide E (default 8)")->check(int_range(1, 1 << 16));
      s->add_flag("--backward", mha->backward, "Time forward + backward (input and parameter gradients)");
      add_common(s);
      runs.emplace_back(s, [mha, common] { return run_mha(*mha, *common); });

      auto enc = std::make_shared<EncoderStepOptions>();
      s = sub.add_subcommand("encoder-step",
                             "One training step (zero grads, forward, mean loss, backward, Adam) of a post-norm "
                             "ReLU TransformerEncoder, dropout 0");
      s->add_option("--batch", enc->batch, "B (default 8)")->check(int_range(1, 1 << 20));
      s->add_option("--len", enc->len, "L (default 128)")->check(int_range(1, 1 << 24));
      s->add_option("--d-model", enc->d_model, "E (default 256)")->check(int_range(1, 1 << 16));
      s->add_option("--heads", enc->heads, "H, must divide E (default 4)")->check(int_range(1, 1 << 16));
      s->add_option("--d-ff", enc->d_ff, "F, feed-forward width (default 1024)")->check(int_range(1, 1 << 20));
      s->add_option("--layers", enc->layers, "Encoder layers (default 2)")->check(int_range(1, 1024));
      add_common(s);
      runs.emplace_back(s, [enc, common] { return run_encoder_step(*enc, *common); });

      auto pk = std::make_shared<PeakOptions>();
      s = sub.add_subcommand("peak", "FP32 fused multiply-add peak of this machine now, on --threads workers");
      s->add_option("--seconds", pk->seconds, "Length of the timed loop (default 0.5)")
          ->check(real_range(0.001, 600.0));
      s->add_flag("--json", pk->json, "One JSON object per line");
      runs.emplace_back(s, [pk] { return run_peak(*pk); });

      auto gen = std::make_shared<BenchGenerateOptions>();
      s = sub.add_subcommand("generate",
                             "Greedy generation through the KV cache: tokens/s, ms per token, the read bandwidth "
                             "measured now and the bound it sets (weight bytes read per token)");
      add_lm_model_option(*s, gen->model, "Model: a GGUF file or a model folder, as qkv generate reads them (default: a random GPT-2 of the sizes below)");
      s->add_option("--activations", gen->activations,
                    "f32 (exact, the default) or q8 (activations quantized per 32 values, integer products; "
                    "quantized weights)");
      s->add_option("--kv-cache", gen->kv_cache, "f32 (the default) or f16: the KV cache's element type")
          ->check(CLI::IsMember({"f32", "f16"}));
      s->add_option("--layers", gen->layers, "L (default 12)")->check(int_range(1, 1024));
      s->add_option("--d-model", gen->d_model, "C (default 768)")->check(int_range(1, 1 << 16));
      s->add_option("--heads", gen->heads, "H, must divide C (default 12)")->check(int_range(1, 1 << 16));
      s->add_option("--vocab", gen->vocab, "V (default 50257)")->check(int_range(1, 1 << 24));
      s->add_option("--positions", gen->positions, "n_positions (default 1024, raised to fit)")->check(int_range(1, 1 << 20));
      s->add_option("--batch", gen->batch, "Prompts generated together (default 1)")->check(int_range(1, 4096));
      s->add_option("--prompt-len", gen->prompt_len, "Tokens per prompt (default 16)")->check(int_range(1, 1 << 20));
      s->add_option("--new", gen->new_tokens, "Tokens generated per prompt (default 256)")->check(int_range(1, 1 << 20));
      add_seed_option(*s, gen->seed, "Seed of the random prompts");
      s->add_option("--prompt-ids", gen->prompt_ids, "File of --batch lines of --prompt-len ids (instead of random prompts)")
          ->check(input_file("a file of token ids"))
          ->type_name("FILE");
      s->add_option("--repeat", gen->repeat, "Timed runs (median; default 3)")->check(int_range(1, 1000));
      s->add_flag("--no-cache", gen->no_cache, "Recompute the whole sequence every step");
      s->add_option("--bandwidth-mb", gen->bandwidth_mb, "Buffer of the read-bandwidth measurement (default 512)")
          ->check(int_range(1, 1 << 16));
      add_draft_flags(*s, gen->draft);
      s->add_flag("--json", gen->json, "One JSON object");
      runs.emplace_back(s, [gen] { return run_bench_generate(*gen); });
      runs.push_back(add_bench_embed(sub));  // qkv bench embed (cmd_bench_embed.cpp)

      return [runs] {
        for (const auto& [app, run] : runs)
          if (app->parsed()) return run();
        return 2;  // unreachable: require_subcommand(1)
      };
    }});

}  // namespace qkv::tool
