// Positional encodings: the tutorials' sinusoidal table and a learned table.
#pragma once
#include "qkv/nn/layers.h"

namespace qkv::nn {

struct SinusoidalPositionalEncodingOptions {
  std::int64_t d_model = 0;
  std::int64_t max_len = 512;
  DType dtype = DType::F32;
};

// pe[pos, 2i] = sin(pos / 10000^(2i/d)), pe[pos, 2i+1] = cos(pos / 10000^(2i/d))
// (interleaved, as in both tutorials). Not a parameter and not saved; works for
// inputs of any float dtype (computed in float64 and converted).
// forward: x [B, L, d_model] -> x + pe[start : start+L]; start+L > max_len is a ValueError.
class SinusoidalPositionalEncoding : public Module {
 public:
  explicit SinusoidalPositionalEncoding(const SinusoidalPositionalEncodingOptions& o);
  Tensor forward(const Tensor& x, std::int64_t start = 0) const;
  // The table [max_len, d_model].
  const Tensor& table() const { return pe_; }
  const SinusoidalPositionalEncodingOptions& options() const { return opt_; }

 private:
  SinusoidalPositionalEncodingOptions opt_;
  Tensor pe_;    // in opt_.dtype
  Tensor pe64_;  // float64 master: other dtypes convert from it, never from a rounded copy
};

// The table alone: [max_len, d_model].
Tensor sinusoidal_table(std::int64_t max_len, std::int64_t d_model, DType dtype = DType::F32);

struct LearnedPositionalEncodingOptions {
  std::int64_t max_len = 512;
  std::int64_t d_model = 0;
  DType dtype = DType::F32;
};

// A learned table `pe.weight` [max_len, d_model] ~ N(0, 0.02) (BERT/GPT-2 style).
// forward: x [B, L, d_model] -> x + pe.weight[start : start+L].
class LearnedPositionalEncoding : public Module {
 public:
  explicit LearnedPositionalEncoding(const LearnedPositionalEncodingOptions& o);
  Tensor forward(const Tensor& x, std::int64_t start = 0) const;
  std::shared_ptr<Embedding> pe;

 private:
  LearnedPositionalEncodingOptions opt_;
};

}  // namespace qkv::nn
