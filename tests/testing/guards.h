// Guards and lists the kernel tests share: which instruction sets to run a
// kernel's every path with, and restoring the ISA cap and the thread count.
#pragma once
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/kernels/cpu.h"

namespace qkv::testing {

// Lifts the ISA cap a test set with set_isa (set_isa clamps to the detected ISA).
struct IsaGuard {
  ~IsaGuard() { qkv::kernels::set_isa(qkv::kernels::Isa::Avx512); }
};

// Restores the thread count a test changed with set_num_threads.
struct ThreadsGuard {
  int saved = qkv::num_threads();
  ~ThreadsGuard() { qkv::set_num_threads(saved); }
};

// The ISAs up to `highest` that this CPU runs, scalar first.
inline std::vector<qkv::kernels::Isa> isas_up_to(qkv::kernels::Isa highest) {
  using qkv::kernels::Isa;
  std::vector<Isa> v{Isa::Scalar};
  for (Isa isa : {Isa::Avx2, Isa::Avx512})
    if (isa <= highest && qkv::kernels::detected_isa() >= isa) v.push_back(isa);
  return v;
}

}  // namespace qkv::testing
