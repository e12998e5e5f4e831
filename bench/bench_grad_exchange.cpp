// The gradient exchange of data-parallel training alone, without the compute it overlaps:
// the time of one step's exchange (all-to-all of the shards, the fold, the all-gather, the
// losses) for the parameters of a GPT-2 of the given size, on every rank of the job.
//
//   mpirun -np 2 build/bench/bench_grad_exchange --layers 3 --d-model 64 --vocab 1024 --context 64
//
// Prints (rank 0) the parameter bytes, the bytes each rank sends per step and the median,
// min and max time of an exchange over --steps steps (after --warmup), each started together
// (a barrier before it). docs/distributed.md reports the figures.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qkv/models/gpt2.h"
#include "qkv/train/distributed.h"
#include "train/grad_exchange.h"

int main(int argc, char** argv) {
  using namespace qkv;
  models::GPT2Config cfg;
  cfg.n_layer = 3;
  cfg.n_embd = 64;
  cfg.n_head = 4;
  cfg.vocab_size = 1024;
  cfg.n_positions = 64;
  int steps = 50, warmup = 5;
  std::int64_t bucket_kib = 0;  // 0: the default for the rank count
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long long v = std::atoll(argv[i + 1]);
    if (a == "--layers") cfg.n_layer = v;
    else if (a == "--d-model") cfg.n_embd = v;
    else if (a == "--heads") cfg.n_head = v;
    else if (a == "--vocab") cfg.vocab_size = v;
    else if (a == "--context") cfg.n_positions = v;
    else if (a == "--steps") steps = static_cast<int>(v);
    else if (a == "--warmup") warmup = static_cast<int>(v);
    else if (a == "--bucket-kib") bucket_kib = v;
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    train::World& w = train::start_distributed({.collective_timeout_s = 60, .bucket_bytes = bucket_kib * 1024});
    const models::GPT2LMHeadModel model(cfg);
    const std::vector<Tensor> params = model.parameters();
    train::detail::GradExchange ex(params, w.comm(), w.size(), w.bucket_bytes(), w.options().overlap);
    std::vector<Tensor> grads;
    for (const Tensor& p : params) grads.push_back(Tensor::full(p.shape(), 1e-3 * (w.rank() + 1)));
    std::vector<double> ms;
    for (int s = 0; s < warmup + steps; ++s) {
      w.barrier("the start of a step");
      const auto t0 = std::chrono::steady_clock::now();
      ex.begin_step(s);
      ex.begin_micro(0);
      const autograd::LeafReadyHook hook = ex.hook();
      for (std::size_t i = params.size(); i-- > 0;) {
        params[i].set_grad(grads[i]);
        hook(params[i].impl_ptr());
      }
      ex.end_micro();
      ex.finish({1.0});
      if (s >= warmup) ms.push_back(1e3 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    if (w.root())
      std::printf("ranks %d, parameters %lld (%.3f MB), buckets %lld, sent per rank per step %.3f MB: exchange "
                  "median %.3f ms (min %.3f, max %.3f) over %d steps, %.2f GB/s sent per rank\n",
                  w.size(), static_cast<long long>(ex.parameter_bytes() / 4), ex.parameter_bytes() / 1e6,
                  static_cast<long long>(ex.buckets()), ex.bytes_sent_per_step() / 1e6, ms[ms.size() / 2], ms.front(),
                  ms.back(), steps, ex.bytes_sent_per_step() / 1e6 / ms[ms.size() / 2]);
    train::stop_distributed();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grad_exchange: %s\n", e.what());
    train::abort_distributed(1);
    return 1;
  }
  return 0;
}
