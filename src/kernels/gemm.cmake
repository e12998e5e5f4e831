# GEMM kernels (library qkv_gemm). Paths relative to src/.
# gemm_avx2.cpp and gemm_avx512.cpp select their ISA with `#pragma GCC target`,
# so they need no extra flags and still build with QKV_NATIVE=OFF; the ISA is
# chosen at run time from qkv::kernels::active_isa().
set(QKV_GEMM_SOURCES
  kernels/quant_types.cpp
  kernels/quant.cpp
  kernels/quant_kquants.cpp
  kernels/qgemm.cpp
  kernels/qgemm_ref.cpp
  kernels/qgemm_q8.cpp
  kernels/qgemm_scalar.cpp
  kernels/qgemm_avx2.cpp
  kernels/qgemm_avx512.cpp
  kernels/gemm_ref.cpp
  kernels/gemm.cpp
  kernels/gemm_scalar.cpp
  kernels/gemm_avx2.cpp
  kernels/gemm_avx512.cpp
  kernels/gemm_skinny.cpp
  kernels/gemm_skinny_avx512.cpp
)
