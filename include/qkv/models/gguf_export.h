// GPT-2 models written as GGUF files that llama.cpp and gguf-py load (the tensor names, metadata
// and layouts of llama.cpp's convert_hf_to_gguf.py; architecture gpt2). The decoders' writer is
// models/decoder_io.h; tokenizer metadata tokenize/gguf_vocab.h. Matrices F32 or converted as
// llama-quantize would; norms and biases are F32.
#pragma once
#include <optional>
#include <string>

#include "qkv/io/gguf_writer.h"
#include "qkv/kernels/quant.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/quant_mix.h"
#include "qkv/tokenize/gguf_vocab.h"

namespace qkv::models {

// Writes `m` as GGUF (atomically): its weights as F32, or converted as llama-quantize converts
// them for a file of quant.ftype (models/quant_mix.h). name: general.name.
void save_gpt2_gguf(const GPT2LMHeadModel& m, const std::string& path, const GgufQuant& quant,
                    const io::GGUFMetadata& tokenizer, const std::string& name);

}  // namespace qkv::models
