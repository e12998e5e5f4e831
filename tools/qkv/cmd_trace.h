// qkv trace: the second tutorial's walkthrough of one encoder forward pass.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>

namespace qkv::tool {

struct TraceOptions {
  std::string sentence = "I love NLP";
  std::int64_t d_model = 512;
  std::int64_t heads = 8;
  std::int64_t d_ff = 2048;
  std::int64_t layers = 1;
  std::int64_t values = 0;  // print the first N numbers of every step's tensor
  std::uint64_t seed = 0;
};

// Builds a word-level vocab from the sentence, an embedding, the sinusoidal
// positional encoding and `layers` post-norm encoder blocks (random weights,
// seeded), then computes the forward pass step by step with the library's
// ops on the blocks' own weights, printing each step's shapes, and checks the
// result against block.forward(). Throws qkv::Error on invalid settings
// (e.g. d_model not divisible by heads) before printing anything.
int run_trace(const TraceOptions& opt, std::ostream& out);

}  // namespace qkv::tool
