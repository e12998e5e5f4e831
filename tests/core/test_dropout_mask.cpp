// Dropout masks (kernels/dropout.h): every ISA path is bitwise the scalar definition
// dropout_bits(seed, c) < ceil(p 2^32), over awkward lengths, offsets (also across the 2^32
// boundaries where the key changes) and probabilities; the drop rate is p; p = 0 drops nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/dropout.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::Isa;

using qkv::testing::IsaGuard;

TEST(DropoutMask, EveryPathMatchesTheScalarDefinition) {
  IsaGuard ig;
  const double ps[] = {0.0, 1e-9, 0.1, 0.5, 0.9, 0.999999, 1 - 0x1.0p-40};
  const std::int64_t lens[] = {0, 1, 3, 4, 5, 7, 8, 9, 31, 100, 1027};
  const std::uint64_t offsets[] = {0, 1, 3, 0xFFFFFFFFull, 0xFFFFFFF9ull, 0x1FFFFFFFCull, 0xFFFFFFFFFFFFFFF0ull, 123456789012345ull};
  std::vector<Isa> isas{Isa::Scalar};
  if (qkv::kernels::detected_isa() >= Isa::Avx2) isas.push_back(Isa::Avx2);
  int checked = 0, dropped_any = 0;
  for (Isa isa : isas) {
    qkv::kernels::set_isa(isa);
    for (double p : ps)
      for (std::int64_t n : lens)
        for (std::uint64_t c0 : offsets)
          for (std::uint64_t seed : {0ull, 42ull, 0xDEADBEEFCAFEF00Dull}) {
            const std::uint64_t thr = qkv::kernels::dropout_threshold(p);
            std::vector<std::uint8_t> keep(static_cast<std::size_t>(n) + 1, 7);
            std::vector<float> mul(static_cast<std::size_t>(n) + 1, -1.f);
            qkv::kernels::dropout_keep_mask(keep.data(), seed, c0, n, thr);
            qkv::kernels::dropout_multipliers(mul.data(), seed, c0, n, thr, 2.5f);
            for (std::int64_t i = 0; i < n; ++i) {
              const std::uint64_t c = c0 + static_cast<std::uint64_t>(i);
              const bool want_drop = qkv::kernels::dropout_bits(seed, c) < std::ceil(p * 0x1.0p32);
              ASSERT_EQ(keep[i], want_drop ? 0 : 1) << qkv::kernels::isa_name(isa) << " p " << p << " i " << i;
              ASSERT_EQ(mul[i], want_drop ? 0.f : 2.5f) << qkv::kernels::isa_name(isa) << " p " << p << " i " << i;
              dropped_any += want_drop;
            }
            ASSERT_EQ(keep[n], 7) << "wrote past n";
            ASSERT_EQ(mul[n], -1.f) << "wrote past n";
            ++checked;
          }
  }
  EXPECT_GT(checked, 1000);
  EXPECT_GT(dropped_any, 1000);
}

TEST(DropoutMask, RateIsP) {
  const std::int64_t n = 1 << 20;
  std::vector<std::uint8_t> keep(n);
  for (double p : {0.0, 0.1, 0.5}) {
    qkv::kernels::dropout_keep_mask(keep.data(), 7, 1000, n, qkv::kernels::dropout_threshold(p));
    std::int64_t kept = 0;
    for (auto k : keep) kept += k;
    const double rate = 1.0 - static_cast<double>(kept) / n;
    if (p == 0.0) EXPECT_EQ(rate, 0.0);
    else EXPECT_NEAR(rate, p, 4e-3) << p;
  }
}

// Pairs of elements are independent: at p = 1/2 both of two neighbours (distance 1, 7, 8, 64:
// within and across vector lanes), or the same counter under two seeds, are dropped a quarter
// of the time; the mask is not periodic in the counter.
TEST(DropoutMask, PairsAreIndependent) {
  const std::int64_t n = 1 << 20;
  const std::uint64_t thr = qkv::kernels::dropout_threshold(0.5);
  std::vector<std::uint8_t> a(n), b(n);
  qkv::kernels::dropout_keep_mask(a.data(), 7, 1000, n, thr);
  qkv::kernels::dropout_keep_mask(b.data(), 8, 1000, n, thr);
  for (std::int64_t d : {1, 7, 8, 64, 4096}) {
    std::int64_t both = 0;
    for (std::int64_t i = 0; i + d < n; ++i) both += !a[i] && !a[i + d];
    EXPECT_NEAR(static_cast<double>(both) / static_cast<double>(n - d), 0.25, 3e-3) << "distance " << d;
  }
  std::int64_t both = 0, same = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    both += !a[i] && !b[i];
    same += a[i] == b[i];
  }
  EXPECT_NEAR(static_cast<double>(both) / n, 0.25, 3e-3) << "two seeds";
  EXPECT_NEAR(static_cast<double>(same) / n, 0.5, 3e-3) << "two seeds";
}

}  // namespace
