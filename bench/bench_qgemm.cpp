// Quantized-weight products (kernels/qgemm.h) on SmolLM2-135M's shapes, next to the memory read
// bandwidth and the float32 GEMM measured in the same run.
//
//   qgemm/<type>/<N>x<K>/M=<M>/<act>/t<threads>/<hot|cold>
//     GBps   weight bytes read per second (N * row_bytes per product; the decode figure)
//     GFLOPS 2*M*N*K per second (the prefill figure)
//     decode (M = 1, and M = 16 as rows_alone: a serving step of 16 sequences): 16 products per iteration in one parallel_team (qgemm_part per member), as a
//     forward pass runs them; prefill (M = 512): qgemm, forking itself
//     hot: one copy of W, in cache after the first call; cold: calls cycle through copies of W
//     filling 512 MiB, so every call streams W from memory (as a token streams the whole model)
//     /rows8: the same decode product reading W's decode layout (qgemm_repack_rows8), where the
//     CPU's kernels read it
//   read_bandwidth/t<threads>: kernels::measure_read_bandwidth over 512 MiB (best of 3 passes)
//   sgemm_nt/<N>x<K>/M=<M>/t<threads>: the float32 GEMM on the same shape (W as floats [N, K])
//
// Run (under the CPU lock), e.g.:
//   ./build/bench/bench_qgemm --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gemm.h"
#include "qkv/kernels/peak.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/kernels/quant.h"

namespace {

using i64 = std::int64_t;
using qkv::kernels::QType;

constexpr i64 kColdBytes = i64{512} << 20;

struct Bytes {
  std::uint8_t* p = nullptr;
  std::size_t n = 0;
  explicit Bytes(std::size_t bytes)
      : p(static_cast<std::uint8_t*>(qkv::aligned_alloc_bytes(bytes, "bench"))), n(bytes) {}
  ~Bytes() { qkv::aligned_free(p); }
  Bytes(Bytes&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
};

std::vector<float> uniform(i64 n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// W [N, K] of type t from uniform floats (quantize_row), `copies` dense copies back to back.
Bytes make_weights(QType t, i64 N, i64 K, i64 copies) {
  const i64 rb = qkv::kernels::qtype_row_bytes(t, K);
  Bytes b(static_cast<std::size_t>(N * rb * copies));
  const std::vector<float> w = uniform(N * K, 7, 1.0f / std::sqrt(static_cast<float>(K)));
  for (i64 n = 0; n < N; ++n) qkv::kernels::quantize_row(t, w.data() + n * K, b.p + n * rb, K);
  for (i64 c = 1; c < copies; ++c) std::memcpy(b.p + c * N * rb, b.p, static_cast<std::size_t>(N * rb));
  return b;
}

void counters(benchmark::State& st, i64 M, i64 N, i64 K, i64 weight_bytes) {
  st.counters["GBps"] = benchmark::Counter(static_cast<double>(weight_bytes) / 1e9,
                                           benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOPS"] = benchmark::Counter(2.0 * static_cast<double>(M) * static_cast<double>(N) *
                                                 static_cast<double>(K) / 1e9,
                                             benchmark::Counter::kIsIterationInvariantRate);
  st.counters["threads"] = qkv::num_threads();
}

// Decode (M small) runs kTeamCalls products per iteration inside one parallel_team, each member
// computing its qgemm_part, a barrier after each: how a model's forward pass runs its layers (one
// wake-up of the workers per pass, not per product). Prefill calls qgemm, which forks itself.
constexpr int kTeamCalls = 16;
// The rows of a serving decode step (qkv serve --parallel 16): M = 16 runs as decode (rows_alone).
constexpr i64 kStepRows = 16;

void run_qgemm(benchmark::State& st, QType t, i64 N, i64 K, i64 M, bool q8, int threads, bool cold, bool rows8) {
  qkv::set_num_threads(threads);
  const i64 rb = qkv::kernels::qtype_row_bytes(t, K);
  const i64 copies = cold ? std::max<i64>(1, kColdBytes / (N * rb)) : 1;
  const Bytes w = make_weights(t, N, K, copies);
  // A 64-byte aligned, as a model's activations are (its rows too when K * 4 is a multiple of 64).
  const std::vector<float> a0 = uniform(M * K, 3, 1.0f);
  const Bytes abuf(static_cast<std::size_t>(M * K) * sizeof(float));
  float* a_al = reinterpret_cast<float*>(abuf.p);
  std::copy(a0.begin(), a0.end(), a_al);
  std::vector<float> c(static_cast<std::size_t>(M * N));
  qkv::kernels::QGemmOptions o;
  o.activations = q8 ? qkv::kernels::QActivations::Q8 : qkv::kernels::QActivations::F32;
  // A continuous-batching decode step (M independent sequences) takes the decode path for any M.
  o.rows_alone = M > qkv::kernels::qgemm_decode_max_m() && M <= kStepRows;
  // rows8: each copy's decode layout too (qgemm_repack_rows8), which the Q8 path's decode rows read.
  const Bytes w8(rows8 ? static_cast<std::size_t>(N * rb * copies) : 1);
  if (rows8)
    for (i64 c = 0; c < copies; ++c) {
      const qkv::kernels::QMatrix m = qkv::kernels::qmatrix(t, w.p + c * N * rb, N, K);
      qkv::kernels::qgemm_repack_rows8(m, w8.p + c * N * rb, 0, N / 8);
    }
  auto matrix = [&](i64 i) {
    qkv::kernels::QMatrix m = qkv::kernels::qmatrix(t, w.p + (i % copies) * N * rb, N, K);
    if (rows8) m.rows8 = w8.p + (i % copies) * N * rb;
    return m;
  };
  const bool team = M <= kStepRows;
  i64 i = 0;
  for (auto _ : st) {
    if (team) {
      qkv::parallel_team(threads, [&](qkv::Team& tm) {
        for (int k = 0; k < kTeamCalls; ++k) {
          qkv::kernels::qgemm_part(M, a_al, K, matrix(i + k), c.data(), N, o, tm.rank(), tm.size());
          tm.barrier();
        }
      });
      i += kTeamCalls;
    } else {
      qkv::kernels::qgemm(M, a_al, K, matrix(i++), c.data(), N, o);
    }
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  const i64 calls = team ? kTeamCalls : 1;
  counters(st, M * calls, N, K, N * rb * calls);
}

void run_sgemm(benchmark::State& st, i64 N, i64 K, i64 M, int threads) {
  qkv::set_num_threads(threads);
  const std::vector<float> w = uniform(N * K, 7, 1.0f), a = uniform(M * K, 3, 1.0f);
  std::vector<float> c(static_cast<std::size_t>(M * N));
  for (auto _ : st) {
    qkv::kernels::sgemm(false, true, M, N, K, 1.0f, a.data(), K, w.data(), K, 0.0f, c.data(), N);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  counters(st, M, N, K, N * K * 4);
}

void run_bandwidth(benchmark::State& st, int threads) {
  qkv::set_num_threads(threads);
  double best = 0;
  for (auto _ : st) {
    const qkv::kernels::ReadBandwidth r = qkv::kernels::measure_read_bandwidth(kColdBytes, 3);
    best = std::max(best, r.gbs);
    benchmark::DoNotOptimize(r.sum);
  }
  st.counters["GBps"] = best;
  st.counters["threads"] = threads;
}

void register_all() {
  struct Shape {
    QType t;
    i64 N, K;
  };
  const Shape shapes[] = {{QType::Q4_1, 576, 576},   {QType::Q4_1, 192, 576},   {QType::Q4_1, 1536, 576},
                          {QType::Q4_1, 576, 1536},  {QType::Q8_0, 49152, 576},
                          // The k-quants, IQ4 types and MXFP4 on a shape of 256-value rows (a 1.5B
                          // model's attn_q: 1536 x 1536), to set them side by side.
                          {QType::Q4_K, 1536, 1536}, {QType::Q5_K, 1536, 1536}, {QType::Q6_K, 1536, 1536},
                          {QType::Q2_K, 1536, 1536}, {QType::Q3_K, 1536, 1536}, {QType::IQ4_NL, 1536, 1536},
                          {QType::IQ4_XS, 1536, 1536}, {QType::MXFP4, 1536, 1536},
                          // Q5_0, the Q4_K_M files' type of the rows not a multiple of 256 (Gemma 3
                          // 1B's 1152 columns: its q, k, gate and up), on such a shape.
                          {QType::Q5_0, 1536, 1152}};
  for (int threads : {1, 2}) {
    const std::string ts = "/t" + std::to_string(threads);
    benchmark::RegisterBenchmark(("read_bandwidth" + ts).c_str(), [=](benchmark::State& st) {
      run_bandwidth(st, threads);
    })->Iterations(1)->Unit(benchmark::kMillisecond)->UseRealTime();
    for (const Shape& s : shapes)
      for (i64 M : {i64{1}, kStepRows, i64{512}})
        for (bool q8 : {false, true})
          for (bool cold : {false, true}) {
            if (cold && M > kStepRows) continue;  // prefill re-uses W from cache whatever its first read
            const std::string name = std::string("qgemm/") + qkv::kernels::qtype_name(s.t) + "/" +
                                     std::to_string(s.N) + "x" + std::to_string(s.K) + "/M=" + std::to_string(M) +
                                     (q8 ? "/q8" : "/f32") + ts + (cold ? "/cold" : "/hot");
            benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) {
              run_qgemm(st, s.t, s.N, s.K, M, q8, threads, cold, false);
            })->Unit(benchmark::kMicrosecond)->UseRealTime();
            if (M == 1 && q8 && qkv::kernels::qgemm_rows8_wanted(s.t))
              benchmark::RegisterBenchmark((name + "/rows8").c_str(), [=](benchmark::State& st) {
                run_qgemm(st, s.t, s.N, s.K, M, q8, threads, cold, true);
              })->Unit(benchmark::kMicrosecond)->UseRealTime();
          }
    for (const Shape& s : shapes) {
      if (s.N > 4096) continue;  // the head's float copy would be 113 MB
      const std::string name =
          "sgemm_nt/" + std::to_string(s.N) + "x" + std::to_string(s.K) + "/M=512" + ts;
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_sgemm(st, s.N, s.K, 512, threads); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("qkv_isa", qkv::kernels::isa_name(qkv::kernels::active_isa()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
