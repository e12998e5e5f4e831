// Decode attention over a KV cache (see decode_attention.h): run-time ISA dispatch of the
// vectorised kernel (decode_attention_impl.h, compiled in flash_attention_{scalar,avx2,avx512}.cpp),
// how a long head is split into key chunks (flash-decoding: Dao et al., "Flash-Decoding for
// long-context inference", 2023), and the naive twin.
#include "qkv/kernels/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "qkv/kernels/cpu.h"
#include "flash_attention_internal.h"

namespace qkv::kernels {
namespace {

using i64 = std::int64_t;

// Heads with at least this many keys per chunk are worth splitting.
constexpr i64 kMinKeysPerChunk = 256;
// Split until there are about this many tasks (enough for a few cores).
constexpr i64 kTargetTasks = 16;

}  // namespace

i64 decode_attention_splits(i64 B, i64 H_kv, i64 keys) {
  const i64 heads = std::max<i64>(B * H_kv, 1);
  if (heads >= kTargetTasks) return 1;
  const i64 want = (kTargetTasks + heads - 1) / heads;
  return std::max<i64>(1, std::min(want, keys / kMinKeysPerChunk));
}

namespace {

template <class KT>
void dispatch(float* O, const float* Q, const KT* K, const KT* V, const DecodeParams& p, Team* tm, float* scratch) {
  // O [B,H,Lq,D] strides o_*;  Q [B,H,Lq,D] strides q_*;  K, V [B,H_kv,T,D] strides k_*, v_*
  if constexpr (std::is_same_v<KT, float>) {
    switch (active_isa()) {
      case Isa::Avx512: return flash::decode_forward_avx512(O, Q, K, V, p, tm, scratch);
      case Isa::Avx2: return flash::decode_forward_avx2(O, Q, K, V, p, tm, scratch);
      case Isa::Scalar: break;
    }
    flash::decode_forward_scalar(O, Q, K, V, p, tm, scratch);
  } else {  // float16 cache: the AVX2 tier includes F16C
    switch (active_isa()) {
      case Isa::Avx512: return flash::decode_forward_f16_avx512(O, Q, K, V, p, tm, scratch);
      case Isa::Avx2: return flash::decode_forward_f16_avx2(O, Q, K, V, p, tm, scratch);
      case Isa::Scalar: break;
    }
    flash::decode_forward_f16_scalar(O, Q, K, V, p, tm, scratch);
  }
}

}  // namespace

void decode_attention_forward(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p) {
  dispatch(O, Q, K, V, p, nullptr, nullptr);
}

void decode_attention_forward_f16(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,
                                  const DecodeParams& p) {
  dispatch(O, Q, K, V, p, nullptr, nullptr);
}

std::int64_t decode_attention_team_scratch(const DecodeParams& p) { return flash::DecodePlan(p).scratch_floats(); }

void decode_attention_forward(Team& tm, float* scratch, float* O, const float* Q, const float* K, const float* V,
                              const DecodeParams& p) {
  dispatch(O, Q, K, V, p, &tm, scratch);
}

void decode_attention_forward_f16(Team& tm, float* scratch, float* O, const float* Q, const std::uint16_t* K,
                                  const std::uint16_t* V, const DecodeParams& p) {
  dispatch(O, Q, K, V, p, &tm, scratch);
}

template <class T>
void decode_attention_ref(T* O, const T* Q, const T* K, const T* V, const DecodeParams& p) {
  // O [B,H,Lq,D] strides o_*;  Q [B,H,Lq,D] strides q_*;  K, V [B,H_kv,T,D] strides k_*, v_*
  const i64 G = p.H_kv > 0 ? p.H / p.H_kv : 1;
  for (i64 b = 0; b < p.B; ++b)
    for (i64 h = 0; h < p.H; ++h) {
      const i64 nq = p.q_len[b], nk = p.k_len[b], hk = h / G;
      for (i64 i = 0; i < nq; ++i) {
        const T* q = Q + b * p.q_sb + h * p.q_sh + i * p.q_st;
        T* out = O + b * p.o_sb + h * p.o_sh + i * p.o_st;
        const i64 pos = nk - nq + i;  // this query's position: it sees keys j <= pos, pos - j < window
        auto seen = [&](i64 j) { return j <= pos && (p.window <= 0 || pos - j < p.window); };
        std::vector<T> s(static_cast<std::size_t>(std::max<i64>(nk, 0)));
        T mx = -std::numeric_limits<T>::infinity();
        for (i64 j = 0; j < nk; ++j) {
          if (!seen(j)) continue;
          T dot = 0;
          for (i64 d = 0; d < p.D; ++d) dot += q[d] * K[b * p.k_sb + hk * p.k_sh + j * p.k_st + d];
          s[j] = dot * static_cast<T>(p.scale);
          if (p.softcap > 0) s[j] = static_cast<T>(p.softcap) * std::tanh(s[j] / static_cast<T>(p.softcap));
          mx = std::max(mx, s[j]);
        }
        // An attention sink: one more term of the denominator, whose weight goes to no value.
        const T sink = p.sinks ? static_cast<T>(p.sinks[h]) : -std::numeric_limits<T>::infinity();
        mx = std::max(mx, sink);
        T sum = p.sinks ? std::exp(sink - mx) : T(0);
        for (i64 j = 0; j < nk; ++j)
          if (seen(j)) sum += (s[j] = std::exp(s[j] - mx));
        for (i64 d = 0; d < p.D; ++d) {
          T acc = 0;
          for (i64 j = 0; j < nk; ++j)
            if (seen(j)) acc += s[j] * V[b * p.v_sb + hk * p.v_sh + j * p.v_st + d];
          out[d] = sum > 0 ? acc / sum : T(0);
        }
      }
    }
}

template void decode_attention_ref<float>(float*, const float*, const float*, const float*, const DecodeParams&);
template void decode_attention_ref<double>(double*, const double*, const double*, const double*, const DecodeParams&);

}  // namespace qkv::kernels
