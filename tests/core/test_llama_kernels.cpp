// The Llama family's row kernels against their naive twins: RMSNorm forward and backward
// (kernels/rms_norm.h, the backward also against finite differences), RoPE in both pair
// styles with partial rotary and its inverse (kernels/rope.h), the rope_scaling rules, and
// SwiGLU (kernels/swiglu.h) including its limits at infinities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <vector>

#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/kernels/rms_norm.h"
#include "qkv/kernels/rope.h"
#include "qkv/kernels/swiglu.h"
#include "testing/guards.h"

namespace {

using qkv::kernels::RopeScaling;
using qkv::kernels::RopeStyle;

std::vector<float> randn(qkv::Generator& g, std::size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * g.normal());
  return v;
}

TEST(RmsNormKernel, MatchesTheFloat64TwinOverAwkwardRows) {
  qkv::Generator g(1);
  for (std::int64_t n : {1, 3, 8, 17, 64, 576, 1023}) {
    const std::int64_t rows = 5;
    std::vector<float> x = randn(g, static_cast<std::size_t>(rows * n), 3.0), w = randn(g, static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(n + i)] = 1e4f + static_cast<float>(i % 7);  // far from 0
    for (std::int64_t i = 0; i < n; ++i) x[static_cast<std::size_t>(2 * n + i)] = 0.0f;  // all zero: y = 0
    std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()), yd(x.size());
    qkv::kernels::rms_norm_rows_ref<double>(yd.data(), nullptr, xd.data(), wd.data(), rows, n, 1e-5);
    for (const float* wp : {static_cast<const float*>(w.data()), static_cast<const float*>(nullptr)}) {
      std::vector<double> ref = yd;
      if (!wp) qkv::kernels::rms_norm_rows_ref<double>(ref.data(), nullptr, xd.data(), nullptr, rows, n, 1e-5);
      std::vector<float> y(x.size());
      std::vector<double> rstd(static_cast<std::size_t>(rows));
      qkv::kernels::rms_norm_rows_f32(y.data(), n, rstd.data(), x.data(), n, wp, rows, n, 1e-5);
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], ref[i], 4e-7 * std::abs(ref[i]) + 1e-30) << "n " << n << " element " << i;
      EXPECT_EQ(y[static_cast<std::size_t>(2 * n)], 0.0f);
    }
    // In place (y == x), with row strides.
    std::vector<float> inplace = x, y(x.size());
    qkv::kernels::rms_norm_rows_f32(y.data(), n, nullptr, x.data(), n, w.data(), rows, n, 1e-5);
    qkv::kernels::rms_norm_rows_f32(inplace.data(), n, nullptr, inplace.data(), n, w.data(), rows, n, 1e-5);
    EXPECT_EQ(y, inplace);
  }
}

TEST(RmsNormKernel, BackwardMatchesFiniteDifferences) {
  qkv::Generator g(2);
  const std::int64_t rows = 3, n = 7;
  std::vector<double> x(rows * n), w(n), gy(rows * n);
  for (double& v : x) v = g.normal();
  for (double& v : w) v = 1 + 0.3 * g.normal();
  for (double& v : gy) v = g.normal();
  auto loss = [&](const std::vector<double>& xs, const std::vector<double>& ws) {
    std::vector<double> y(xs.size());
    qkv::kernels::rms_norm_rows_ref<double>(y.data(), nullptr, xs.data(), ws.data(), rows, n, 1e-5);
    double s = 0;
    for (std::size_t i = 0; i < y.size(); ++i) s += y[i] * gy[i];
    return s;
  };
  std::vector<double> y(x.size()), rstd(rows), dx(x.size()), dw(n, 0.0);
  qkv::kernels::rms_norm_rows_ref<double>(y.data(), rstd.data(), x.data(), w.data(), rows, n, 1e-5);
  qkv::kernels::rms_norm_backward_rows<double>(dx.data(), dw.data(), gy.data(), x.data(), w.data(), rstd.data(), rows, n);
  const double eps = 1e-6;
  for (std::size_t i = 0; i < x.size(); ++i) {
    auto xp = x, xm = x;
    xp[i] += eps;
    xm[i] -= eps;
    const double fd = (loss(xp, w) - loss(xm, w)) / (2 * eps);
    EXPECT_NEAR(dx[i], fd, 1e-5 + 1e-3 * std::abs(fd)) << "dx " << i;
  }
  for (std::size_t i = 0; i < w.size(); ++i) {
    auto wp = w, wm = w;
    wp[i] += eps;
    wm[i] -= eps;
    const double fd = (loss(x, wp) - loss(x, wm)) / (2 * eps);
    EXPECT_NEAR(dw[i], fd, 1e-5 + 1e-3 * std::abs(fd)) << "dw " << i;
  }
}

TEST(RopeKernel, DefaultFrequenciesAreBasePowers) {
  const std::vector<float> inv = qkv::kernels::rope_inv_freq(64, 100000.0, {});
  ASSERT_EQ(inv.size(), 32u);
  EXPECT_EQ(inv[0], 1.0f);
  for (std::size_t i = 0; i < inv.size(); ++i)
    EXPECT_NEAR(inv[i], std::pow(100000.0, -2.0 * static_cast<double>(i) / 64.0), 2e-7 * inv[i]) << i;
}

TEST(RopeKernel, LinearAndLlama3Scaling) {
  const std::vector<float> base = qkv::kernels::rope_inv_freq(128, 500000.0, {});
  const std::vector<float> lin =
      qkv::kernels::rope_inv_freq(128, 500000.0, {.type = RopeScaling::Type::Linear, .factor = 4.0});
  for (std::size_t i = 0; i < base.size(); ++i) EXPECT_EQ(lin[i], base[i] / 4.0f);
  const RopeScaling l3{.type = RopeScaling::Type::Llama3, .factor = 8, .low_freq_factor = 1, .high_freq_factor = 4,
                       .original_max_positions = 8192};
  const std::vector<float> s = qkv::kernels::rope_inv_freq(128, 500000.0, l3);
  int low = 0, high = 0, medium = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / base[i];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(s[i], base[i]);  // high frequencies unchanged
      ++high;
    } else if (wavelen > 8192.0) {
      EXPECT_EQ(s[i], base[i] / 8.0f);  // low frequencies divided by the factor
      ++low;
    } else {
      EXPECT_GT(s[i], base[i] / 8.0f);  // smoothly in between
      EXPECT_LT(s[i], base[i]);
      ++medium;
    }
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(high, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeKernel, BadSettingsAreNamed) {
  auto msg = [](auto f) {
    try {
      f();
    } catch (const qkv::ValueError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg([] { qkv::kernels::rope_inv_freq(63, 1e4, {}); }).find("must be even"), std::string::npos);
  EXPECT_NE(msg([] { qkv::kernels::rope_inv_freq(64, std::nan(""), {}); }).find("rope_theta"), std::string::npos);
  EXPECT_NE(msg([] {
              qkv::kernels::rope_inv_freq(64, 1e4, {.type = RopeScaling::Type::Linear, .factor = 0});
            }).find("linear rope_scaling factor"),
            std::string::npos);
  EXPECT_NE(msg([] {
              qkv::kernels::rope_inv_freq(64, 1e4, {.type = RopeScaling::Type::Llama3, .factor = 8,
                                                    .low_freq_factor = 4, .high_freq_factor = 1});
            }).find("high_freq_factor > low_freq_factor"),
            std::string::npos);
}

TEST(RopeKernel, ApplyMatchesTheTwinInBothStylesAndInverts) {
  qkv::Generator g(3);
  for (RopeStyle style : {RopeStyle::Half, RopeStyle::Interleaved})
    for (std::int64_t D : {2, 8, 64, 96})
      for (std::int64_t R : {D, D / 2 - (D / 2) % 2}) {
        if (R < 2) continue;
        const std::int64_t T = 5, heads = 3, ld = heads * D + 4;  // a row stride past the heads
        const std::vector<float> inv = qkv::kernels::rope_inv_freq(R, 10000.0, {});
        const std::vector<std::int64_t> pos = {0, 1, 7, 100, 4095};
        std::vector<float> x = randn(g, static_cast<std::size_t>(T * ld)), y = x;
        std::vector<double> ref(x.begin(), x.end());
        std::vector<float> c(static_cast<std::size_t>(T * R / 2)), s(c.size());
        qkv::kernels::rope_tables(c.data(), s.data(), pos.data(), T, inv.data(), R / 2);
        qkv::kernels::rope_apply_f32(y.data(), T, heads, D, ld, R, c.data(), s.data(), style);
        qkv::kernels::rope_apply_ref<double>(ref.data(), T, heads, D, ld, R, pos.data(), inv.data(), style);
        float maxabs = 0;
        for (float v : x) maxabs = std::max(maxabs, std::abs(v));
        for (std::size_t i = 0; i < y.size(); ++i) {
          // The float kernel rounds pos * inv_freq to float first (as transformers): the angle
          // moves by up to half an ulp of pos (pos * 2^-24 rad), the pair's values by that much
          // of their norm (<= 2 maxabs); plus a few float roundings.
          const double p = static_cast<double>(pos[i / static_cast<std::size_t>(ld)]);
          const double tol = 1e-6 + (p * 6e-8 + 3e-7) * 2 * maxabs;
          ASSERT_NEAR(y[i], ref[i], tol) << "style " << static_cast<int>(style) << " D " << D << " R " << R << " i " << i;
        }
        // Position 0 is the identity; dims past R and past the heads are untouched.
        for (std::int64_t j = 0; j < heads * D; ++j) EXPECT_EQ(y[static_cast<std::size_t>(j)], x[static_cast<std::size_t>(j)]);
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t h = 0; h < heads; ++h)
            for (std::int64_t j = R; j < D; ++j) {
              const auto k = static_cast<std::size_t>(t * ld + h * D + j);
              EXPECT_EQ(y[k], x[k]);
            }
        qkv::kernels::rope_apply_f32(y.data(), T, heads, D, ld, R, c.data(), s.data(), style, /*inverse=*/true);
        for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5 * (1 + std::abs(x[i])));
      }
}

TEST(RopeKernel, InterleavedOnPermutedRowsGivesTheSameScores) {
  // llama.cpp's converter permutes each head's rows (i, i + D/2) -> (2i, 2i + 1); rotating
  // adjacent pairs of the permuted vectors must give the dot products of rotate_half.
  qkv::Generator g(4);
  const std::int64_t D = 16;
  const std::vector<float> inv = qkv::kernels::rope_inv_freq(D, 10000.0, {});
  std::vector<float> q = randn(g, D), k = randn(g, D), qp(D), kp(D);
  for (std::int64_t i = 0; i < D / 2; ++i) {
    qp[static_cast<std::size_t>(2 * i)] = q[static_cast<std::size_t>(i)];
    qp[static_cast<std::size_t>(2 * i + 1)] = q[static_cast<std::size_t>(i + D / 2)];
    kp[static_cast<std::size_t>(2 * i)] = k[static_cast<std::size_t>(i)];
    kp[static_cast<std::size_t>(2 * i + 1)] = k[static_cast<std::size_t>(i + D / 2)];
  }
  const std::int64_t pq = 37, pk = 5;
  std::vector<float> cq(D / 2), sq(D / 2), ck(D / 2), sk(D / 2);
  qkv::kernels::rope_tables(cq.data(), sq.data(), &pq, 1, inv.data(), D / 2);
  qkv::kernels::rope_tables(ck.data(), sk.data(), &pk, 1, inv.data(), D / 2);
  qkv::kernels::rope_apply_f32(q.data(), 1, 1, D, D, D, cq.data(), sq.data(), RopeStyle::Half);
  qkv::kernels::rope_apply_f32(k.data(), 1, 1, D, D, D, ck.data(), sk.data(), RopeStyle::Half);
  qkv::kernels::rope_apply_f32(qp.data(), 1, 1, D, D, D, cq.data(), sq.data(), RopeStyle::Interleaved);
  qkv::kernels::rope_apply_f32(kp.data(), 1, 1, D, D, D, ck.data(), sk.data(), RopeStyle::Interleaved);
  double a = 0, b = 0;
  for (std::int64_t i = 0; i < D; ++i) {
    a += static_cast<double>(q[static_cast<std::size_t>(i)]) * k[static_cast<std::size_t>(i)];
    b += static_cast<double>(qp[static_cast<std::size_t>(i)]) * kp[static_cast<std::size_t>(i)];
  }
  EXPECT_NEAR(a, b, 1e-5);
}

TEST(SwigluKernel, MatchesTheTwinAndTheLimits) {
  qkv::Generator g(5);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> gv = randn(g, 1000, 4.0), uv = randn(g, 1000);
  gv[0] = inf;
  gv[1] = -inf;
  gv[2] = std::nanf("");
  gv[3] = 0.0f;
  gv[4] = -100.0f;
  gv[5] = 100.0f;
  for (int v = 0; v < 200; ++v) gv.push_back(-88.0f + 0.9f * static_cast<float>(v)), uv.push_back(1.0f);  // exp's range
  gv.push_back(-87.5f), uv.push_back(1.0f);  // exp(87.5): near float's largest
  std::vector<float> yr(gv.size());
  qkv::kernels::swiglu_forward_ref<float>(yr.data(), gv.data(), uv.data(), static_cast<std::int64_t>(gv.size()));
  const qkv::testing::IsaGuard guard;
  for (const qkv::kernels::Isa isa : {qkv::kernels::Isa::Scalar, qkv::kernels::Isa::Avx2, qkv::kernels::Isa::Avx512}) {
    if (static_cast<int>(isa) > static_cast<int>(qkv::kernels::detected_isa())) continue;
    qkv::kernels::set_isa(isa);
    SCOPED_TRACE(qkv::kernels::isa_name(isa));
    const std::int64_t n = static_cast<std::int64_t>(gv.size());
    std::vector<float> y(gv.size());
    qkv::kernels::swiglu_forward_f32(y.data(), gv.data(), uv.data(), n);
    EXPECT_EQ(y[0], inf * uv[0]);
    EXPECT_EQ(y[1], 0.0f);
    EXPECT_TRUE(std::isnan(y[2]));
    EXPECT_EQ(y[3], 0.0f);
    for (std::size_t i = 3; i < y.size(); ++i) ASSERT_NEAR(y[i], yr[i], 4e-7 * std::abs(yr[i]) + 1e-38) << i << " g=" << gv[i];
    // Any split of the array gives the same bits (vector tails take the vector arithmetic).
    std::vector<float> z(gv.size());
    for (std::int64_t a = 0; a < n;) {
      const std::int64_t b = std::min<std::int64_t>(n, a + 1 + (a * 7) % 23);
      qkv::kernels::swiglu_forward_f32(z.data() + a, gv.data() + a, uv.data() + a, b - a);
      a = b;
    }
    ASSERT_EQ(std::memcmp(y.data(), z.data(), y.size() * sizeof(float)), 0);
    // In place (y = g).
    std::vector<float> w = gv;
    qkv::kernels::swiglu_forward_f32(w.data(), w.data(), uv.data(), n);
    ASSERT_EQ(std::memcmp(y.data(), w.data(), y.size() * sizeof(float)), 0);
  }
}

TEST(SwigluKernel, BackwardMatchesFiniteDifferences) {
  qkv::Generator g(6);
  const std::int64_t n = 50;
  std::vector<double> gv(n), uv(n), dy(n), dg(n), du(n);
  for (std::int64_t i = 0; i < n; ++i) {
    gv[static_cast<std::size_t>(i)] = 3 * g.normal();
    uv[static_cast<std::size_t>(i)] = g.normal();
    dy[static_cast<std::size_t>(i)] = g.normal();
  }
  qkv::kernels::swiglu_backward_ref<double>(dg.data(), du.data(), dy.data(), gv.data(), uv.data(), n);
  const double eps = 1e-6;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    double yp = 0, ym = 0, gp = gv[k] + eps, gm = gv[k] - eps;
    qkv::kernels::swiglu_forward_ref<double>(&yp, &gp, &uv[k], 1);
    qkv::kernels::swiglu_forward_ref<double>(&ym, &gm, &uv[k], 1);
    EXPECT_NEAR(dg[k], dy[k] * (yp - ym) / (2 * eps), 1e-5 + 1e-3 * std::abs(dg[k]));
    double y0 = 0;
    qkv::kernels::swiglu_forward_ref<double>(&y0, &gv[k], &uv[k], 1);
    EXPECT_NEAR(du[k], dy[k] * y0 / uv[k], 1e-9 * (1 + std::abs(du[k])));
  }
}

}  // namespace
