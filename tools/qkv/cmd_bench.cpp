// qkv bench attention|gemm: median time, GFLOP/s and memory of the engine's
// attention (scaled_dot_product_attention, forward or forward+backward) and
// GEMM on this machine. Benchmarks are not tests: bench/compare_pytorch.py
// runs the same shapes in PyTorch in the same run and prints ratios.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gemm.h"
#include "qkv/qkv.h"

namespace qkv::tool {
namespace {

struct BenchOptions {
  // attention
  std::int64_t batch = 4, heads = 8, len = 1024, dim = 64;
  bool causal = false, backward = false;
  // gemm
  std::int64_t m = 1024, n = 1024, k = 1024;
  // common
  int repeat = 0;  // 0: choose by size
  int warmup = 1;
  bool json = false;
};

double rss_mb_now() {
  std::ifstream f("/proc/self/statm");
  long pages_total = 0, pages_rss = 0;
  f >> pages_total >> pages_rss;
  return static_cast<double>(pages_rss) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

template <class F>
std::vector<double> time_runs(int warmup, int repeat, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  std::vector<double> ms;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void report(const nlohmann::json& j, bool json) {
  if (json) {
    std::cout << j.dump() << '\n';
    return;
  }
  for (auto it = j.begin(); it != j.end(); ++it) std::cout << "  " << it.key() << ": " << it.value().dump() << '\n';
}

int run_attention(const BenchOptions& o) {
  const std::int64_t B = o.batch, H = o.heads, L = o.len, D = o.dim;
  Generator g(1);
  Tensor q = Tensor::randn({B, H, L, D}, &g), k = Tensor::randn({B, H, L, D}, &g), v = Tensor::randn({B, H, L, D}, &g);
  Tensor dout = Tensor::randn({B, H, L, D}, &g);
  const double in_mb = 4.0 * static_cast<double>(q.numel()) * 4.0 / (1024.0 * 1024.0);  // q, k, v, dout
  if (o.backward) {
    q.requires_grad_();
    k.requires_grad_();
    v.requires_grad_();
  }
  const Mask mask = o.causal ? Mask::causal() : Mask();
  const double fwd_flops = 4.0 * static_cast<double>(B * H) * static_cast<double>(L) * static_cast<double>(L) *
                           static_cast<double>(D) * (o.causal ? 0.5 : 1.0);
  // FlashAttention's convention: backward = 2.5x forward (5 matmuls vs 2).
  const double flops = o.backward ? 3.5 * fwd_flops : fwd_flops;
  const int repeat = o.repeat > 0 ? o.repeat : std::clamp(static_cast<int>(2e10 / std::max(flops, 1.0)), 3, 50);
  const double rss_before = rss_mb_now();
  auto step = [&] {
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
  };
  const auto ms = time_runs(o.warmup, repeat, step);
  const double med = median(ms);
  const double peak = peak_rss_mb();
  nlohmann::json j = {{"bench", "attention"},
                      {"batch", B},
                      {"heads", H},
                      {"len", L},
                      {"dim", D},
                      {"causal", o.causal},
                      {"backward", o.backward},
                      {"threads", num_threads()},
                      {"isa", kernels::isa_name(kernels::active_isa())},
                      {"repeat", repeat},
                      {"median_ms", med},
                      {"min_ms", *std::min_element(ms.begin(), ms.end())},
                      {"gflops", flops / (med * 1e6)},
                      {"peak_rss_mb", peak},
                      {"inputs_mb", in_mb},
                      // Growth of the resident set during the timed runs beyond what was resident
                      // before them (inputs already allocated): outputs, gradients and workspaces.
                      {"extra_rss_mb", std::max(0.0, peak - rss_before)}};
  report(j, o.json);
  return 0;
}

int run_gemm(const BenchOptions& o) {
  Generator g(2);
  Tensor a = Tensor::randn({o.m, o.k}, &g), b = Tensor::randn({o.k, o.n}, &g), c = Tensor::zeros({o.m, o.n});
  const double flops = 2.0 * static_cast<double>(o.m) * static_cast<double>(o.n) * static_cast<double>(o.k);
  const int repeat = o.repeat > 0 ? o.repeat : std::clamp(static_cast<int>(2e10 / std::max(flops, 1.0)), 5, 200);
  auto step = [&] {
    kernels::sgemm(false, false, o.m, o.n, o.k, 1.0f, a.data<float>(), o.k, b.data<float>(), o.n, 0.0f,
                   c.data<float>(), o.n);
  };
  const auto ms = time_runs(o.warmup, repeat, step);
  const double med = median(ms);
  nlohmann::json j = {{"bench", "gemm"},
                      {"m", o.m},
                      {"n", o.n},
                      {"k", o.k},
                      {"threads", num_threads()},
                      {"isa", kernels::isa_name(kernels::active_isa())},
                      {"repeat", repeat},
                      {"median_ms", med},
                      {"min_ms", *std::min_element(ms.begin(), ms.end())},
                      {"gflops", flops / (med * 1e6)},
                      {"peak_rss_mb", peak_rss_mb()}};
  report(j, o.json);
  return 0;
}

}  // namespace

QKV_TOOL_COMMAND(bench, {
    .name = "bench",
    .summary = "Time the engine's attention or GEMM: median ms, GFLOP/s, peak memory",
    .order = 80,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "qkv bench attention --batch B --heads H --len L --dim D [--causal] [--backward]\n"
          "qkv bench gemm --m M --n N --k K\n"
          "Prints the median time over --repeat runs after --warmup runs, the throughput (causal attention counts "
          "half the FLOPs; forward+backward counts 3.5x the forward, FlashAttention's convention) and the peak "
          "resident memory. --json prints one JSON object per line (median_ms, gflops, peak_rss_mb, ...). "
          "bench/compare_pytorch.py runs the same shapes in PyTorch side by side; see BENCHMARKS.md.");
      sub.require_subcommand(1);
      auto opt = std::make_shared<BenchOptions>();
      auto common = [opt](CLI::App* s) {
        s->add_option("--repeat", opt->repeat, "Timed runs (default: by size)")->check(int_range(1, 100000));
        s->add_option("--warmup", opt->warmup, "Untimed runs first")->check(int_range(0, 1000));
        s->add_flag("--json", opt->json, "One JSON object per line");
      };
      CLI::App* att = sub.add_subcommand("attention", "scaled_dot_product_attention on [B, H, L, D] float32");
      att->add_option("--batch", opt->batch, "B")->check(int_range(1, 1 << 20));
      att->add_option("--heads", opt->heads, "H")->check(int_range(1, 1 << 20));
      att->add_option("--len", opt->len, "L (queries = keys)")->check(int_range(1, 1 << 24));
      att->add_option("--dim", opt->dim, "D (head dim)")->check(int_range(1, 4096));
      att->add_flag("--causal", opt->causal, "Causal mask");
      att->add_flag("--backward", opt->backward, "Time forward + backward");
      common(att);
      CLI::App* gm = sub.add_subcommand("gemm", "C[M,N] = A[M,K] @ B[K,N] float32");
      gm->add_option("--m", opt->m, "M")->check(int_range(1, 1 << 20));
      gm->add_option("--n", opt->n, "N")->check(int_range(1, 1 << 20));
      gm->add_option("--k", opt->k, "K")->check(int_range(1, 1 << 20));
      common(gm);
      return [opt, att] { return att->parsed() ? run_attention(*opt) : run_gemm(*opt); };
    }});

}  // namespace qkv::tool
