// Attention maps of a pretrained Hugging Face model folder on a text (qkv heatmap --model):
// the folder's own tokenizer, one forward pass, every layer's weights per head, as
// transformers' output_attentions=True gives them (softmax over the keys after the mask;
// GPT-2 causal, BERT over all tokens of the text).
//
//   auto a = models::text_attention("models/all-MiniLM-L6-v2", "I love NLP");
//   // a.tokens = [CLS] i love nl ##p [SEP]; a.layers[l] is [H, 6, 6]
//   auto maps = models::text_attention_maps(a, {0, 5}, {});   // layers 0 and 5, every head
//
// Every decoder architecture of the registry is drawn from a folder or a GGUF file
// (DecoderLM::attention_weights); GPT-2 and BERT folders by their own readers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "qkv/core/tensor.h"
#include "qkv/models/attention_maps.h"

namespace qkv::models {

struct TextAttention {
  std::string model_type;            // config.json's model_type or the GGUF architecture ("gpt2", "qwen3", ...)
  std::string family;                // how it is named ("GPT-2", "Qwen3", ...)
  std::vector<std::int64_t> ids;     // [T] the tokenizer's ids (BERT: [CLS] ... [SEP] included)
  std::vector<std::string> tokens;   // T readable labels (readable_token for byte-level BPE)
  std::vector<Tensor> layers;        // per layer: float32 [H, T, T], rows sum to 1 (undefined: no map)
  bool causal = false;               // keys after the query have weight 0
  // The layers without an attention map (Qwen3.5's Gated DeltaNet: linear attention over a
  // recurrent state, no softmax over the keys).
  std::vector<std::int64_t> linear_layers;
};

// Reads PATH (a folder: config.json's model_type picks the reader; a GGUF file of a decoder),
// tokenizes `text` with the model's tokenizer (as transformers' tokenizer(text): GPT-2 byte-level
// BPE with no special token; BERT WordPiece with [CLS] and [SEP]; a decoder's BOS where its
// tokenizer adds one) and runs the model once without gradients. Checks the memory the maps take before
// allocating them. ValueError for a family qkv cannot draw (naming it and the families it
// can), an empty text, or more tokens than the model has positions; the loaders' errors for
// a damaged folder.
TextAttention text_attention(const std::string& path, const std::string& text);
// The model_types text_attention reads (every causal LM of the registry, and BERT), sorted.
std::vector<std::string> text_attention_families();

// The selected layers and heads (empty: all) as AttentionMaps for the heatmap and explorer
// writers: name "layers.{l}.attention", kind "self", head_ids the model's head numbers. All
// layers: those with a map. ValueError naming a layer or head outside the model, or a linear
// layer asked for (it has no map; the message lists the layers that have one).
std::vector<AttentionMap> text_attention_maps(const TextAttention& a, const std::vector<std::int64_t>& layers,
                                              const std::vector<std::int64_t>& heads);

// A byte-level BPE token's bytes as a readable label: UTF-8 text as is, a byte that is not
// part of a valid UTF-8 character as <0xNN>, "\n", "\t", "\r" for those, other control bytes
// as <0xNN> (so " the" stays " the", not GPT-2's "Ġthe").
std::string readable_token(const std::string& bytes);

}  // namespace qkv::models
