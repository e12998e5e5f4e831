// qkv bench generate (registered by cmd_bench.cpp): see cmd_bench_generate.cpp.
#pragma once
#include <cstdint>
#include <string>

#include "draft_flags.h"

namespace qkv::tool {

struct BenchGenerateOptions {
  std::string model;  // any causal LM qkv loads (a folder or GGUF file of the registry), or empty: a random GPT-2 of the sizes below
  std::int64_t layers = 12, d_model = 768, heads = 12, vocab = 50257, positions = 1024;
  std::int64_t batch = 1, prompt_len = 16, new_tokens = 256;
  std::string prompt_ids;  // a file of B lines of P ids (the same prompts as another engine); empty: seeded random
  std::uint64_t seed = 0;
  int repeat = 3;
  std::int64_t bandwidth_mb = 512;  // buffer of the read-bandwidth measurement (well past the caches)
  bool no_cache = false, json = false;
  std::string kv_cache = "f32";     // the KV cache's element type: f32 | f16
  std::string activations = "f32";  // Llama family: f32 (exact) | q8 (activations quantized per 32, integer products)
  DraftFlags draft;                 // speculative decoding, timed beside plain decoding
};

int run_bench_generate(const BenchGenerateOptions& o);

}  // namespace qkv::tool
