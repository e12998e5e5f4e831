// Dropout masks (kernels/dropout.h): every ISA path is bitwise the scalar definition
// uniform_at(seed, c) < p, over awkward lengths, offsets and probabilities; the drop rate
// is p; p = 0 drops nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/kernels/cpu.h"
#include "qkv/kernels/dropout.h"

namespace {

using qkv::kernels::Isa;

struct IsaGuard {
  ~IsaGuard() { qkv::kernels::set_isa(Isa::Avx512); }
};

TEST(DropoutMask, EveryPathMatchesTheScalarDefinition) {
  IsaGuard ig;
  const double ps[] = {0.0, 1e-9, 0.1, 0.5, 0.9, 0.999999};
  const std::int64_t lens[] = {0, 1, 3, 4, 5, 7, 8, 9, 31, 100, 1027};
  const std::uint64_t offsets[] = {0, 1, 3, 0xFFFFFFFFull, 0xFFFFFFFFFFFFFFF0ull, 123456789012345ull};
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
              const bool want_drop = qkv::uniform_at(seed, c0 + static_cast<std::uint64_t>(i)) < p;
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

}  // namespace
