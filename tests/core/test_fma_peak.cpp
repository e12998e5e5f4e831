// The FMA peak loop behind `qkv bench peak`: it must issue exactly the FMAs it
// counts (the checksum of its multiply-by-one chains is exact) on every
// thread, with every ISA this CPU has, since reports divide by its GFLOP/s.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/peak.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::Isa;

using qkv::testing::IsaGuard;
using qkv::testing::ThreadsGuard;

TEST(FmaPeak, CountsAndChecksumForEveryIsaAndThreadCount) {
  IsaGuard guard;
  std::vector<std::pair<Isa, int>> isas{{Isa::Scalar, 1}};  // ISA, lanes
  if (qkv::kernels::detected_isa() >= Isa::Avx2) isas.emplace_back(Isa::Avx2, 8);
  if (qkv::kernels::detected_isa() >= Isa::Avx512) isas.emplace_back(Isa::Avx512, 16);
  ThreadsGuard threads_guard;
  for (const auto& [isa, lanes] : isas) {
    qkv::kernels::set_isa(isa);
    const int accumulators = isa == Isa::Avx512 ? 24 : 12;
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(std::string(qkv::kernels::isa_name(isa)) + " threads " + std::to_string(threads));
      qkv::set_num_threads(threads);
      const qkv::kernels::FmaPeak r = qkv::kernels::measure_fma_peak(24 * 1000 + 5);
      EXPECT_EQ(r.threads, threads);
      EXPECT_EQ(r.lanes, lanes);
      EXPECT_EQ(r.fmas, (24 * 1000 + 5) / accumulators * accumulators);  // whole steps of all chains
      EXPECT_EQ(r.checksum, static_cast<float>(accumulators * lanes * threads));
      EXPECT_GT(r.seconds, 0.0);
      EXPECT_TRUE(std::isfinite(r.gflops) && r.gflops > 0.0);
    }
  }
}

TEST(FmaPeak, CalibratedRunLastsAboutTheTimeAsked) {
  const qkv::kernels::FmaPeak r = qkv::kernels::fma_peak(0.05);
  EXPECT_GT(r.seconds, 0.01);
  EXPECT_LT(r.seconds, 2.0);  // generous: a shared machine may stall a run
  EXPECT_GT(r.gflops, 0.1);
}


TEST(ReadBandwidth, ReadsEveryFloatOncePerPassOnEveryThreadCount) {
  qkv::testing::ThreadsGuard tg;
  for (int threads : {1, 2, 3}) {
    qkv::set_num_threads(threads);
    const qkv::kernels::ReadBandwidth r = qkv::kernels::measure_read_bandwidth(4 * 1000 * 1000 + 13, 2);
    EXPECT_EQ(r.threads, threads);
    EXPECT_EQ(r.bytes % 256, 0);
    EXPECT_EQ(r.sum, static_cast<double>(r.bytes / 4)) << "every float (all 1) summed once";
    EXPECT_GT(r.gbs, 0.0);
  }
}

}  // namespace
