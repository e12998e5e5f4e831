// The FP32 fused multiply-add throughput of this machine, now: the "peak" that
// benchmark reports divide by ("attention reaches 70% of peak"). On a shared
// machine the peak moves with the load, so a percentage is only honest when
// the peak is measured in the same run as the kernel (bench/compare_pytorch.py
// interleaves `qkv bench peak` with every shape).
#pragma once
#include <cstdint>

namespace qkv::kernels {

struct FmaPeak {
  double gflops = 0.0;     // 2 FLOPs per lane per FMA, summed over the threads
  int threads = 1;         // workers that ran the loop
  double seconds = 0.0;    // wall time of the timed loop
  std::int64_t fmas = 0;   // vector FMAs issued per thread
  int lanes = 1;           // float lanes per FMA of the ISA used
  float checksum = 0.f;    // the accumulators' sum, so the loop cannot be elided
};

// Runs `fmas_per_thread` vector FMAs on each of num_threads() workers of
// parallel_for (all started together, timed together), with the active ISA's
// widest vectors and enough independent accumulators to cover the FMA latency
// of two pipes (AVX2: 12 of 16 registers; AVX-512: 24 of 32; scalar: 12).
// Every accumulator starts at 1 and is multiplied by 1 and added 0, so the
// checksum is exactly (accumulators x lanes x threads) whatever the count.
FmaPeak measure_fma_peak(std::int64_t fmas_per_thread);

// Calls measure_fma_peak with a count calibrated to run about `seconds`.
FmaPeak fma_peak(double seconds);

// Memory read bandwidth now: num_threads() workers each stream their share of a
// `bytes`-long buffer (much larger than the caches) with vector loads, `passes`
// times; the best pass counts. What generation at batch 1 is bounded by: every
// weight is read once per token.
struct ReadBandwidth {
  double gbs = 0.0;      // 1e9 bytes per second, best pass
  int threads = 1;
  std::int64_t bytes = 0;
  double sum = 0.0;      // of the buffer's floats (all 1), so the loop cannot be elided: bytes / 4 per pass
};
ReadBandwidth measure_read_bandwidth(std::int64_t bytes, int passes);

}  // namespace qkv::kernels
