// Models written as GGUF files that llama.cpp and gguf-py load (the tensor names, metadata and
// layouts of llama.cpp's convert_hf_to_gguf.py): the Llama family (architecture llama for Llama
// and Mistral, with attn_q / attn_k rows permuted for llama.cpp's RoPE; qwen2) and GPT-2
// (architecture gpt2). Weights keep their stored type or are converted to one GGML type
// (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1); norms and biases are F32.
#pragma once
#include <optional>
#include <string>

#include "qkv/io/gguf_writer.h"
#include "qkv/kernels/quant.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/llama.h"
#include "qkv/tokenize/gguf_vocab.h"

namespace qkv::models {

// The tokenizer.ggml.* keys of a vocabulary (and the chat template when not empty).
io::GGUFMetadata gguf_tokenizer_metadata(const tokenize::GgufVocab& v, const std::string& chat_template);

// The GGUF vocabulary of a Hugging Face folder's tokenizer: tokenizer.json (model BPE with its
// vocab and merges, added tokens: special ones as control tokens, the others user-defined) or
// vocab.json + merges.txt, with llama.cpp's pre-tokenizer type found by running every type qkv
// knows against the folder's own pre-tokenizer on probe texts (FormatError when none matches).
tokenize::GgufVocab gguf_vocab_from_folder(const std::string& dir);

// Writes `m` as GGUF (atomically). type: convert every weight matrix to it (nullopt: keep each
// matrix's stored type). name: general.name. ValueError naming the tensor when a matrix's rows
// are not a multiple of the type's block.
void save_llama_gguf(const LlamaForCausalLM& m, const std::string& path, std::optional<kernels::QType> type,
                     const io::GGUFMetadata& tokenizer, const std::string& name);
void save_gpt2_gguf(const GPT2LMHeadModel& m, const std::string& path, kernels::QType type,
                    const io::GGUFMetadata& tokenizer, const std::string& name);

}  // namespace qkv::models
