// SmolLM3: transformers' SmolLM3ForCausalLM: Llama's layout where some layers use no RoPE at all
// (no_rope_layers[i] == 0; by default every no_rope_layer_interval-th layer, 4). llama.cpp's
// architecture smollm3 (q / k rows permuted as llama's) fixes the interval at 4, so a GGUF file
// reads every fourth layer (3, 7, ...) as NoPE.
#include <fmt/format.h>

#include "../hf_json.h"
#include "common.h"

namespace qkv::models {
namespace {

Architecture smollm3() {
  Architecture a = arch::llama_layout("smollm3", "SmolLM3", "smollm3", /*interleaved_rope=*/true);
  a.from_config = [](const nlohmann::json& j, const std::string& src) {
    DecoderSpec c = arch::spec_from_config(j, src, {.tie_word_embeddings = true, .max_position_embeddings = 32768});
    const std::int64_t L = c.num_layers();
    std::vector<bool> rope(static_cast<std::size_t>(L));
    if (auto it = j.find("no_rope_layers"); it != j.end() && !it->is_null()) {
      if (!it->is_array() || static_cast<std::int64_t>(it->size()) != L)
        hf::bad(src, fmt::format("no_rope_layers must give the {} layers a 0 or 1, got {}", L, it->dump()));
      for (std::size_t i = 0; i < rope.size(); ++i) {
        const nlohmann::json& v = (*it)[i];
        if (!v.is_number_integer() || (v.get<int>() != 0 && v.get<int>() != 1))
          hf::bad(src, fmt::format("no_rope_layers[{}] is {} (1: RoPE, 0: none)", i, v.dump()));
        rope[i] = v.get<int>() == 1;
      }
    } else {
      const std::int64_t every = hf::get_int(j, "no_rope_layer_interval", src, 4);
      for (std::int64_t i = 0; i < L; ++i) rope[static_cast<std::size_t>(i)] = (i + 1) % every != 0;
    }
    const auto sliding = arch::sliding_layers(j, L, src);
    const bool use_window = hf::get_bool(j, "use_sliding_window", src, false);
    for (std::int64_t i = 0; i < L; ++i) {
      LayerSpec& l = c.layers[static_cast<std::size_t>(i)];
      const bool has_rope = rope[static_cast<std::size_t>(i)];
      l.rope = has_rope ? 0 : -1;
      // transformers: sliding where layer_types says so, else (use_sliding_window) on NoPE layers.
      const bool slides = sliding ? (*sliding)[static_cast<std::size_t>(i)] : use_window && !has_rope;
      if (slides && use_window && j.contains("sliding_window") && !j["sliding_window"].is_null())
        l.window = hf::get_int(j, "sliding_window", src);
    }
    return c;
  };
  a.gguf_metadata = [](const DecoderSpec& c, const std::string&, io::GGUFMetadata&) {
    for (std::size_t i = 0; i < c.layers.size(); ++i)
      if ((c.layers[i].rope >= 0) != ((i + 1) % 4 != 0))
        throw ValueError(fmt::format("convert: layer {} {} RoPE, but a smollm3 GGUF file has no key for NoPE layers: "
                                     "llama.cpp takes every fourth layer (3, 7, ...) as the NoPE ones",
                                     i, c.layers[i].rope >= 0 ? "has" : "has no"));
  };
  a.from_gguf = [](const io::GGUFFile& f) {
    DecoderSpec c = arch::spec_from_gguf(f, *find_architecture("smollm3"));
    for (std::size_t i = 0; i < c.layers.size(); ++i) c.layers[i].rope = (i + 1) % 4 != 0 ? 0 : -1;
    return c;
  };
  return a;
}

}  // namespace

QKV_REGISTER_ARCH(smollm3, smollm3())

}  // namespace qkv::models
