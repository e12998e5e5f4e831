// Shared by the attention kernel tests (test_attention.cpp, test_attention_gqa.cpp): a problem
// (sizes, masks, layout, grouped key/value heads, sliding window) filled with random data, the
// naive reference in float and float64, the fast kernels, and rule R1 (REFERENCES.md section 2)
// over every ISA and 1 / 2 threads.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/cpu.h"
#include "testing/guards.h"

namespace qkv_attention_test {

using qkv::kernels::AttnParams;
using qkv::kernels::Isa;
using qkv::kernels::AttnKernel;
using i64 = std::int64_t;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kSentinel = 12345.f;  // output gaps (between strided rows) must keep it

// ---------------------------------------------------------------------------------------------
// Problem set-up
// ---------------------------------------------------------------------------------------------
enum class Layout { BHLD, BLHD, Padded };  // contiguous; (B,L,H,D) transposed view; rows with gaps
enum class BiasKind { None, Full, PerKey, PerRowBroadcastHeads };

struct Spec {
  i64 B = 1, H = 1, Lq = 1, Lk = 1, D = 8, Dv = -1;  // Dv < 0: = D
  i64 H_kv = 0;     // key/value heads (GQA), 0: = H
  i64 window = 0;   // sliding window, 0: none
  bool causal = false;
  std::vector<i64> key_lengths;  // empty: none
  BiasKind bias = BiasKind::None;
  float bias_ninf_frac = 0.f;  // fraction of bias entries set to -inf
  float dropout = 0.f;
  std::uint64_t seed = 7;
  float input_scale = 1.f;  // |q.k| grows with its square
  Layout layout = Layout::BHLD;
  bool nan_padding = false;  // K/V rows at or beyond key_lengths are NaN
  float softcap = 0.f;       // soft-capped scores (forward only)
  bool sinks = false;        // attention sinks per query head (forward only)

  std::string str() const {
    std::ostringstream s;
    s << "B" << B << " H" << H << " H_kv" << kv_heads() << " Lq" << Lq << " Lk" << Lk << " D" << D << " Dv"
      << (Dv < 0 ? D : Dv) << (causal ? " causal" : "") << (window ? " window " + std::to_string(window) : "")
      << (key_lengths.empty() ? "" : " key_lengths") << " bias" << int(bias)
      << " p" << dropout << " layout" << int(layout) << (softcap > 0 ? " softcap" : "") << (sinks ? " sinks" : "");
    return s.str();
  }
  i64 kv_heads() const { return H_kv > 0 ? H_kv : H; }
};

// Offsets of the valid elements of a [B,H,L,dim] tensor with strides (sb, sh, st).
struct View {
  i64 B, H, L, dim, sb, sh, st;
  i64 size() const { return (B && H && L) ? (B - 1) * sb + (H - 1) * sh + (L - 1) * st + dim : 0; }
  std::vector<i64> offsets() const {
    std::vector<i64> o;
    for (i64 b = 0; b < B; ++b)
      for (i64 h = 0; h < H; ++h)
        for (i64 t = 0; t < L; ++t)
          for (i64 d = 0; d < dim; ++d) o.push_back(b * sb + h * sh + t * st + d);
    return o;
  }
};

inline View make_view(Layout layout, i64 B, i64 H, i64 L, i64 dim) {
  switch (layout) {
    case Layout::BHLD: return {B, H, L, dim, H * L * dim, L * dim, dim};
    case Layout::BLHD: return {B, H, L, dim, L * H * dim, dim, H * dim};
    case Layout::Padded: {
      const i64 st = dim + 3, sh = L * st + 5;
      return {B, H, L, dim, H * sh + 7, sh, st};
    }
  }
  return {};
}

struct Problem {
  Spec spec;
  AttnParams p;
  View vq, vk, vv, vo;
  std::vector<float> q, k, v, dO, bias, sinks;
  std::vector<i64> kl;
};

inline Problem make_problem(const Spec& s) {
  Problem pr;
  pr.spec = s;
  const i64 Dv = s.Dv < 0 ? s.D : s.Dv;
  pr.vq = make_view(s.layout, s.B, s.H, s.Lq, s.D);
  pr.vk = make_view(s.layout, s.B, s.kv_heads(), s.Lk, s.D);
  pr.vv = make_view(s.layout, s.B, s.kv_heads(), s.Lk, Dv);
  pr.vo = make_view(s.layout, s.B, s.H, s.Lq, Dv);
  AttnParams& p = pr.p;
  p.B = s.B, p.H = s.H, p.Lq = s.Lq, p.Lk = s.Lk, p.D = s.D, p.Dv = Dv, p.H_kv = s.H_kv, p.window = s.window;
  p.q_sb = pr.vq.sb, p.q_sh = pr.vq.sh, p.q_st = pr.vq.st;
  p.k_sb = pr.vk.sb, p.k_sh = pr.vk.sh, p.k_st = pr.vk.st;
  p.v_sb = pr.vv.sb, p.v_sh = pr.vv.sh, p.v_st = pr.vv.st;
  p.o_sb = pr.vo.sb, p.o_sh = pr.vo.sh, p.o_st = pr.vo.st;
  p.scale = 1.f / std::sqrt(static_cast<float>(std::max<i64>(s.D, 1)));
  p.causal = s.causal;
  p.dropout_p = s.dropout;
  p.seed = s.seed * 1000003ull + 11;
  p.offset = 977;
  std::mt19937_64 rng(s.seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  // Gaps between rows are NaN: the kernels must read only the D / Dv valid elements of a row.
  auto fill = [&](std::vector<float>& x, const View& vw, float scale) {
    x.assign(static_cast<std::size_t>(vw.size()), std::numeric_limits<float>::quiet_NaN());
    for (i64 o : vw.offsets()) x[o] = scale * nd(rng);
  };
  fill(pr.q, pr.vq, s.input_scale);
  fill(pr.k, pr.vk, s.input_scale);
  fill(pr.v, pr.vv, 1.f);
  fill(pr.dO, pr.vo, 1.f);
  if (!s.key_lengths.empty()) {
    pr.kl = s.key_lengths;
    p.key_lengths = pr.kl.data();
    for (i64 b = 0; b < s.B; ++b)  // keys beyond the length: NaN (never read) or zero
      for (i64 h = 0; h < s.kv_heads(); ++h)
        for (i64 j = std::max<i64>(pr.kl[b], 0); j < s.Lk; ++j) {
          const float fillv = s.nan_padding ? std::numeric_limits<float>::quiet_NaN() : 0.f;
          for (i64 d = 0; d < s.D; ++d) pr.k[b * p.k_sb + h * p.k_sh + j * p.k_st + d] = fillv;
          for (i64 d = 0; d < Dv; ++d) pr.v[b * p.v_sb + h * p.v_sh + j * p.v_st + d] = fillv;
        }
  }
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  auto bias_val = [&] { return ud(rng) < s.bias_ninf_frac ? -kInf : nd(rng); };
  switch (s.bias) {
    case BiasKind::None: break;
    case BiasKind::Full:  // [B,H,Lq,Lk] contiguous
      pr.bias.resize(static_cast<std::size_t>(s.B * s.H * s.Lq * s.Lk));
      for (float& x : pr.bias) x = bias_val();
      p.bias_sb = s.H * s.Lq * s.Lk, p.bias_sh = s.Lq * s.Lk, p.bias_si = s.Lk, p.bias_sj = 1;
      break;
    case BiasKind::PerKey:  // [B,1,1,Lk] broadcast over heads and rows
      pr.bias.resize(static_cast<std::size_t>(s.B * s.Lk));
      for (float& x : pr.bias) x = bias_val();
      p.bias_sb = s.Lk, p.bias_sh = 0, p.bias_si = 0, p.bias_sj = 1;
      break;
    case BiasKind::PerRowBroadcastHeads:  // [1,1,Lq,Lk] stored transposed (non-unit key stride)
      pr.bias.resize(static_cast<std::size_t>(s.Lq * s.Lk));
      for (float& x : pr.bias) x = bias_val();
      p.bias_sb = 0, p.bias_sh = 0, p.bias_si = 1, p.bias_sj = s.Lq;
      break;
  }
  if (!pr.bias.empty()) p.bias = pr.bias.data();
  p.softcap = s.softcap;
  // Sinks from far below the scores to far above them (then the running max is the sink's).
  if (s.sinks) {
    for (i64 h = 0; h < s.H; ++h) pr.sinks.push_back(h % 3 == 0 ? 6.f : h % 3 == 1 ? -30.f : nd(rng));
    p.sinks = pr.sinks.data();
  }
  return pr;
}

template <class T>
std::vector<T> convert(const std::vector<float>& x) {
  return std::vector<T>(x.begin(), x.end());
}

// ---------------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------------
template <class T>
struct Result {
  std::vector<T> o, lse, dq, dk, dv;
};

template <class T>
Result<T> run_ref(const Problem& pr, bool backward) {
  Result<T> r;
  const AttnParams& p = pr.p;
  const auto q = convert<T>(pr.q), k = convert<T>(pr.k), v = convert<T>(pr.v), dO = convert<T>(pr.dO);
  r.o.assign(pr.vo.size(), T(kSentinel));
  r.lse.assign(static_cast<std::size_t>(p.B * p.H * p.Lq), T(kSentinel));
  qkv::kernels::attention_ref_forward<T>(r.o.data(), r.lse.data(), nullptr, q.data(), k.data(), v.data(), p);
  if (backward) {
    r.dq.assign(pr.vq.size(), T(kSentinel));
    r.dk.assign(pr.vk.size(), T(kSentinel));
    r.dv.assign(pr.vv.size(), T(kSentinel));
    qkv::kernels::attention_ref_backward<T>(r.dq.data(), r.dk.data(), r.dv.data(), dO.data(), q.data(), k.data(),
                                            v.data(), p);
  }
  return r;
}

inline Result<float> run_flash(const Problem& pr, bool backward, AttnKernel kernel = AttnKernel::Auto) {
  Result<float> r;
  AttnParams p = pr.p;
  p.kernel = kernel;
  r.o.assign(pr.vo.size(), kSentinel);
  r.lse.assign(static_cast<std::size_t>(p.B * p.H * p.Lq), kSentinel);
  qkv::kernels::flash_attention_forward(r.o.data(), r.lse.data(), pr.q.data(), pr.k.data(), pr.v.data(), p);
  if (backward) {
    r.dq.assign(pr.vq.size(), kSentinel);
    r.dk.assign(pr.vk.size(), kSentinel);
    r.dv.assign(pr.vv.size(), kSentinel);
    qkv::kernels::flash_attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), pr.dO.data(), pr.q.data(),
                                           pr.k.data(), pr.v.data(), r.o.data(), r.lse.data(), p);
  }
  return r;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Rule R1: max|got - hp| <= c * max|lp - hp| + floor over the valid elements; non-finite
// reference values must be matched exactly (R4); gaps keep the sentinel.
inline void expect_r1(const char* what, const std::vector<float>& got, const std::vector<double>& hp,
                      const std::vector<float>& lp, const View& vw, double c, const std::string& ctx,
                      double extra_rel = 0) {
  ASSERT_EQ(got.size(), hp.size()) << what;
  std::vector<char> valid(got.size(), 0);
  double err = 0, err_lp = 0, max_abs = 0;
  i64 worst = -1;
  for (i64 o : vw.offsets()) {
    valid[o] = 1;
    const double h = hp[o];
    if (!std::isfinite(h)) {
      ASSERT_EQ(static_cast<double>(got[o]), h) << what << " non-finite reference at " << o << " (" << ctx << ")";
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[o])) << what << " not finite at " << o << ": " << got[o] << " (" << ctx << ")";
    const double e = std::fabs(got[o] - h);
    if (e > err) err = e, worst = o;
    err_lp = std::max(err_lp, std::fabs(static_cast<double>(lp[o]) - h));
    max_abs = std::max(max_abs, std::fabs(h));
  }
  const double tol = c * err_lp + 1e-5 + extra_rel * max_abs;
  EXPECT_LE(err, tol) << what << ": max |flash - ref64| = " << err << " at " << worst << ", ref32 error " << err_lp
                      << " (" << ctx << ")";
  for (std::size_t o = 0; o < got.size(); ++o) {
    if (!valid[o]) {
      ASSERT_EQ(got[o], kSentinel) << what << " wrote outside its rows at " << o << " (" << ctx << ")";
    }
  }
}

using qkv::testing::ThreadsGuard;
using qkv::testing::IsaGuard;

inline std::vector<Isa> isas_to_test() { return qkv::testing::isas_up_to(Isa::Avx512); }

// Fast kernel vs float64 reference (R1) for every ISA and 1 and 2 threads; each run twice and
// required to be bitwise identical, and bitwise the same for every thread count except the
// tiled backward's dQ (summed from per-worker partials). bwd_extra_rel loosens dQ/dK/dV by that
// fraction of their largest magnitude (only for huge logits, see there).
inline void check_case(const Spec& spec, bool backward = true, double bwd_extra_rel = 0,
                       std::vector<int> thread_counts = {1, 2}) {
  const Problem pr = make_problem(spec);
  const auto hp = run_ref<double>(pr, backward);
  const auto lp = run_ref<float>(pr, backward);
  const View vl{pr.p.B, pr.p.H, pr.p.Lq, 1, pr.p.H * pr.p.Lq, pr.p.Lq, 1};
  ThreadsGuard tg;
  IsaGuard ig;
  for (AttnKernel kernel : {AttnKernel::Tiled, AttnKernel::Rows})
  for (Isa isa : isas_to_test()) {
    qkv::kernels::set_isa(isa);
    Result<float> first;
    for (int threads : thread_counts) {
      qkv::set_num_threads(threads);
      const std::string ctx = spec.str() + " kernel=" + (kernel == AttnKernel::Tiled ? "tiled" : "rows") +
                              " isa=" + qkv::kernels::isa_name(isa) + " threads=" + std::to_string(threads);
      const auto r = run_flash(pr, backward, kernel);
      expect_r1("O", r.o, hp.o, lp.o, pr.vo, 2, ctx);
      expect_r1("LSE", r.lse, hp.lse, lp.lse, vl, 2, ctx);
      if (backward) {
        expect_r1("dQ", r.dq, hp.dq, lp.dq, pr.vq, 3, ctx, bwd_extra_rel);
        expect_r1("dK", r.dk, hp.dk, lp.dk, pr.vk, 3, ctx, bwd_extra_rel);
        expect_r1("dV", r.dv, hp.dv, lp.dv, pr.vv, 3, ctx, bwd_extra_rel);
      }
      const auto again = run_flash(pr, backward, kernel);
      EXPECT_TRUE(same_bits(r.o, again.o) && same_bits(r.lse, again.lse)) << "forward not deterministic: " << ctx;
      EXPECT_TRUE(same_bits(r.dq, again.dq) && same_bits(r.dk, again.dk) && same_bits(r.dv, again.dv))
          << "backward not deterministic: " << ctx;
      if (threads == thread_counts.front()) {
        first = r;
      } else {
        EXPECT_TRUE(same_bits(r.o, first.o) && same_bits(r.lse, first.lse))
            << "forward differs from " << thread_counts.front() << " thread(s): " << ctx;
        EXPECT_TRUE(same_bits(r.dk, first.dk) && same_bits(r.dv, first.dv) &&
                    (kernel == AttnKernel::Tiled || same_bits(r.dq, first.dq)))
            << "backward differs from " << thread_counts.front() << " thread(s): " << ctx;
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

}  // namespace qkv_attention_test
