// Portable GEMM micro-kernels (no intrinsics): fp32 and fp64 4x8 register
// tiles of plain scalars, which the compiler may vectorise for the build's
// baseline ISA. The fallback when active_isa() == Scalar.
#include <cstdint>

#include "gemm_internal.h"
#include "gemm_ukernel.h"

namespace {

template <class U>
struct Scalar {
  using T = U;
  using R = U;
  static constexpr int W = 1;
  static inline R zero() { return R(0); }
  static inline R load(const T* p) { return *p; }
  static inline void store(T* p, R v) { *p = v; }
  static inline R bcast(const T* p) { return *p; }
  static inline R set1(T x) { return x; }
  static inline R mul(R a, R b) { return a * b; }
  static inline R fma(R a, R b, R c) { return a * b + c; }
};

}  // namespace

namespace qkv::kernels::detail {

GemmKernelSet<float> sgemm_kernels_scalar() {
  GemmKernelSet<float> s;
  s.mr = 4;
  s.nr = 8;
  s.kc = 256;
  s.mc = 128;
  s.nc = 1024;
  s.packed_a = &gemm_ukernel<Scalar<float>, 4, 8, true>;
  s.strided_a = &gemm_ukernel<Scalar<float>, 4, 8, false>;
  return s;
}

GemmKernelSet<double> dgemm_kernels_scalar() {
  GemmKernelSet<double> s;
  s.mr = 4;
  s.nr = 8;
  s.kc = 256;
  s.mc = 128;
  s.nc = 1024;
  s.packed_a = &gemm_ukernel<Scalar<double>, 4, 8, true>;
  s.strided_a = &gemm_ukernel<Scalar<double>, 4, 8, false>;
  return s;
}

}  // namespace qkv::kernels::detail
