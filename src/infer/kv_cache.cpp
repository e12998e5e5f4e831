// KV cache (see kv_cache.h): preallocated [B, H_kv, T_max, D] keys and values per
// layer, written in place; attention of new queries (H heads sharing the H_kv) over a
// sequence's cached keys.
#include "qkv/infer/kv_cache.h"

#include "qkv/core/memory.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "qkv/core/error.h"
#include "qkv/core/parallel.h"
#include "qkv/kernels/attention.h"
#include "qkv/kernels/decode_attention.h"
#include "qkv/kernels/half.h"
#include "qkv/nn/attention.h"

namespace qkv::infer {
namespace {

using i64 = std::int64_t;

void check_positive(i64 v, const char* name) {
  if (v < 1) throw ValueError(std::string("KVCache: ") + name + " must be >= 1, got " + std::to_string(v));
}

}  // namespace

KVType parse_kv_type(const std::string& text, const std::string& what) {
  if (text == "f32") return KVType::F32;
  if (text == "f16") return KVType::F16;
  throw ValueError(what + " must be f32 or f16, got '" + text + "'");
}

KVCache::KVCache(const KVCacheOptions& options) : opt_(options) {
  const KVCacheOptions& o = opt_;
  if (o.num_layers < 0) throw ValueError("KVCache: num_layers must be >= 0, got " + std::to_string(o.num_layers));
  check_positive(o.batch, "batch");
  check_positive(o.num_heads, "num_heads");
  if (o.num_kv_heads == 0) opt_.num_kv_heads = o.num_heads;
  if (o.num_kv_heads < 1 || o.num_heads % o.num_kv_heads != 0)
    throw ValueError("KVCache: num_kv_heads " + std::to_string(o.num_kv_heads) + " must be >= 1 and divide num_heads " +
                     std::to_string(o.num_heads));
  check_positive(o.max_len, "max_len");
  check_positive(o.head_dim, "head_dim");
  const Shape s{o.batch, o.num_kv_heads, o.max_len, o.head_dim};
  i64 per = 0;
  try {
    per = checked_numel(s, "KVCache");
    if (o.num_layers > 0 && per > (INT64_MAX / 8) / o.num_layers) throw ShapeError("overflow");
  } catch (const ShapeError&) {
    throw AllocError("KVCache: " + std::to_string(o.num_layers) + " layers x 2 x " + shape_str(s) +
                     " floats overflow 64-bit sizes");
  }
  if (!o.state_floats.empty() && static_cast<i64>(o.state_floats.size()) != o.num_layers)
    throw ValueError("KVCache: state_floats has " + std::to_string(o.state_floats.size()) + " entries for " +
                     std::to_string(o.num_layers) + " layers");
  i64 kv_layers = 0, state_per_seq = 0;
  for (i64 l = 0; l < o.num_layers; ++l) {
    const i64 n = o.state_floats.empty() ? 0 : o.state_floats[static_cast<std::size_t>(l)];
    if (n < 0 || n > (i64{1} << 40))
      throw ValueError("KVCache: layer " + std::to_string(l) + "'s state of " + std::to_string(n) + " floats");
    state_per_seq += n;
    kv_layers += n == 0 ? 1 : 0;
  }
  const bool f16 = o.dtype == KVType::F16;
  // A float16 cache's prefill widens one sequence's keys and values of a layer to float32 at a
  // time (attend_prefill), up to [2, H_kv, T, D] floats: counted once, though the buffer belongs
  // to the calling thread (an estimate for one thread using the cache).
  MemoryEstimate()
      .add({o.batch, o.num_kv_heads, o.max_len, o.head_dim}, 2 * kv_layers, f16 ? 2 : 4)
      .add({o.batch, state_per_seq}, 1, 4)
      .add({2, o.num_kv_heads, o.max_len, o.head_dim}, f16 ? 1 : 0, 4)
      .add({o.batch, o.max_len}, o.keep_ids ? 1 : 0, 8)
      .check("KVCache (" + std::to_string(o.num_layers) + " layers x 2 x " + shape_str(s) +
             (f16 ? " float16)" : " float32)"));
  if (f16) {
    // 64-byte aligned (whole cache lines per row at D = 32k); untouched pages cost nothing until
    // written unless populate asks for them up front.
    const std::size_t bytes = (static_cast<std::size_t>(per) * 2 + 63) / 64 * 64;
    auto buffer = [&]() {
      auto* p = static_cast<std::uint16_t*>(std::aligned_alloc(64, bytes));
      if (p == nullptr) throw AllocError("KVCache: could not allocate " + std::to_string(bytes) + " bytes");
      if (o.populate) std::memset(p, 0, bytes);
      return std::shared_ptr<std::uint16_t[]>(p, [](std::uint16_t* q) { std::free(q); });
    };
    for (i64 l = 0; l < o.num_layers; ++l) {
      const bool kv = layer_has_kv(l);
      kh_.push_back(kv ? buffer() : nullptr);
      vh_.push_back(kv ? buffer() : nullptr);
    }
  } else {
    k_.reserve(static_cast<std::size_t>(o.num_layers));
    v_.reserve(static_cast<std::size_t>(o.num_layers));
    for (i64 l = 0; l < o.num_layers; ++l) {
      const bool kv = layer_has_kv(l);
      k_.push_back(!kv ? Tensor() : o.populate ? Tensor::zeros(s) : Tensor::empty(s));
      v_.push_back(!kv ? Tensor() : o.populate ? Tensor::zeros(s) : Tensor::empty(s));
    }
  }
  if (state_per_seq > 0) {
    for (i64 l = 0; l < o.num_layers; ++l) {
      const i64 n = o.state_floats[static_cast<std::size_t>(l)];
      state_.push_back(n == 0 ? nullptr : std::shared_ptr<float[]>(new float[static_cast<std::size_t>(o.batch * n)]()));
    }
    saved_.resize(static_cast<std::size_t>(o.batch));
    saved_len_.assign(static_cast<std::size_t>(o.batch), -1);
  }
  len_.assign(static_cast<std::size_t>(o.batch), 0);
  if (o.keep_ids) ids_.reset(new i64[static_cast<std::size_t>(o.batch * o.max_len)]());
}

i64* KVCache::token_ids(i64 b) {
  check_slot(b, "token_ids");
  if (!ids_) throw ValueError("KVCache::token_ids: the cache keeps no token ids (KVCacheOptions::keep_ids)");
  return ids_.get() + b * opt_.max_len;
}

const i64* KVCache::token_ids(i64 b) const { return const_cast<KVCache*>(this)->token_ids(b); }

i64 KVCache::length(i64 b) const {
  check_slot(b, "length");
  return len_[static_cast<std::size_t>(b)];
}

i64 KVCache::bytes() const {
  i64 kv_layers = 0, state = 0;
  for (i64 l = 0; l < opt_.num_layers; ++l) {
    kv_layers += layer_has_kv(l) ? 1 : 0;
    state += opt_.state_floats.empty() ? 0 : opt_.state_floats[static_cast<std::size_t>(l)];
  }
  return 2 * kv_layers * opt_.batch * opt_.num_kv_heads * opt_.max_len * opt_.head_dim *
             (opt_.dtype == KVType::F16 ? 2 : 4) +
         state * opt_.batch * 4;
}

bool KVCache::layer_has_kv(i64 layer) const {
  return opt_.state_floats.empty() || opt_.state_floats[static_cast<std::size_t>(layer)] == 0;
}

float* KVCache::state(i64 layer, i64 b) {
  check_slot(b, "state");
  if (layer < 0 || layer >= opt_.num_layers || layer_has_kv(layer))
    throw ValueError("KVCache::state: layer " + std::to_string(layer) + " keeps no recurrent state");
  return state_[static_cast<std::size_t>(layer)].get() + b * opt_.state_floats[static_cast<std::size_t>(layer)];
}

const float* KVCache::state(i64 layer, i64 b) const { return const_cast<KVCache*>(this)->state(layer, b); }

void KVCache::clear_state(i64 b) {
  for (i64 l = 0; l < static_cast<i64>(state_.size()); ++l)
    if (state_[static_cast<std::size_t>(l)]) {
      const i64 n = opt_.state_floats[static_cast<std::size_t>(l)];
      std::fill(state(l, b), state(l, b) + n, 0.f);
    }
  if (!saved_len_.empty()) saved_len_[static_cast<std::size_t>(b)] = -1;
}

void KVCache::checkpoint(i64 b) {
  check_slot(b, "checkpoint");
  if (!has_state()) return;
  std::vector<float>& s = saved_[static_cast<std::size_t>(b)];
  s.clear();
  for (i64 l = 0; l < opt_.num_layers; ++l)
    if (!layer_has_kv(l)) s.insert(s.end(), state(l, b), state(l, b) + opt_.state_floats[static_cast<std::size_t>(l)]);
  saved_len_[static_cast<std::size_t>(b)] = len_[static_cast<std::size_t>(b)];
}

i64 KVCache::rewind_point(i64 b, i64 n) const {
  check_slot(b, "rewind_point");
  const i64 len = len_[static_cast<std::size_t>(b)];
  n = std::clamp<i64>(n, 0, len);
  if (!has_state() || n == len) return n;
  const i64 saved = saved_len_[static_cast<std::size_t>(b)];
  return saved >= 0 && saved <= n ? saved : 0;
}

void KVCache::check_slot(i64 b, const char* what) const {
  if (b < 0 || b >= opt_.batch)
    throw IndexError(std::string("KVCache::") + what + ": sequence " + std::to_string(b) + " out of range [0, " +
                     std::to_string(opt_.batch) + ")");
}

void KVCache::check_room(const std::vector<i64>& n_new) const {
  if (static_cast<i64>(n_new.size()) != opt_.batch)
    throw ValueError("KVCache: n_new has " + std::to_string(n_new.size()) + " entries for a batch of " +
                     std::to_string(opt_.batch));
  for (std::size_t b = 0; b < n_new.size(); ++b) {
    if (n_new[b] < 0)
      throw ValueError("KVCache: n_new[" + std::to_string(b) + "] = " + std::to_string(n_new[b]) + " is negative");
    if (len_[b] + n_new[b] > opt_.max_len)
      throw ValueError("KVCache: sequence " + std::to_string(b) + " holds " + std::to_string(len_[b]) +
                       " positions; " + std::to_string(n_new[b]) + " more would pass the cache's max_len " +
                       std::to_string(opt_.max_len));
  }
}

void KVCache::write(i64 layer, const Tensor& k_new, const Tensor& v_new, const std::vector<i64>& n_new) {
  if (layer < 0 || layer >= opt_.num_layers)
    throw IndexError("KVCache::write: layer " + std::to_string(layer) + " out of range [0, " +
                     std::to_string(opt_.num_layers) + ")");
  if (!layer_has_kv(layer))
    throw ValueError("KVCache::write: layer " + std::to_string(layer) + " keeps a recurrent state, not keys and values");
  check_room(n_new);
  for (const Tensor* t : {&k_new, &v_new}) {
    if (t->dtype() != DType::F32 || t->dim() != 4 || t->shape()[0] != opt_.batch ||
        t->shape()[1] != opt_.num_kv_heads || t->shape()[3] != opt_.head_dim || t->stride(3) != 1)
      throw ShapeError(std::string("KVCache::write: new ") + (t == &k_new ? "keys" : "values") + " must be float32 [" +
                       std::to_string(opt_.batch) + ", " + std::to_string(opt_.num_kv_heads) + ", Tn, " +
                       std::to_string(opt_.head_dim) + "] (" + std::to_string(opt_.num_kv_heads) +
                       " key/value heads) with a contiguous last dim, got " + t->shape_str() + " " +
                       dtype_name(t->dtype()));
    for (std::size_t b = 0; b < n_new.size(); ++b)
      if (n_new[b] > t->shape()[2])
        throw ShapeError("KVCache::write: n_new[" + std::to_string(b) + "] = " + std::to_string(n_new[b]) +
                         " exceeds the " + std::to_string(t->shape()[2]) + " rows given");
  }
  const i64 H = opt_.num_kv_heads, D = opt_.head_dim, T = opt_.max_len;
  const std::size_t row = static_cast<std::size_t>(D) * sizeof(float);
  const bool f16 = opt_.dtype == KVType::F16;
  for (int which = 0; which < 2; ++which) {
    const Tensor& src = which == 0 ? k_new : v_new;
    const float* s = src.data<float>();
    const i64 sb = src.stride(0), sh = src.stride(1), st = src.stride(2);
    for (i64 b = 0; b < opt_.batch; ++b)
      for (i64 h = 0; h < H; ++h)
        for (i64 t = 0; t < n_new[static_cast<std::size_t>(b)]; ++t) {
          const i64 at = ((b * H + h) * T + len_[static_cast<std::size_t>(b)] + t) * D;
          const float* from = s + b * sb + h * sh + t * st;
          if (f16)
            kernels::float_to_half_rows(from, (which == 0 ? kh_ : vh_)[static_cast<std::size_t>(layer)].get() + at, D);
          else
            std::memcpy((which == 0 ? k_ : v_)[static_cast<std::size_t>(layer)].data<float>() + at, from, row);
        }
  }
}

Tensor KVCache::attend(i64 layer, const Tensor& q, const std::vector<i64>& n_new, double scale, i64 window) const {
  if (layer < 0 || layer >= opt_.num_layers)
    throw IndexError("KVCache::attend: layer " + std::to_string(layer) + " out of range");
  if (!layer_has_kv(layer))
    throw ValueError("KVCache::attend: layer " + std::to_string(layer) + " keeps a recurrent state, not keys and values");
  check_room(n_new);
  const i64 B = opt_.batch, H = opt_.num_heads, Hkv = opt_.num_kv_heads, D = opt_.head_dim, T = opt_.max_len;
  if (q.dtype() != DType::F32 || q.dim() != 4 || q.shape()[0] != B || q.shape()[1] != H || q.shape()[3] != D ||
      q.stride(3) != 1)
    throw ShapeError("KVCache::attend: q must be float32 [" + std::to_string(B) + ", " + std::to_string(H) + ", Tn, " +
                     std::to_string(D) + "] (" + std::to_string(H) + " query heads) with a contiguous last dim, got " +
                     q.shape_str() + " " + dtype_name(q.dtype()));
  if (window < 0) throw ValueError("KVCache::attend: window must be >= 0 (0: none), got " + std::to_string(window));
  const i64 Tn = q.shape()[2];
  std::vector<i64> k_len(static_cast<std::size_t>(B));
  i64 most = 0;
  for (i64 b = 0; b < B; ++b) {
    const i64 n = n_new[static_cast<std::size_t>(b)];
    if (n > Tn)
      throw ShapeError("KVCache::attend: n_new[" + std::to_string(b) + "] = " + std::to_string(n) + " exceeds the " +
                       std::to_string(Tn) + " queries given");
    k_len[static_cast<std::size_t>(b)] = len_[static_cast<std::size_t>(b)] + n;
    most = std::max(most, n);
  }
  // Output [B, Tn, H, D]: merging the heads back to [B, Tn, H*D] is then a view.
  Tensor out = Tensor::zeros({B, Tn, H, D});
  if (Tn == 0 || most == 0) return out;
  const bool f16 = opt_.dtype == KVType::F16;
  const float* Kf = f16 ? nullptr : k_[static_cast<std::size_t>(layer)].data<float>();
  const float* Vf = f16 ? nullptr : v_[static_cast<std::size_t>(layer)].data<float>();
  const std::uint16_t* Kh = f16 ? kh_[static_cast<std::size_t>(layer)].get() : nullptr;
  const std::uint16_t* Vh = f16 ? vh_[static_cast<std::size_t>(layer)].get() : nullptr;  // (decode)
  float* O = out.data<float>();
  const i64 o_sb = Tn * H * D, o_sh = D, o_st = H * D;
  if (most <= kDecodeKernelMaxQueries) {
    kernels::DecodeParams p;
    p.B = B, p.H = H, p.Lq = Tn, p.D = D, p.H_kv = Hkv, p.window = window;
    p.q_sb = q.stride(0), p.q_sh = q.stride(1), p.q_st = q.stride(2);
    p.o_sb = o_sb, p.o_sh = o_sh, p.o_st = o_st;
    p.k_sb = Hkv * T * D, p.k_sh = T * D, p.k_st = D;
    p.v_sb = p.k_sb, p.v_sh = p.k_sh, p.v_st = p.k_st;
    p.q_len = n_new.data();
    p.k_len = k_len.data();
    p.scale = static_cast<float>(scale);
    if (f16)
      kernels::decode_attention_forward_f16(O, q.data<float>(), Kh, Vh, p);
    else
      kernels::decode_attention_forward(O, q.data<float>(), Kf, Vf, p);
    return out;
  }
  // Prefill: one tiled FlashAttention call per sequence over its own key range.
  for (i64 b = 0; b < B; ++b) {
    const i64 n = n_new[static_cast<std::size_t>(b)];
    if (n == 0) continue;
    attend_prefill(layer, b, n, k_len[static_cast<std::size_t>(b)], q.data<float>() + b * q.stride(0), q.stride(1),
                   q.stride(2), O + b * o_sb, o_sh, o_st,
                   {.scale = static_cast<float>(scale), .window = window});
  }
  return out;
}

void KVCache::attend_prefill(i64 layer, i64 b, i64 n, i64 Lk, const float* q, i64 q_sh, i64 q_st, float* o, i64 o_sh,
                             i64 o_st, const kernels::ScoreParams& sp) const {
  const i64 window = sp.window;
  if (layer < 0 || layer >= opt_.num_layers)
    throw IndexError("KVCache::attend_prefill: layer " + std::to_string(layer) + " out of range");
  if (!layer_has_kv(layer))
    throw ValueError("KVCache::attend_prefill: layer " + std::to_string(layer) +
                     " keeps a recurrent state, not keys and values");
  check_slot(b, "attend_prefill");
  const i64 H = opt_.num_heads, Hkv = opt_.num_kv_heads, D = opt_.head_dim, T = opt_.max_len;
  if (n < 1 || n > Lk || Lk > T)
    throw ValueError("KVCache::attend_prefill: " + std::to_string(n) + " queries over " + std::to_string(Lk) +
                     " keys of a cache of " + std::to_string(T) + " (need 1 <= queries <= keys <= capacity)");
  if (window < 0) throw ValueError("KVCache::attend_prefill: window must be >= 0 (0: none), got " + std::to_string(window));
  kernels::AttnParams p;
  p.B = 1, p.H = H, p.Lq = n, p.Lk = Lk, p.D = D, p.Dv = D, p.H_kv = Hkv;
  p.window = window;
  p.q_sb = 0, p.q_sh = q_sh, p.q_st = q_st;
  p.o_sb = 0, p.o_sh = o_sh, p.o_st = o_st;
  p.k_sb = Hkv * T * D, p.k_sh = T * D, p.k_st = D;
  p.v_sb = p.k_sb, p.v_sh = p.k_sh, p.v_st = p.k_st;
  p.scale = sp.scale;
  p.softcap = sp.softcap;
  p.sinks = sp.sinks;
  p.causal = true;  // bottom-right aligned: the n queries are the last n of the Lk keys
  thread_local std::vector<float> lse, wide;
  lse.resize(static_cast<std::size_t>(H * n));
  if (opt_.dtype == KVType::F16) {
    // The keys and values widened to float32 first ([H_kv, Lk, D] each: O(Lk D) beside the
    // O(n Lk D) the kernel computes): the values the decode kernel widens as it goes. All Lk of
    // them, even behind a window: the kernel's choice of path and tiles depends on Lk, and the
    // same Lk is what makes the result bitwise a float32 cache's holding the same values.
    const i64 nv = Hkv * Lk * D;
    wide.resize(static_cast<std::size_t>(2 * nv));
    widen(layer, b, Lk, wide.data(), wide.data() + nv);
    p.k_sb = nv, p.k_sh = Lk * D;
    p.v_sb = p.k_sb, p.v_sh = p.k_sh;
    kernels::flash_attention_forward(o, lse.data(), q, wide.data(), wide.data() + nv, p);
  } else {
    const std::size_t kv_off = static_cast<std::size_t>(b * Hkv * T * D);
    kernels::flash_attention_forward(o, lse.data(), q, k_[static_cast<std::size_t>(layer)].data<float>() + kv_off,
                                     v_[static_cast<std::size_t>(layer)].data<float>() + kv_off, p);
  }
}

void KVCache::advance(const std::vector<i64>& n_new) {
  check_room(n_new);
  for (std::size_t b = 0; b < n_new.size(); ++b) len_[b] += n_new[b];
}

void KVCache::reset(i64 b) {
  check_slot(b, "reset");
  len_[static_cast<std::size_t>(b)] = 0;
  if (has_state()) clear_state(b);
}

void KVCache::truncate(i64 b, i64 n) {
  check_slot(b, "truncate");
  const i64 len = len_[static_cast<std::size_t>(b)];
  if (n < 0 || n > len)
    throw ValueError("KVCache::truncate: sequence " + std::to_string(b) + " holds " + std::to_string(len) +
                     " positions; cannot keep " + std::to_string(n));
  if (has_state() && n != len) {
    const i64 saved = saved_len_[static_cast<std::size_t>(b)];
    if (n == 0) {
      clear_state(b);
    } else if (n == saved) {  // the checkpoint's states back in place
      const float* from = saved_[static_cast<std::size_t>(b)].data();
      for (i64 l = 0; l < opt_.num_layers; ++l) {
        if (layer_has_kv(l)) continue;
        const i64 m = opt_.state_floats[static_cast<std::size_t>(l)];
        std::copy(from, from + m, state(l, b));
        from += m;
      }
    } else {
      throw ValueError("KVCache::truncate: sequence " + std::to_string(b) + " keeps recurrent states, which can go "
                       "back to position 0" + (saved > 0 ? " or to its checkpoint at " + std::to_string(saved) : "") +
                       ", not to " + std::to_string(n) + " of its " + std::to_string(len));
    }
  }
  len_[static_cast<std::size_t>(b)] = n;
}

void KVCache::reset() {
  std::fill(len_.begin(), len_.end(), 0);
  for (i64 b = 0; b < opt_.batch && has_state(); ++b) clear_state(b);
}

void KVCache::check_layer(i64 layer, const char* what, KVType want) const {
  if (layer < 0 || layer >= opt_.num_layers)
    throw IndexError(std::string("KVCache::") + what + ": layer " + std::to_string(layer) + " out of range [0, " +
                     std::to_string(opt_.num_layers) + ")");
  if (!layer_has_kv(layer))
    throw ValueError(std::string("KVCache::") + what + ": layer " + std::to_string(layer) +
                     " keeps a recurrent state, not keys and values");
  if (opt_.dtype != want)
    throw TypeError(std::string("KVCache::") + what + ": the cache holds " +
                    (opt_.dtype == KVType::F16 ? "float16" : "float32") + " keys and values" +
                    (want == KVType::F32 ? " (use keys_f16 / values_f16)" : " (use keys / values)"));
}

const Tensor& KVCache::keys(i64 layer) const {
  check_layer(layer, "keys", KVType::F32);
  return k_[static_cast<std::size_t>(layer)];
}

const Tensor& KVCache::values(i64 layer) const {
  check_layer(layer, "values", KVType::F32);
  return v_[static_cast<std::size_t>(layer)];
}

std::uint16_t* KVCache::keys_f16(i64 layer) const {
  check_layer(layer, "keys_f16", KVType::F16);
  return kh_[static_cast<std::size_t>(layer)].get();
}

std::uint16_t* KVCache::values_f16(i64 layer) const {
  check_layer(layer, "values_f16", KVType::F16);
  return vh_[static_cast<std::size_t>(layer)].get();
}

void KVCache::widen(i64 layer, i64 b, i64 Lk, float* k_out, float* v_out) const {
  check_layer(layer, "widen", KVType::F16);
  check_slot(b, "widen");
  const i64 Hkv = opt_.num_kv_heads, D = opt_.head_dim, T = opt_.max_len;
  if (Lk < 0 || Lk > T)
    throw ValueError("KVCache::widen: " + std::to_string(Lk) + " positions of a cache of " + std::to_string(T));
  const std::uint16_t* K = kh_[static_cast<std::size_t>(layer)].get() + b * Hkv * T * D;
  const std::uint16_t* V = vh_[static_cast<std::size_t>(layer)].get() + b * Hkv * T * D;
  parallel_for(0, Hkv, 1, [&](i64 h0, i64 h1) {
    for (i64 h = h0; h < h1; ++h) {
      kernels::half_to_float_rows(K + h * T * D, k_out + h * Lk * D, Lk * D);
      kernels::half_to_float_rows(V + h * T * D, v_out + h * Lk * D, Lk * D);
    }
  });
}

Tensor cached_self_attention(const nn::MultiHeadAttention& mha, const Tensor& x, i64 layer, const std::vector<i64>& n_new,
                             KVCache& cache) {
  const i64 B = x.size(0), Tn = x.size(1), E = mha.options().embed_dim, H = mha.options().num_heads, D = E / H;
  auto heads = [&](const nn::Linear& w) { return w.forward(x).view({B, Tn, H, D}).transpose(1, 2); };
  const Tensor q = heads(*mha.w_q), k = heads(*mha.w_k), v = heads(*mha.w_v);  // [B, H, Tn, D] views
  cache.write(layer, k, v, n_new);
  const Tensor o = cache.attend(layer, q, n_new, 1.0 / std::sqrt(static_cast<double>(D)));  // [B, Tn, H, D]
  return mha.w_o->forward(o.view({B, Tn, E}));
}

}  // namespace qkv::infer
