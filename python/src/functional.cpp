// The functional ops, PyTorch-named: arguments imported without copies, the library op run with
// the GIL released, the result exported as the kind of array the first argument was.
// (Signatures, defaults and docstrings: python/qkv/functional.py.)
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/ops/attention.h"
#include "qkv/ops/nn_functional.h"
#include "qkv/ops/rotary.h"

namespace qkv::python {
namespace {

// attn_mask as PyTorch's scaled_dot_product_attention reads it: bool True = may attend, a float
// mask is added to the scores. is_causal as PyTorch: query i sees keys j <= i, aligned top-left
// (when Lq != Lk this differs from the library's Mask::causal, which aligns bottom-right for
// KV-cache decoding, so that case is spelled out as a keep mask).
Mask torch_mask(const char* op, nb::handle attn_mask, bool is_causal, const Tensor& q, const Tensor& k) {
  Mask mask;
  if (!attn_mask.is_none()) {
    const Imported m = import_array(attn_mask, op, "attn_mask");
    if (m.t.dtype() == DType::Bool)
      mask = Mask::keep(m.t);
    else if (is_floating(m.t.dtype()))
      mask = Mask::additive(m.t);
    else
      throw TypeError(std::string(op) + ": attn_mask must be bool (True = attend) or float (added to the scores), got " +
                      dtype_name(m.t.dtype()) + " " + m.t.shape_str());
  }
  if (is_causal) {
    if (q.dim() < 2 || k.dim() < 2)
      throw ShapeError(std::string(op) + ": is_causal needs query and key of rank >= 2, got " + q.shape_str() + " and " +
                       k.shape_str());
    const std::int64_t Lq = q.size(-2), Lk = k.size(-2);
    if (Lq == Lk) {
      mask = mask & Mask::causal();
    } else {
      Tensor keep = Tensor::zeros({Lq, Lk}, DType::Bool);
      bool* p = keep.data<bool>();
      for (std::int64_t i = 0; i < Lq; ++i)
        for (std::int64_t j = 0; j <= i && j < Lk; ++j) p[i * Lk + j] = true;
      mask = mask & Mask::keep(keep);
    }
  }
  return mask;
}

nb::object with_weights(const AttentionOutput& a, Kind kind, bool need_weights) {
  nb::object out = export_array(a.output, kind);
  if (!need_weights) return out;
  return nb::make_tuple(out, export_array(a.weights, kind));
}

Shape as_shape(const std::vector<std::int64_t>& v) { return Shape(v.begin(), v.end()); }

}  // namespace

void register_functional(nb::module_& m) {
  m.def("_scaled_dot_product_attention",
        [](nb::handle query, nb::handle key, nb::handle value, nb::handle attn_mask, double dropout_p, bool is_causal,
           std::optional<double> scale, bool enable_gqa, bool need_weights) {
          const char* op = "scaled_dot_product_attention";
          const Imported q = import_array(query, op, "query"), k = import_array(key, op, "key"),
                         v = import_array(value, op, "value");
          const Mask mask = torch_mask(op, attn_mask, is_causal, q.t, k.t);
          AttentionOutput a;
          {
            nb::gil_scoped_release release;
            a = scaled_dot_product_attention(
                q.t, k.t, v.t, mask,
                SdpaOptions{.dropout_p = dropout_p, .scale = scale, .need_weights = need_weights, .enable_gqa = enable_gqa});
          }
          return with_weights(a, q.kind, need_weights);
        },
        nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("attn_mask").none(), nb::arg("dropout_p"),
        nb::arg("is_causal"), nb::arg("scale").none(), nb::arg("enable_gqa"), nb::arg("need_weights"));

  m.def("_multi_head_attention",
        [](nb::handle query, nb::handle key, nb::handle value, std::int64_t num_heads, nb::handle w_q, nb::handle w_k,
           nb::handle w_v, nb::handle w_o, nb::handle b_q, nb::handle b_k, nb::handle b_v, nb::handle b_o,
           nb::handle attn_mask, bool is_causal, bool need_weights, double dropout_p) {
          const char* op = "multi_head_attention";
          const Imported q = import_array(query, op, "query"), k = import_array(key, op, "key"),
                         v = import_array(value, op, "value");
          const MultiHeadAttentionWeights w{
              .w_q = import_array(w_q, op, "w_q").t, .w_k = import_array(w_k, op, "w_k").t,
              .w_v = import_array(w_v, op, "w_v").t, .w_o = import_array(w_o, op, "w_o").t,
              .b_q = import_optional(b_q, op, "b_q").t, .b_k = import_optional(b_k, op, "b_k").t,
              .b_v = import_optional(b_v, op, "b_v").t, .b_o = import_optional(b_o, op, "b_o").t};
          const Mask mask = torch_mask(op, attn_mask, is_causal, q.t, k.t);
          AttentionOutput a;
          {
            nb::gil_scoped_release release;
            a = multi_head_attention(q.t, k.t, v.t, w, num_heads, mask,
                                     SdpaOptions{.dropout_p = dropout_p, .need_weights = need_weights});
          }
          return with_weights(a, q.kind, need_weights);
        },
        nb::arg("query"), nb::arg("key"), nb::arg("value"), nb::arg("num_heads"), nb::arg("w_q"), nb::arg("w_k"),
        nb::arg("w_v"), nb::arg("w_o"), nb::arg("b_q").none(), nb::arg("b_k").none(), nb::arg("b_v").none(),
        nb::arg("b_o").none(), nb::arg("attn_mask").none(), nb::arg("is_causal"), nb::arg("need_weights"),
        nb::arg("dropout_p"));

  m.def("_softmax", [](nb::handle input, std::int64_t dim) {
    const Imported x = import_array(input, "softmax", "input");
    Tensor y;
    {
      nb::gil_scoped_release release;
      y = softmax(x.t, dim);
    }
    return export_array(y, x.kind);
  }, nb::arg("input"), nb::arg("dim"));

  m.def("_layer_norm", [](nb::handle input, const std::vector<std::int64_t>& normalized_shape, nb::handle weight,
                          nb::handle bias, double eps) {
    const char* op = "layer_norm";
    const Imported x = import_array(input, op, "input");
    const Tensor w = import_optional(weight, op, "weight").t, b = import_optional(bias, op, "bias").t;
    Tensor y;
    {
      nb::gil_scoped_release release;
      y = layer_norm(x.t, as_shape(normalized_shape), w, b, eps);
    }
    return export_array(y, x.kind);
  }, nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight").none(), nb::arg("bias").none(), nb::arg("eps"));

  m.def("_rms_norm", [](nb::handle input, const std::vector<std::int64_t>& normalized_shape, nb::handle weight,
                        std::optional<double> eps) {
    const char* op = "rms_norm";
    const Imported x = import_array(input, op, "input");
    const Tensor w = import_optional(weight, op, "weight").t;
    Tensor y;
    {
      nb::gil_scoped_release release;
      y = rms_norm(x.t, as_shape(normalized_shape), w, eps);
    }
    return export_array(y, x.kind);
  }, nb::arg("input"), nb::arg("normalized_shape"), nb::arg("weight").none(), nb::arg("eps").none());

  m.def("_apply_rotary_emb", [](nb::handle input, nb::handle positions, double base, std::int64_t rotary_dim,
                                bool interleaved, const std::string& scaling, double factor, double low_freq_factor,
                                double high_freq_factor, double original_max_positions) {
    const char* op = "apply_rotary_emb";
    const Imported x = import_array(input, op, "x");
    const Tensor pos = import_optional(positions, op, "positions").t;
    RotaryOptions o{.base = base, .rotary_dim = rotary_dim,
                    .style = interleaved ? kernels::RopeStyle::Interleaved : kernels::RopeStyle::Half};
    if (scaling == "linear")
      o.scaling = {.type = kernels::RopeScaling::Type::Linear, .factor = factor};
    else if (scaling == "llama3")
      o.scaling = {.type = kernels::RopeScaling::Type::Llama3, .factor = factor, .low_freq_factor = low_freq_factor,
                   .high_freq_factor = high_freq_factor, .original_max_positions = original_max_positions};
    else if (scaling != "default")
      throw ValueError(std::string(op) + ": scaling rope_type must be 'default', 'linear' or 'llama3', got '" + scaling + "'");
    Tensor y;
    {
      nb::gil_scoped_release release;
      y = apply_rotary_emb(x.t, pos, o);
    }
    return export_array(y, x.kind);
  }, nb::arg("x"), nb::arg("positions").none(), nb::arg("base"), nb::arg("rotary_dim"), nb::arg("interleaved"),
     nb::arg("scaling"), nb::arg("factor"), nb::arg("low_freq_factor"), nb::arg("high_freq_factor"),
     nb::arg("original_max_positions"));

  m.def("manual_seed", [](std::uint64_t seed) { qkv::manual_seed(seed); }, nb::arg("seed"),
        "Seeds qkv's default random generator (dropout in the functional ops), as torch.manual_seed.");
}

}  // namespace qkv::python
