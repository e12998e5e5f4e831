// The README's example, built against the installed package.
#include <iostream>

#include "qkv/qkv.h"

int main() {
  qkv::manual_seed(0);
  qkv::nn::MultiHeadAttention mha({.embed_dim = 12, .num_heads = 4});
  qkv::Tensor x = qkv::Tensor::randn({2, 6, 12});  // (B, L, E)
  auto [out, weights] = mha.forward(x, x, x, qkv::Mask::causal(), /*need_weights=*/true);
  std::cout << "output  " << out.shape_str() << "\n";      // [2,6,12]
  std::cout << "weights " << weights.shape_str() << "\n";  // [2,4,6,6]  (B, H, Lq, Lk)
  qkv::sum(out).backward();                                // autograd
  std::cout << "dW_q    " << mha.w_q->weight.grad().shape_str() << "\n";  // [12,12]
  return out.shape() == qkv::Shape{2, 6, 12} && weights.shape() == qkv::Shape{2, 4, 6, 6} ? 0 : 1;
}
