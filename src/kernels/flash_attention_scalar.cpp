// Portable fallback of the flash attention kernels (the template body is
// flash_attention_impl.h): one float per "vector", 4x4 register micro-kernel.
#include "flash_attention_prelude.h"

namespace qkv::kernels::flash {
namespace {

struct IsaScalar {
  using V = float;
  static constexpr int W = 1, MR = 4, NV = 4;
  static constexpr std::int64_t kFwdQ = 32, kFwdK = 32, kBwdQ = 32, kBwdK = 32;
  static V zero() { return 0.f; }
  static V set1(float x) { return x; }
  static V load(const float* p) { return *p; }
  static void store(float* p, V x) { *p = x; }
  static V fma(V a, V b, V c) { return a * b + c; }
  static V mul(V a, V b) { return a * b; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V max(V a, V b) { return b > a || b != b ? b : a; }
  static float hmax(V a) { return a; }
  static float hsum(V a) { return a; }
  static V exp2(V t) { return fastexp::exp2_scalar(t); }
  static V hsum_lanes(const V* a) { return a[0]; }
  static V load_half(const std::uint16_t* p) { return half_to_float(*p); }
};

}  // namespace
}  // namespace qkv::kernels::flash

#include "flash_attention_impl.h"
#include "attention_rows_impl.h"
#include "decode_attention_impl.h"

namespace qkv::kernels::flash {

void forward_scalar(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  Engine<IsaScalar>::forward(O, LSE, Q, K, V, p);
}
void backward_scalar(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                     const float* V, const float* O, const float* LSE, const AttnParams& p) {
  Engine<IsaScalar>::backward(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
FlashTileSizes tiles_scalar() { return Engine<IsaScalar>::tiles(); }
void rows_forward_scalar(float* O, float* LSE, const float* Q, const float* K, const float* V, const AttnParams& p) {
  Rows<IsaScalar>::forward(O, LSE, Q, K, V, p);
}
void rows_backward_scalar(float* dQ, float* dK, float* dV, const float* dO, const float* Q, const float* K,
                         const float* V, const float* O, const float* LSE, const AttnParams& p) {
  Rows<IsaScalar>::backward(dQ, dK, dV, dO, Q, K, V, O, LSE, p);
}
void decode_forward_scalar(float* O, const float* Q, const float* K, const float* V, const DecodeParams& p, Team* tm,
                    float* scratch) {
  Decode<IsaScalar>::forward(O, Q, K, V, p, tm, scratch);
}
void decode_forward_f16_scalar(float* O, const float* Q, const std::uint16_t* K, const std::uint16_t* V,
                               const DecodeParams& p, Team* tm, float* scratch) {
  Decode<IsaScalar, std::uint16_t>::forward(O, Q, K, V, p, tm, scratch);
}

}  // namespace qkv::kernels::flash
