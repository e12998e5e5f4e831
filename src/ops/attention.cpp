#include "qkv/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops_internal.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/linalg.h"
#include "qkv/ops/nn_functional.h"
#include "qkv/ops/shape_ops.h"
#include "qkv/kernels/attention.h"

namespace qkv {

// ---------------------------------------------------------------- Mask

Mask Mask::causal() {
  Mask m;
  m.causal_ = true;
  return m;
}

Mask Mask::causal(std::int64_t Lq, std::int64_t Lk) {
  if (Lq < 0 || Lk < 0)
    throw ValueError("Mask::causal: sizes must be >= 0, got Lq=" + std::to_string(Lq) + " Lk=" + std::to_string(Lk));
  Mask m;
  m.causal_ = true;
  m.causal_lq_ = Lq;
  m.causal_lk_ = Lk;
  return m;
}

Mask Mask::padding(const Tensor& ids, std::int64_t pad_id) {
  detail::check_defined(ids, "Mask::padding", "token_ids");
  if (ids.dtype() != DType::I64 || ids.dim() != 2)
    throw ShapeError(std::string("Mask::padding: token_ids must be int64 [B, S], got ") + dtype_name(ids.dtype()) + " " +
                     ids.shape_str());
  Mask m;
  m.keeps_.push_back(ne(ids, static_cast<double>(pad_id)).view({ids.shape()[0], 1, 1, ids.shape()[1]}));
  return m;
}

Mask Mask::keep(const Tensor& t) {
  detail::check_defined(t, "Mask::keep", "mask");
  Mask m;
  m.keeps_.push_back(t.dtype() == DType::Bool ? t : ne(t, 0.0));
  return m;
}

Mask Mask::block(const Tensor& t) {
  detail::check_defined(t, "Mask::block", "mask");
  Mask m;
  m.keeps_.push_back(logical_not(t));
  return m;
}

Mask Mask::additive(const Tensor& b) {
  detail::check_float(b, "Mask::additive", "bias");
  Mask m;
  m.additive_.push_back(b.detach());
  return m;
}

Mask Mask::operator&(const Mask& o) const {
  Mask m = *this;
  if (o.causal_) {
    if (m.causal_ && m.causal_lq_ >= 0 && o.causal_lq_ >= 0 &&
        (m.causal_lq_ != o.causal_lq_ || m.causal_lk_ != o.causal_lk_))
      throw ShapeError("Mask: combining causal masks of different sizes (" + std::to_string(m.causal_lq_) + "x" +
                       std::to_string(m.causal_lk_) + " and " + std::to_string(o.causal_lq_) + "x" +
                       std::to_string(o.causal_lk_) + ")");
    m.causal_ = true;
    if (o.causal_lq_ >= 0) {
      m.causal_lq_ = o.causal_lq_;
      m.causal_lk_ = o.causal_lk_;
    }
  }
  m.keeps_.insert(m.keeps_.end(), o.keeps_.begin(), o.keeps_.end());
  m.additive_.insert(m.additive_.end(), o.additive_.begin(), o.additive_.end());
  return m;
}

std::string Mask::describe() const {
  std::string s;
  auto add = [&](const std::string& p) { s += (s.empty() ? "" : " & ") + p; };
  if (causal_)
    add(causal_lq_ >= 0 ? "causal(" + std::to_string(causal_lq_) + "," + std::to_string(causal_lk_) + ")" : "causal");
  for (const auto& k : keeps_) add("keep" + k.shape_str());
  for (const auto& a : additive_) add("additive" + a.shape_str());
  return s.empty() ? "none" : s;
}

void Mask::check(const Shape& ss, const char* op) const {
  if (ss.size() < 2) throw ShapeError(std::string(op) + ": scores " + shape_str(ss) + " need rank >= 2");
  const std::int64_t Lq = ss[ss.size() - 2], Lk = ss.back();
  if (causal_ && causal_lq_ >= 0 && (causal_lq_ != Lq || causal_lk_ != Lk))
    throw ShapeError(std::string(op) + ": causal mask built for Lq=" + std::to_string(causal_lq_) +
                     ", Lk=" + std::to_string(causal_lk_) + " used with scores " + shape_str(ss) + " (Lq=" +
                     std::to_string(Lq) + ", Lk=" + std::to_string(Lk) + ")");
  for (const auto& k : keeps_)
    if (!broadcastable_to(k.shape(), ss))
      throw ShapeError(std::string(op) + ": mask keep" + k.shape_str() + " does not broadcast to the scores " +
                       shape_str(ss) + " ([..., Lq, Lk])");
  for (const auto& a : additive_)
    if (!broadcastable_to(a.shape(), ss))
      throw ShapeError(std::string(op) + ": additive mask " + a.shape_str() + " does not broadcast to the scores " +
                       shape_str(ss) + " ([..., Lq, Lk])");
}

namespace {

Tensor build_bias(const Mask& m, bool with_causal, const Shape& ss, DType dtype, const char* op) {
  m.check(ss, op);
  const std::size_t r = ss.size();
  const std::int64_t Lq = ss[r - 2], Lk = ss[r - 1];
  // Leading dims: full where any part has them, else 1.
  Shape bs(r, 1);
  bs[r - 2] = Lq;
  bs[r - 1] = Lk;
  auto widen = [&](const Shape& ps) {
    for (std::size_t i = 0; i < ps.size(); ++i) {
      const std::size_t j = r - ps.size() + i;
      if (j < r - 2 && ps[i] != 1) bs[j] = ps[i];
    }
  };
  for (const auto& k : m.keep_parts()) widen(k.shape());
  for (const auto& a : m.additive_parts()) widen(a.shape());
  Tensor bias = Tensor::zeros(bs, DType::F64);
  double* b = bias.data<double>();
  const Shape bstr = bias.strides();
  const double ninf = -std::numeric_limits<double>::infinity();
  if (with_causal && m.has_causal()) {
    const std::int64_t outer = bias.numel() / std::max<std::int64_t>(Lq * Lk, 1);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < Lq; ++i)
        for (std::int64_t j = i + (Lk - Lq) + 1; j < Lk; ++j)
          if (j >= 0) b[(o * Lq + i) * Lk + j] = ninf;
  }
  for (const auto& k : m.keep_parts()) {
    const Shape st = broadcast_strides(k.shape(), k.strides(), bs);
    const bool* kp = k.data<bool>();
    std::int64_t idx = 0;
    for_each_offset(bs, st, [&](std::int64_t off) {
      if (!kp[off]) b[idx] = ninf;
      ++idx;
    });
  }
  for (const auto& a : m.additive_parts()) {
    const Tensor a64 = a.to(DType::F64);
    const Shape st = broadcast_strides(a64.shape(), a64.strides(), bs);
    const double* ap = a64.data<double>();
    std::int64_t idx = 0;
    for_each_offset(bs, st, [&](std::int64_t off) {
      b[idx] += ap[off];
      ++idx;
    });
  }
  return bias.to(dtype);
}

}  // namespace

Tensor Mask::to_bias(const Shape& ss, DType dtype, const char* op) const {
  if (empty()) return Tensor();
  return build_bias(*this, true, ss, dtype, op);
}

Tensor Mask::to_bias_without_causal(const Shape& ss, DType dtype, const char* op) const {
  if (keeps_.empty() && additive_.empty()) return Tensor();
  return build_bias(*this, false, ss, dtype, op);
}

// ---------------------------------------------------------------- SDPA

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Key/value heads per query head group for q, k, v (1 unless enable_gqa with fewer k/v heads).
std::int64_t check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, bool enable_gqa) {
  detail::check_float(q, kOp, "q");
  detail::check_float(k, kOp, "k");
  detail::check_float(v, kOp, "v");
  detail::check_same_dtype(q, k, kOp, "q", "k");
  detail::check_same_dtype(q, v, kOp, "q", "v");
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim())
    throw ShapeError(std::string(kOp) + ": q " + q.shape_str() + ", k " + k.shape_str() + ", v " + v.shape_str() +
                     " must all have the same rank >= 2 ([..., L, D])");
  const auto r = static_cast<std::size_t>(q.dim());
  std::int64_t group = 1;
  if (r >= 3) {  // heads: dim -3
    const std::int64_t H = q.shape()[r - 3], Hk = k.shape()[r - 3], Hv = v.shape()[r - 3];
    if (Hk != Hv)
      throw ShapeError(std::string(kOp) + ": k " + k.shape_str() + " has " + std::to_string(Hk) +
                       " heads (dim -3) but v " + v.shape_str() + " has " + std::to_string(Hv) +
                       "; keys and values need the same heads");
    if (H != Hk) {
      if (!enable_gqa)
        throw ShapeError(std::string(kOp) + ": q " + q.shape_str() + " has " + std::to_string(H) +
                         " heads (dim -3) but k " + k.shape_str() + " has " + std::to_string(Hk) +
                         "; set enable_gqa for grouped-query attention (key/value heads shared by query heads)");
      if (Hk < 1 || H % Hk != 0)
        throw ShapeError(std::string(kOp) + ": enable_gqa needs the key/value heads to divide the query heads, but q " +
                         q.shape_str() + " has " + std::to_string(H) + " heads (dim -3) and k " + k.shape_str() +
                         " has " + std::to_string(Hk));
      group = H / Hk;
    }
  }
  for (std::size_t i = 0; i + 2 < r; ++i)
    if ((q.shape()[i] != k.shape()[i] || q.shape()[i] != v.shape()[i]) && !(i + 3 == r && group > 1))
      throw ShapeError(std::string(kOp) + ": leading dims differ: q " + q.shape_str() + ", k " + k.shape_str() +
                       ", v " + v.shape_str());
  if (q.shape().back() != k.shape().back())
    throw ShapeError(std::string(kOp) + ": head dim mismatch: q " + q.shape_str() + " has D=" +
                     std::to_string(q.shape().back()) + " but k " + k.shape_str() + " has D=" +
                     std::to_string(k.shape().back()));
  if (k.shape()[r - 2] != v.shape()[r - 2])
    throw ShapeError(std::string(kOp) + ": k " + k.shape_str() + " and v " + v.shape_str() +
                     " must have the same number of keys (dim -2)");
  return group;
}

// [..., H_kv, L, D] -> [..., H_kv * G, L, D], head h = key/value head h / G (PyTorch's
// repeat_interleave on dim -3): the math path's copy of the shared heads (the fast path reads
// them in place). Differentiable: the gradient of a shared head sums over its copies.
Tensor repeat_heads(const Tensor& t, std::int64_t G) {
  if (G == 1) return t;
  Shape e = t.shape();
  const std::size_t r = e.size();
  e.insert(e.begin() + static_cast<std::ptrdiff_t>(r - 2), G);  // [..., H_kv, G, L, D]
  Shape out = t.shape();
  out[r - 3] *= G;
  return t.unsqueeze(static_cast<std::int64_t>(r) - 2).expand(e).reshape(out);
}

// Keep mask [Lq, Lk] of a sliding window W: query i (position i + Lk - Lq) keeps keys j with
// position - j < W.
Tensor window_keep(std::int64_t Lq, std::int64_t Lk, std::int64_t W) {
  Tensor m = Tensor::zeros({Lq, Lk}, DType::Bool);
  bool* p = m.data<bool>();
  for (std::int64_t i = 0; i < Lq; ++i)
    for (std::int64_t j = 0; j < Lk; ++j) p[i * Lk + j] = i + (Lk - Lq) - j < W;
  return m;
}

// A tensor's layout is "dense" if some permutation of it is contiguous.
bool dense(const Tensor& t) {
  std::vector<int> order(static_cast<std::size_t>(t.dim()));
  for (int i = 0; i < t.dim(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return t.strides()[a] > t.strides()[b]; });
  std::int64_t expect = 1;
  for (int i = t.dim() - 1; i >= 0; --i) {
    const int d = order[i];
    if (t.shape()[d] != 1 && t.strides()[d] != expect) return false;
    expect *= t.shape()[d];
  }
  return true;
}

// A new dense tensor of `shape` whose dims are laid out in the order of `like`'s strides
// (outermost = largest stride; ties keep dim order).
Tensor empty_in_order_of(const Tensor& like, const Shape& shape) {
  std::vector<int> order(static_cast<std::size_t>(like.dim()));
  for (int i = 0; i < like.dim(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return like.strides()[a] > like.strides()[b]; });
  Shape s;
  for (int d : order) s.push_back(shape[d]);
  Tensor base = Tensor::empty(s, like.dtype());
  Shape st(static_cast<std::size_t>(like.dim()));
  const Shape cs = contiguous_strides(s);
  for (std::size_t i = 0; i < order.size(); ++i) st[order[i]] = cs[i];
  return make_view(base, shape, st, 0);
}

// A new tensor with exactly t's strides (t must be dense).
Tensor empty_like_layout(const Tensor& t) { return empty_in_order_of(t, t.shape()); }

// As [B, H, L, D] with a dense layout and a unit last-dim stride (views when possible).
Tensor as_bhld(const Tensor& t) {
  Tensor r = t.detach();
  while (r.dim() < 4) r = r.unsqueeze(0);
  if (r.strides().back() != 1 || !dense(r)) r = r.contiguous();
  return r;
}

kernels::AttnParams params_for(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o) {
  kernels::AttnParams p;
  p.B = q.shape()[0];
  p.H = q.shape()[1];
  p.H_kv = k.shape()[1];
  p.Lq = q.shape()[2];
  p.Lk = k.shape()[2];
  p.D = q.shape()[3];
  p.Dv = v.shape()[3];
  p.q_sb = q.strides()[0], p.q_sh = q.strides()[1], p.q_st = q.strides()[2];
  p.k_sb = k.strides()[0], p.k_sh = k.strides()[1], p.k_st = k.strides()[2];
  p.v_sb = v.strides()[0], p.v_sh = v.strides()[1], p.v_st = v.strides()[2];
  p.o_sb = o.strides()[0], p.o_sh = o.strides()[1], p.o_st = o.strides()[2];
  return p;
}

// The tiled kernel with autograd. q/k/v have rank <= 4 (missing leading dims are 1).
Tensor flash_sdpa(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Mask& mask, double scale,
                  const SdpaOptions& opt) {
  Tensor q = as_bhld(q_in), k = as_bhld(k_in), v = as_bhld(v_in);
  // O takes q's memory order: for heads split from [B, L, H, D] projections (MHA) it is stored
  // [B, L, H, Dv], so merging the heads back (transpose + reshape) is a view, not a copy.
  Tensor o = empty_in_order_of(q, {q.shape()[0], q.shape()[1], q.shape()[2], v.shape()[3]});
  Tensor lse = Tensor::empty({q.shape()[0], q.shape()[1], q.shape()[2]}, DType::F32);
  kernels::AttnParams p = params_for(q, k, v, o);
  p.scale = static_cast<float>(scale);
  p.causal = mask.has_causal();
  p.window = opt.sliding_window;
  Shape ss = q_in.shape();
  ss.back() = k_in.shape()[k_in.dim() - 2];
  Tensor bias = mask.to_bias_without_causal(ss, DType::F32, kOp);
  if (bias.defined()) {
    while (bias.dim() < 4) bias = bias.unsqueeze(0);
    p.bias = bias.data<float>();
    p.bias_sb = bias.shape()[0] == 1 ? 0 : bias.strides()[0];
    p.bias_sh = bias.shape()[1] == 1 ? 0 : bias.strides()[1];
    p.bias_si = bias.strides()[2];
    p.bias_sj = bias.strides()[3];
  }
  if (opt.dropout_p > 0) {
    Generator& g = opt.generator ? *opt.generator : default_generator();
    p.dropout_p = static_cast<float>(opt.dropout_p);
    p.seed = g.seed();
    p.offset = g.reserve(static_cast<std::uint64_t>(p.B * p.H * p.Lq * p.Lk));
  }
  if (o.numel() > 0)
    kernels::flash_attention_forward(o.data<float>(), lse.data<float>(), q.data<float>(), k.data<float>(),
                                     v.data<float>(), p);
  Shape os(q_in.shape().begin(), q_in.shape().end() - 1);
  os.push_back(v.shape()[3]);
  Tensor out = (os == o.shape() ? o : o.reshape(os)).detach();
  autograd::record(out, "scaled_dot_product_attention", {q_in, k_in, v_in},
                   [q, k, v, o, lse, bias, p, qs = q_in.shape(), ks = k_in.shape(), vs = v_in.shape()](const Tensor& g) {
                     // FlashAttention-2 backward: recompute P from LSE; dV = P^T dO, dS = P (dP - rowsum(dO o O)),
                     // dQ = scale dS K, dK = scale dS^T Q.
                     // The kernel reads dO with O's strides: g usually arrives in that layout already
                     // (the transpose of MHA's head merge); otherwise it is copied into it.
                     Tensor dO = g.dim() == o.dim() ? g : g.reshape(o.shape());
                     if (dO.strides() != o.strides()) {
                       Tensor t = empty_like_layout(o);
                       t.copy_(dO);
                       dO = t;
                     }
                     Tensor dq = empty_like_layout(q), dk = empty_like_layout(k), dv = empty_like_layout(v);
                     if (q.numel() > 0 && k.numel() > 0)
                       kernels::flash_attention_backward(dq.data<float>(), dk.data<float>(), dv.data<float>(),
                                                         dO.data<float>(), q.data<float>(), k.data<float>(),
                                                         v.data<float>(), o.data<float>(), lse.data<float>(), p);
                     else {
                       dq.fill_(0.0);
                       dk.fill_(0.0);
                       dv.fill_(0.0);
                     }
                     return std::vector<Tensor>{dq.reshape(qs), dk.reshape(ks), dv.reshape(vs)};
                   });
  return out;
}

}  // namespace

AttentionOutput scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Mask& mask,
                                             const SdpaOptions& opt) {
  const std::int64_t group = check_qkv(q, k, v, opt.enable_gqa);
  if (!(opt.dropout_p >= 0.0 && opt.dropout_p < 1.0))
    throw ValueError(std::string(kOp) + ": dropout_p must be in [0, 1), got " + std::to_string(opt.dropout_p));
  if (opt.sliding_window < 0)
    throw ValueError(std::string(kOp) + ": sliding_window must be >= 0 (0: none), got " +
                     std::to_string(opt.sliding_window));
  const std::int64_t D = q.shape().back();
  const double scale = opt.scale ? *opt.scale : (D > 0 ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0);
  Shape ss = q.shape();
  ss.back() = k.shape()[k.dim() - 2];
  mask.check(ss, kOp);

  // Fast path: FlashAttention-2-style tiled kernel (fp32, weights not requested).
  if (!opt.need_weights && q.dtype() == DType::F32 && q.dim() <= 4 && D <= 256 && v.shape().back() <= 256 &&
      D > 0 && v.shape().back() > 0)
    return {flash_sdpa(q, k, v, mask, scale, opt), Tensor()};

  // Math path: scores = q k^T * scale (+ mask); weights = softmax; out = dropout(weights) v.
  // Grouped heads are copied per query head here; the window is one more keep mask.
  const Tensor kh = repeat_heads(k, group), vh = repeat_heads(v, group);
  const Mask full = opt.sliding_window > 0 ? mask & Mask::keep(window_keep(ss[ss.size() - 2], ss.back(),
                                                                            opt.sliding_window))
                                           : mask;
  Tensor scores = mul(matmul(q, kh.transpose(-2, -1)), scale);
  if (!full.empty()) scores = add(scores, full.to_bias(ss, q.dtype(), kOp));
  Tensor weights = softmax(scores, -1);
  Tensor attn = opt.dropout_p > 0 ? dropout(weights, opt.dropout_p, true, opt.generator) : weights;
  AttentionOutput r;
  r.output = matmul(attn, vh);
  if (opt.need_weights) r.weights = weights;
  return r;
}

}  // namespace qkv
