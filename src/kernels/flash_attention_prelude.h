// Everything flash_attention_impl.h needs, included by each ISA translation
// unit BEFORE its `#pragma GCC target`, so that library and std functions keep
// the baseline ISA (an inline function compiled for AVX-512 in one TU and
// merged at link time could otherwise run on a CPU without it).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/kernels/dropout.h"
#include "qkv/kernels/fast_exp.h"
#include "qkv/kernels/half.h"
#include "flash_attention_internal.h"
