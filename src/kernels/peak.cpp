// FP32 FMA peak loops (include/qkv/kernels/peak.h): one per ISA, chosen at
// run time like the other kernels. The multiplier and addend come through
// volatile reads, so the compiler cannot fold the chains; without -ffast-math
// it does not reassociate them either.
#include "qkv/kernels/peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/kernels/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace qkv::kernels {
namespace {

volatile float g_one = 1.f, g_zero = 0.f;

// n FMAs per accumulator; returns the accumulators' sum (all lanes).
template <int N>
float chains_scalar(std::int64_t n) {
  const float a = g_one, b = g_zero;
  float acc[N];
  for (int i = 0; i < N; ++i) acc[i] = 1.f;
  for (std::int64_t k = 0; k < n; ++k)
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = __builtin_fmaf(acc[i], a, b);
  float s = 0.f;
  for (int i = 0; i < N; ++i) s += acc[i];
  return s;
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float chains_avx2(std::int64_t n) {
  constexpr int N = 12;
  const __m256 a = _mm256_set1_ps(g_one), b = _mm256_set1_ps(g_zero);
  __m256 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm256_set1_ps(1.f);
  for (std::int64_t k = 0; k < n; ++k)
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  alignas(32) float lanes[8];
  float s = 0.f;
  for (int i = 0; i < N; ++i) {
    _mm256_store_ps(lanes, acc[i]);
    for (float x : lanes) s += x;
  }
  return s;
}

__attribute__((target("avx512f,fma"))) float chains_avx512(std::int64_t n) {
  constexpr int N = 24;
  const __m512 a = _mm512_set1_ps(g_one), b = _mm512_set1_ps(g_zero);
  __m512 acc[N];
  for (int i = 0; i < N; ++i) acc[i] = _mm512_set1_ps(1.f);
  for (std::int64_t k = 0; k < n; ++k)
#pragma GCC unroll 32
    for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  alignas(64) float lanes[16];
  float s = 0.f;
  for (int i = 0; i < N; ++i) {
    _mm512_store_ps(lanes, acc[i]);
    for (float x : lanes) s += x;
  }
  return s;
}
#endif

struct Loop {
  int accumulators, lanes;
  float (*run)(std::int64_t);
};

Loop loop_for(Isa isa) {
#if defined(__x86_64__)
  if (isa == Isa::Avx512) return {24, 16, chains_avx512};
  if (isa == Isa::Avx2) return {12, 8, chains_avx2};
#endif
  (void)isa;
  return {12, 1, chains_scalar<12>};
}

}  // namespace

FmaPeak measure_fma_peak(std::int64_t fmas_per_thread) {
  const Loop loop = loop_for(active_isa());
  const int threads = num_threads();
  const std::int64_t steps = std::max<std::int64_t>(fmas_per_thread / loop.accumulators, 1);
  std::vector<float> sums(static_cast<std::size_t>(threads), 0.f);
  const auto t0 = std::chrono::steady_clock::now();
  parallel_for(0, threads, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) sums[static_cast<std::size_t>(t)] = loop.run(steps);
  });
  const auto t1 = std::chrono::steady_clock::now();
  FmaPeak r;
  r.threads = threads;
  r.seconds = std::chrono::duration<double>(t1 - t0).count();
  r.fmas = steps * loop.accumulators;
  r.lanes = loop.lanes;
  for (float s : sums) r.checksum += s;
  r.gflops = 2.0 * static_cast<double>(r.fmas) * loop.lanes * threads / std::max(r.seconds, 1e-9) / 1e9;
  return r;
}

FmaPeak fma_peak(double seconds) {
  // Calibrate with ~10 ms of work, then size the timed run.
  std::int64_t n = 1 << 20;
  FmaPeak probe = measure_fma_peak(n);
  while (probe.seconds < 0.01 && n < (std::int64_t{1} << 40)) {
    n *= 4;
    probe = measure_fma_peak(n);
  }
  const double rate = static_cast<double>(probe.fmas) / std::max(probe.seconds, 1e-9);
  return measure_fma_peak(std::max<std::int64_t>(static_cast<std::int64_t>(rate * seconds), 1));
}

ReadBandwidth measure_read_bandwidth(std::int64_t bytes, int passes) {
  const std::int64_t n = std::max<std::int64_t>(bytes / 4 / 64 * 64, 64);
  float* buf = static_cast<float*>(aligned_alloc_bytes(static_cast<std::size_t>(n) * 4, "read bandwidth buffer"));
  ReadBandwidth r;
  r.threads = num_threads();
  r.bytes = n * 4;
  // First touch by the workers that read it later (their own pages, their own node).
  parallel_for(0, n / 64, 1, [&](std::int64_t b, std::int64_t e) { std::fill(buf + b * 64, buf + e * 64, 1.0f); });
  double best = 0;
  for (int p = 0; p < std::max(passes, 1); ++p) {
    std::vector<double> part(static_cast<std::size_t>(r.threads), 0.0);
    const auto t0 = std::chrono::steady_clock::now();
    parallel_for(0, n / 64, 1, [&](std::int64_t b, std::int64_t e) {
      // 8 independent sums of 8 lanes: loads, not the adds' latency, limit the loop.
      float acc[64] = {};
      for (std::int64_t i = b * 64; i < e * 64; i += 64)
#pragma omp simd
        for (int j = 0; j < 64; ++j) acc[j] += buf[i + j];
      double s = 0;
      for (float a : acc) s += a;
      part[static_cast<std::size_t>(thread_index())] += s;
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double sum = 0;
    for (double x : part) sum += x;
    r.sum = sum;
    best = std::max(best, static_cast<double>(r.bytes) / sec / 1e9);
  }
  r.gbs = best;
  aligned_free(buf);
  return r;
}

}  // namespace qkv::kernels
