// FlashAttention-style kernels: forward, backward and forward+backward
// throughput, plus the extra memory of forward+backward at L = 16384; sliding windows; and
// decode attention over a KV cache with grouped-query heads at depth 2048.
//
// FLOPs (the GFLOPS counter): forward = 4*B*H*Lq*Lk*D (Q K^T and P V), backward
// = 2.5x forward (5 products), forward+backward = 3.5x forward; causal counts
// half. Shapes B=4, H=8, D=64 (args: L, causal, threads) unless named.
//
//   flock /tmp/qkv-build.lock ./bench_attention --benchmark_repetitions=3
//       --benchmark_report_aggregates_only=true --benchmark_filter='Forward/'
//   ./bench_attention --benchmark_filter=Memory16k     (alone: it reads the peak RSS)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/kernels/peak.h"

namespace {

using i64 = std::int64_t;
using qkv::kernels::AttnParams;

struct Buf {
  float* p;
  i64 n;
  explicit Buf(i64 count, unsigned seed = 0) : n(count) {
    p = static_cast<float*>(qkv::aligned_alloc_bytes(static_cast<std::size_t>(n) * sizeof(float), "bench"));
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (i64 i = 0; i < n; ++i) p[i] = seed ? nd(rng) : 0.f;  // touched either way
  }
  ~Buf() { qkv::aligned_free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

AttnParams params(i64 B, i64 H, i64 L, i64 D, bool causal) {
  AttnParams p;
  p.B = B, p.H = H, p.Lq = L, p.Lk = L, p.D = D, p.Dv = D;
  p.q_st = p.k_st = p.v_st = p.o_st = D;
  p.q_sh = p.k_sh = p.v_sh = p.o_sh = L * D;
  p.q_sb = p.k_sb = p.v_sb = p.o_sb = H * L * D;
  p.scale = 1.f / std::sqrt(static_cast<float>(D));
  p.causal = causal;
  return p;
}

struct Problem {
  AttnParams p;
  Buf q, k, v, o, lse, dO, dq, dk, dv;
  Problem(i64 B, i64 H, i64 L, i64 D, bool causal)
      : p(params(B, H, L, D, causal)),
        q(B * H * L * D, 1), k(B * H * L * D, 2), v(B * H * L * D, 3), o(B * H * L * D), lse(B * H * L),
        dO(B * H * L * D, 4), dq(B * H * L * D), dk(B * H * L * D), dv(B * H * L * D) {}
  void forward() { qkv::kernels::flash_attention_forward(o.p, lse.p, q.p, k.p, v.p, p); }
  void backward() {
    qkv::kernels::flash_attention_backward(dq.p, dk.p, dv.p, dO.p, q.p, k.p, v.p, o.p, lse.p, p);
  }
};

double forward_flops(const AttnParams& p) {
  return 4.0 * double(p.B) * double(p.H) * double(p.Lq) * double(p.Lk) * double(p.D) * (p.causal ? 0.5 : 1.0);
}

enum class Mode { Forward, Backward, ForwardBackward };

void run(benchmark::State& state, Mode mode, i64 B, i64 H, i64 D) {
  const i64 L = state.range(0);
  const bool causal = state.range(1) != 0;
  const int threads = static_cast<int>(state.range(2));
  qkv::set_num_threads(threads);
  Problem pr(B, H, L, D, causal);
  pr.forward();  // warm: workspaces, thread pool, and O/LSE for the backward
  if (mode != Mode::Forward) pr.backward();
  for (auto _ : state) {
    if (mode != Mode::Backward) pr.forward();
    if (mode != Mode::Forward) pr.backward();
    benchmark::ClobberMemory();
  }
  const double mult = mode == Mode::Forward ? 1.0 : mode == Mode::Backward ? 2.5 : 3.5;
  state.counters["GFLOPS"] =
      benchmark::Counter(forward_flops(pr.p) * mult / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(qkv::kernels::isa_name(qkv::kernels::active_isa())));
}

void BM_FlashForward(benchmark::State& s) { run(s, Mode::Forward, 4, 8, 64); }
void BM_FlashBackward(benchmark::State& s) { run(s, Mode::Backward, 4, 8, 64); }
void BM_FlashForwardBackward(benchmark::State& s) { run(s, Mode::ForwardBackward, 4, 8, 64); }
// Head-dim fast paths at L = 1024 (args: D, causal, threads; B=4, H=8).
void BM_FlashForwardHeadDim(benchmark::State& state) {
  const i64 D = state.range(0);
  qkv::set_num_threads(static_cast<int>(state.range(2)));
  Problem pr(4, 8, 1024, D, state.range(1) != 0);
  pr.forward();
  for (auto _ : state) {
    pr.forward();
    benchmark::ClobberMemory();
  }
  state.counters["GFLOPS"] =
      benchmark::Counter(forward_flops(pr.p) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// Sliding window (args: W, threads; 0 = no window): causal forward + backward at B=1, H=8,
// L=8192, D=64. The tiles outside every row's window are skipped, so the time grows with W,
// not with L: GFLOPS counts the work inside the window (about 4 L W D per head and pass for
// W << L), so it stays about flat across W when the skipping works.
void BM_FlashWindow(benchmark::State& state) {
  const i64 W = state.range(0), L = 8192;
  qkv::set_num_threads(static_cast<int>(state.range(1)));
  Problem pr(1, 8, L, 64, true);
  pr.p.window = W;
  pr.forward();
  pr.backward();
  for (auto _ : state) {
    pr.forward();
    pr.backward();
    benchmark::ClobberMemory();
  }
  // Keys seen per row: min(i + 1, W), summed over the rows.
  const double Wn = W > 0 ? static_cast<double>(std::min(W, L)) : static_cast<double>(L);
  const double seen = Wn * static_cast<double>(L) - Wn * (Wn - 1) / 2;
  const double flops = 4.0 * 8 * seen * 64 * 3.5;
  state.counters["GFLOPS"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FlashWindow)
    ->ArgNames({"W", "threads"})
    ->ArgsProduct({{256, 1024, 4096, 0}, {1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"L", "causal", "threads"})
      ->ArgsProduct({{512, 1024, 2048, 4096, 8192}, {0, 1}, {1, 2}})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.3);
}
BENCHMARK(BM_FlashForward)->Apply(shapes);
BENCHMARK(BM_FlashBackward)->Apply(shapes);
BENCHMARK(BM_FlashForwardBackward)->Apply(shapes);
BENCHMARK(BM_FlashForwardHeadDim)
    ->ArgNames({"D", "causal", "threads"})
    ->ArgsProduct({{32, 64, 128}, {0}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);

// Resident memory of /proc/self/status field `key` (kB).
long status_kb(const char* key) {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  const std::size_t n = std::strlen(key);
  while (std::fgets(line, sizeof line, f))
    if (!std::strncmp(line, key, n)) v = std::atol(line + n + 1);
  std::fclose(f);
  return v;
}

// Forward + backward at B=1, H=8, L=16384, D=64 (args: causal, threads): peak resident memory
// beyond the inputs, outputs and gradients, which are allocated and touched first. The peak
// (VmHWM) is reset through /proc/self/clear_refs, so run it alone or first.
void BM_FlashMemory16k(benchmark::State& state) {
  qkv::set_num_threads(static_cast<int>(state.range(1)));
  Problem pr(1, 8, 16384, 64, state.range(0) != 0);
  const long base = status_kb("VmRSS:");
  if (FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
    std::fputs("5", f);  // reset VmHWM to the current RSS
    std::fclose(f);
  }
  for (auto _ : state) {
    pr.forward();
    pr.backward();
  }
  const long peak = status_kb("VmHWM:");
  state.counters["extra_MB"] = static_cast<double>(peak - base) / 1024.0;
  state.counters["inputs_outputs_MB"] = (8.0 * 16384 * 8 * 64 + 16384 * 8) * 4 / (1 << 20);  // Q,K,V,O,dO,dQ,dK,dV,LSE
  state.counters["GFLOPS"] =
      benchmark::Counter(forward_flops(pr.p) * 3.5 / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_FlashMemory16k)
    ->ArgNames({"causal", "threads"})
    ->Args({1, 2})
    ->Args({0, 2})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Decode attention at depth 2048 (SmolLM2-135M's attention: H=9 query heads, D=64, one new
// query per sequence; args: B, kv heads in memory, threads). One call reads every cached key and
// value of the B sequences once: B * kv_heads * 2048 * D * 4 bytes each of K and V, reported as
// KV_GBs beside read_GBs, the machine's read bandwidth measured in the same run with the same
// threads over as many bytes (kernels/peak.h), and their ratio bw_frac. Like a model's layers,
// the call walks a rotation of caches that together exceed kColdBytes, so K and V come from
// memory: this machine's last-level cache still held a 96 MB rotation (a streaming read ran at
// ~28 GB/s over 48 MB and ~15 GB/s from 192 MB up, one thread). kv heads = 9 is multi-head
// attention (K and V stored per query head, 3x the bytes of GQA's 3).
constexpr i64 kColdBytes = 512ll << 20;
void BM_DecodeDepth2048(benchmark::State& state) {
  const i64 B = state.range(0), Hkv = state.range(1), H = 9, D = 64, T = 2048, depth = 2048;
  qkv::set_num_threads(static_cast<int>(state.range(2)));
  const i64 per_layer = B * Hkv * T * D;  // floats of K (and of V) per layer
  const i64 layers = std::max<i64>(2, kColdBytes / (2 * per_layer * 4) + 1);
  // K, V zeros (fast to fill; the time does not depend on the values)
  Buf q(B * H * D, 1), o(B * H * D), k(layers * per_layer), v(layers * per_layer);
  std::vector<i64> q_len(static_cast<std::size_t>(B), 1), k_len(static_cast<std::size_t>(B), depth);
  qkv::kernels::DecodeParams p;
  p.B = B, p.H = H, p.Lq = 1, p.D = D;
  p.q_sb = p.o_sb = H * D, p.q_sh = p.o_sh = D, p.q_st = p.o_st = D;
  p.k_sb = p.v_sb = Hkv * T * D, p.k_sh = p.v_sh = T * D, p.k_st = p.v_st = D;
  if (Hkv != H) p.H_kv = Hkv;
  p.q_len = q_len.data(), p.k_len = k_len.data();
  p.scale = 0.125f;
  const qkv::kernels::ReadBandwidth bw = qkv::kernels::measure_read_bandwidth(kColdBytes, 3);
  i64 layer = 0;
  for (i64 l = 0; l < layers; ++l)  // warm: workspaces, thread pool
    qkv::kernels::decode_attention_forward(o.p, q.p, k.p + l * per_layer, v.p + l * per_layer, p);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    qkv::kernels::decode_attention_forward(o.p, q.p, k.p + layer * per_layer, v.p + layer * per_layer, p);
    layer = (layer + 1) % layers;
    benchmark::ClobberMemory();
  }
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double bytes = 2.0 * static_cast<double>(B * Hkv * depth * D) * 4;
  const double gbs = bytes * static_cast<double>(state.iterations()) / sec / 1e9;
  state.counters["KV_GBs"] = gbs;
  state.counters["read_GBs"] = bw.gbs;
  state.counters["bw_frac"] = gbs / bw.gbs;
  state.SetLabel(std::string(qkv::kernels::isa_name(qkv::kernels::active_isa())));
}
BENCHMARK(BM_DecodeDepth2048)
    ->ArgNames({"B", "Hkv", "threads"})
    ->ArgsProduct({{1, 4, 16}, {3, 9}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MinTime(0.3);

}  // namespace

BENCHMARK_MAIN();
