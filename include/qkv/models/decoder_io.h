// Decoder models from and to files, for every architecture of the registry (models/registry.h):
// Hugging Face folders (config.json + model.safetensors, or shards named by
// model.safetensors.index.json; F32, F16 and BF16 weights) and GGUF files (llama.cpp's names and
// metadata; the GGML tensor types of kernels/quant.h), read through the architecture's one table
// of tensor names (src/models/arch/) and written back through the same table.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "qkv/io/gguf_writer.h"
#include "qkv/kernels/quant.h"
#include "qkv/models/decoder.h"
#include "qkv/models/quant_mix.h"

namespace qkv::io {
class GGUFFile;
}

namespace qkv::models {

// The spec of a config.json's text (its model_type picks the architecture). FormatError naming
// `source` and the field for malformed JSON, a missing or mistyped field, an unsupported value
// or model_type (listing the supported ones), a spec whose options contradict each other.
DecoderSpec decoder_spec_from_config(const std::string& text, const std::string& source);
// The spec of a GGUF file's metadata (general.architecture picks the architecture).
DecoderSpec decoder_spec_from_gguf(const io::GGUFFile& f);

// What a GGUF decoder holds and what a token costs, from the tensor table alone (qkv inspect):
// every parameter; those a token uses (a mixture's router and k of its E experts: tensors of
// E 3-D blocks count k / E); the bytes of weights one decode step reads (the active matrices
// and vectors but the token embedding, of which a step reads one row).
struct DecoderFootprint {
  std::int64_t parameters = 0;
  std::int64_t active_parameters = 0;
  std::int64_t decode_bytes = 0;
};
DecoderFootprint decoder_footprint(const io::GGUFFile& f, const DecoderSpec& spec);

// Loads a decoder from a Hugging Face folder or a GGUF file. IOError / FormatError naming the
// file and the weight: missing, unexpected or wrongly shaped tensors are listed together; an
// unsupported architecture or tensor type is named with the supported ones.
std::shared_ptr<DecoderLM> load_decoder(const std::string& path);
std::shared_ptr<DecoderLM> load_decoder_gguf(std::shared_ptr<const io::GGUFFile> file);

// Writes `m` as GGUF (atomically), with the names, metadata and layouts of llama.cpp's
// convert_hf_to_gguf.py for its architecture (llama.cpp and gguf-py load it). quant: each tensor
// in its stored type, or converted to the type llama-quantize gives it in a file of quant.ftype
// (models/quant_mix.h: Q4_K_M's Q6_K attn_v and ffn_down every few layers, ..., each block as
// ggml quantizes it); norms and biases are F32. general.file_type: quant.ftype, or the file type
// of the matrices' most common type. name: general.name.
void save_decoder_gguf(const DecoderLM& m, const std::string& path, const GgufQuant& quant,
                       const io::GGUFMetadata& tokenizer, const std::string& name);

}  // namespace qkv::models
