#include "qkv/nn/positional.h"

#include <cmath>

#include "qkv/ops/elementwise.h"
#include "qkv/ops/shape_ops.h"

namespace qkv::nn {

namespace {
void check_x(const Tensor& x, std::int64_t d_model, std::int64_t max_len, std::int64_t start, const char* who) {
  if (x.dim() != 3 || x.shape()[2] != d_model)
    throw ShapeError(std::string(who) + ": expected x [B, L, " + std::to_string(d_model) + "], got " + x.shape_str());
  if (start < 0) throw ValueError(std::string(who) + ": start must be >= 0, got " + std::to_string(start));
  if (start + x.shape()[1] > max_len)
    throw ValueError(std::string(who) + ": positions " + std::to_string(start) + ".." +
                     std::to_string(start + x.shape()[1] - 1) + " exceed max_len " + std::to_string(max_len) +
                     " (sequence length " + std::to_string(x.shape()[1]) + "); build it with a larger max_len");
}
}  // namespace

Tensor sinusoidal_table(std::int64_t max_len, std::int64_t d, DType dtype) {
  if (max_len < 0 || d <= 0)
    throw ValueError("sinusoidal_table: need max_len >= 0 and d_model > 0, got max_len=" + std::to_string(max_len) +
                     " d_model=" + std::to_string(d));
  Tensor pe = Tensor::zeros({max_len, d}, DType::F64);
  double* p = pe.data<double>();
  for (std::int64_t pos = 0; pos < max_len; ++pos)
    for (std::int64_t i = 0; i < d; i += 2) {
      // div_term = exp(2i * -ln(10000) / d), as the tutorials compute it
      const double div = std::exp(static_cast<double>(i) * (-std::log(10000.0) / static_cast<double>(d)));
      p[pos * d + i] = std::sin(static_cast<double>(pos) * div);
      if (i + 1 < d) p[pos * d + i + 1] = std::cos(static_cast<double>(pos) * div);
    }
  return pe.to(dtype);
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(const SinusoidalPositionalEncodingOptions& o)
    : opt_(o), pe64_(sinusoidal_table(o.max_len, o.d_model, DType::F64)) {
  pe_ = pe64_.to(o.dtype);
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, std::int64_t start) const {
  check_x(x, opt_.d_model, opt_.max_len, start, "SinusoidalPositionalEncoding");
  Tensor table = pe_.dtype() == x.dtype() ? pe_ : pe64_.to(x.dtype());
  return add(x, table.narrow(0, start, x.shape()[1]));
}

LearnedPositionalEncoding::LearnedPositionalEncoding(const LearnedPositionalEncodingOptions& o) : opt_(o) {
  pe = register_module("pe", std::make_shared<Embedding>(EmbeddingOptions{.num_embeddings = o.max_len,
                                                                          .embedding_dim = o.d_model,
                                                                          .dtype = o.dtype}));
  if (!skip_init()) {
    // N(0, 0.02) as in BERT / GPT-2 initialisation.
    Tensor w = Tensor::randn({o.max_len, o.d_model}, nullptr, o.dtype);
    pe->weight.copy_(mul(w, 0.02).detach());
  }
}

Tensor LearnedPositionalEncoding::forward(const Tensor& x, std::int64_t start) const {
  check_x(x, opt_.d_model, opt_.max_len, start, "LearnedPositionalEncoding");
  return add(x, pe->weight.narrow(0, start, x.shape()[1]));
}

}  // namespace qkv::nn
