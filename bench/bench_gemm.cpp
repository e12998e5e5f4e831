// qkv sgemm next to OpenBLAS cblas_sgemm, same shapes, same inputs, one binary.
// Shapes are M x N x K (C[M,N] = op(A)[M,K] @ op(B)[K,N], row-major), each in
// the four transpose combinations; the GFLOPS counter is 2*M*N*K per second / 1e9.
// Threads come from the environment so both libraries get the same count:
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=N QKV_NUM_THREADS=N
//       ./bench_gemm --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
#include <benchmark/benchmark.h>

#include <array>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/storage.h"
#include "qkv/kernels/activation.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/gemm.h"

#ifdef QKV_BENCH_HAVE_CBLAS
#include <cblas.h>
#endif

namespace {

using i64 = std::int64_t;

struct Buf {
  float* p;
  explicit Buf(i64 n) : p(static_cast<float*>(qkv::aligned_alloc_bytes(static_cast<std::size_t>(n) * 4, "bench"))) {
    std::mt19937 rng(static_cast<unsigned>(n));
    std::uniform_real_distribution<float> u(-1, 1);
    for (i64 i = 0; i < n; ++i) p[i] = u(rng);
  }
  ~Buf() { qkv::aligned_free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

enum class Lib { Qkv, OpenBlas };

// GFLOPS (2MNK per second / 1e9) and the thread count.
void set_counters(benchmark::State& state, i64 M, i64 N, i64 K) {
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) / 1e9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = qkv::num_threads();
}

void run(benchmark::State& state, Lib lib, bool ta, bool tb, i64 M, i64 N, i64 K) {
  Buf A(M * K), B(K * N), C(M * N);
  const i64 lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
  for (auto _ : state) {
    if (lib == Lib::Qkv) {
      qkv::kernels::sgemm(ta, tb, M, N, K, 1.0f, A.p, lda, B.p, ldb, 0.0f, C.p, ldc);
    } else {
#ifdef QKV_BENCH_HAVE_CBLAS
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(M),
                  static_cast<int>(N), static_cast<int>(K), 1.0f, A.p, static_cast<int>(lda), B.p,
                  static_cast<int>(ldb), 0.0f, C.p, static_cast<int>(ldc));
#endif
    }
    benchmark::DoNotOptimize(C.p);
    benchmark::ClobberMemory();
  }
  set_counters(state, M, N, K);
}

// The Linear layers of all-MiniLM-L6-v2 inference (x [M, in] @ W^T, W stored [out, in]): plain
// sgemm then the separate bias (+ GELU) pass, sgemm_ex with the epilogue, and sgemm_packed (the
// weight packed once) with the epilogue. M = 34: one sentence; M = 640: a batch of 32.
enum class Fused { Unfused, Epilogue, Packed };
void run_inference(benchmark::State& state, Fused mode, i64 M, i64 N, i64 K, bool gelu) {
  Buf A(M * K), W(N * K), C(M * N), bias(N);
  // Products of unit-variance size, as a trained layer's (uniform [-1, 1] everywhere would give
  // |x| ~ 6.5 and GELU tails deep in the denormals).
  const float w_scale = std::sqrt(3.0f / static_cast<float>(K));
  for (i64 i = 0; i < N * K; ++i) W.p[i] *= w_scale;
  qkv::kernels::GemmEpilogue e;
  e.bias = bias.p;
  e.act = gelu ? qkv::kernels::GemmAct::GeluErf : qkv::kernels::GemmAct::None;
  const qkv::kernels::PackedB packed = qkv::kernels::PackedB::pack(true, K, N, W.p, K);
  for (auto _ : state) {
    if (mode == Fused::Unfused) {
      qkv::kernels::sgemm(false, true, M, N, K, 1.0f, A.p, K, W.p, K, 0.0f, C.p, N);
      for (i64 i = 0; i < M; ++i) {
        float* row = C.p + i * N;
        for (i64 j = 0; j < N; ++j) row[j] += bias.p[j];
        if (gelu) qkv::kernels::gelu_forward_f32(row, row, N, qkv::kernels::GeluForm::Erf);
      }
    } else if (mode == Fused::Epilogue) {
      qkv::kernels::sgemm_ex(false, true, M, N, K, 1.0f, A.p, K, W.p, K, 0.0f, C.p, N, e);
    } else {
      qkv::kernels::sgemm_packed(M, A.p, K, packed, C.p, N, e);
    }
    benchmark::DoNotOptimize(C.p);
    benchmark::ClobberMemory();
  }
  set_counters(state, M, N, K);
}

void register_all() {
  for (i64 M : {34, 640})
    for (const auto& s : {std::array<i64, 3>{1152, 384, 0}, std::array<i64, 3>{384, 384, 0},
                          std::array<i64, 3>{1536, 384, 1}, std::array<i64, 3>{384, 1536, 0}})
      for (Fused mode : {Fused::Unfused, Fused::Epilogue, Fused::Packed}) {
        const char* mname = mode == Fused::Unfused ? "unfused" : mode == Fused::Epilogue ? "epilogue" : "packed";
        const std::string name = std::string("minilm_linear/") + mname + "/" + std::to_string(M) + "x" +
                                 std::to_string(s[0]) + "x" + std::to_string(s[1]) + (s[2] ? "+gelu" : "");
        const i64 N = s[0], K = s[1];
        const bool gelu = s[2] != 0;
        benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run_inference(st, mode, M, N, K, gelu); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
  const i64 main_shapes[][3] = {{1024, 1024, 1024}, {512, 64, 512}, {2048, 512, 512}};
  const i64 small_shapes[][3] = {{1600, 16, 16}, {16, 16, 1600}, {64, 64, 64}, {256, 64, 64}};
  std::vector<Lib> libs = {Lib::Qkv};
#ifdef QKV_BENCH_HAVE_CBLAS
  libs.push_back(Lib::OpenBlas);
#endif
  auto add = [&](const i64* s, int t) {
    const bool ta = t & 1, tb = t & 2;
    for (Lib lib : libs) {
      const std::string name = std::string(lib == Lib::Qkv ? "qkv_sgemm" : "openblas_sgemm") + "/" +
                               (ta ? "T" : "N") + (tb ? "T" : "N") + "/" + std::to_string(s[0]) + "x" +
                               std::to_string(s[1]) + "x" + std::to_string(s[2]);
      const i64 M = s[0], N = s[1], K = s[2];
      benchmark::RegisterBenchmark(name.c_str(), [=](benchmark::State& st) { run(st, lib, ta, tb, M, N, K); })
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  };
  for (const auto& s : main_shapes)
    for (int t = 0; t < 4; ++t) add(s, t);
  for (const auto& s : small_shapes) add(s, 0);
  // The products of one training step of issue 12's GPT (batch 16 x context 256 = 4096
  // tokens, d_model 256, MLP 1024, vocabulary 4096): forward X @ W^T (NT), input gradient
  // dY @ W (NN), weight gradient dY^T @ X (TN).
  const i64 train_nt[][3] = {{4096, 768, 256}, {4096, 256, 256}, {4096, 1024, 256}, {4096, 256, 1024}, {4096, 4096, 256}};
  const i64 train_nn[][3] = {{4096, 256, 768}, {4096, 256, 1024}, {4096, 1024, 256}, {4096, 256, 4096}};
  const i64 train_tn[][3] = {{768, 256, 4096}, {256, 256, 4096}, {1024, 256, 4096}, {256, 1024, 4096}, {4096, 256, 4096}};
  for (const auto& s : train_nt) add(s, 2);
  for (const auto& s : train_nn) add(s, 0);
  for (const auto& s : train_tn) add(s, 1);
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::AddCustomContext("qkv_isa", qkv::kernels::isa_name(qkv::kernels::active_isa()));
  benchmark::AddCustomContext("qkv_threads", std::to_string(qkv::num_threads()));
  if (const char* e = std::getenv("OPENBLAS_NUM_THREADS")) benchmark::AddCustomContext("openblas_threads", e);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
