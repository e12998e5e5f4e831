// Decoder models from Hugging Face folders and GGUF files (see decoder_io.h): the spec from the
// architecture's reader, the weights viewed in place through its table of tensor names.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../arch/arch.h"
#include "../hf_json.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"
#include "qkv/io/safetensors.h"
#include "qkv/models/decoder_io.h"
#include "tensor_slots.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;
using json = nlohmann::json;
namespace fs = std::filesystem;

std::string list(const std::vector<std::string>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < 12; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > 12) out += fmt::format(", ... ({} more)", v.size() - 12);
  return out;
}

// The tensors of a model by name, wherever they come from (PyTorch order shapes).
struct TensorSource {
  kernels::QType type;
  const void* data;
  Shape shape;
};

// A slot whose floats form a matrix: the experts' biases [E, n], the shared expert's gate [1, C].
bool expert_vector_slot(Slot s) {
  return s == Slot::ExpertGateBias || s == Slot::ExpertUpBias || s == Slot::ExpertDownBias || s == Slot::SharedExpertGate;
}

struct OwnedFloats {
  std::vector<std::vector<float>> v;
};

const Architecture& architecture_of_model_type(const std::string& model_type, const std::string& src) {
  const ModelFamily* f = find_model_family(model_type);
  const Architecture* a = f && f->decoder ? find_architecture(f->name) : nullptr;
  if (!a)
    hf::bad(src, fmt::format("model_type \"{}\" is not a decoder architecture qkv runs ({})", model_type,
                             model_types_list(ModelRole::CausalLM)));
  return *a;
}

const Architecture& architecture_of_gguf(const io::GGUFFile& f) {
  const std::string arch(f.get_string("general.architecture"));
  const ModelFamily* fam = find_gguf_family(arch);
  const Architecture* a = fam && fam->decoder ? find_architecture(fam->name) : nullptr;
  if (!a)
    throw FormatError(fmt::format("{}: GGUF architecture '{}' is not one qkv runs ({})", f.source(), arch,
                                  gguf_architectures_list()));
  return *a;
}

// The weights of `spec` from the tensors `t`, through the architecture's table: every tensor
// the spec needs present with its shape and a usable type, none left over. Fills the spec's RoPE
// tensors (rope_freqs, LongRope's factors of GGUF files).
DecoderWeights assemble(DecoderSpec& c, const Architecture& a, const std::map<std::string, TensorSource>& t,
                        const std::string& source, bool gguf) {
  auto owned = std::make_shared<OwnedFloats>();
  DecoderWeights w;
  w.layers.resize(static_cast<std::size_t>(c.num_layers()));
  std::vector<std::string> missing, wrong;
  std::set<std::string> used;
  auto find = [&](const std::string& name, const Shape& shape, bool matrix) -> const TensorSource* {
    auto it = t.find(name);
    if (it == t.end()) {
      missing.push_back(name);
      return nullptr;
    }
    used.insert(name);
    const TensorSource& s = it->second;
    if (s.shape != shape) {
      wrong.push_back(fmt::format("{} is {}, the config needs {}", name, shape_str(s.shape), shape_str(shape)));
      return nullptr;
    }
    const bool is_float = s.type == kernels::QType::F32 || s.type == kernels::QType::F16 || s.type == kernels::QType::BF16;
    if (!matrix && !is_float) {
      wrong.push_back(fmt::format("{} has type {} (a vector must be F32, F16 or BF16)", name, kernels::qtype_name(s.type)));
      return nullptr;
    }
    if (matrix && shape.back() % kernels::qtype_traits(s.type).block) {
      wrong.push_back(fmt::format("{} of type {} has rows of {} values, not a multiple of its block", name,
                                  kernels::qtype_name(s.type), shape.back()));
      return nullptr;
    }
    return &s;
  };
  auto read_matrix = [&](const std::string& name, const Shape& shape) {
    const TensorSource* s = find(name, shape, true);
    return s ? kernels::qmatrix(s->type, s->data, shape[0], shape[1]) : kernels::QMatrix{};
  };
  // A vector [n], or a matrix of floats ([E, n] expert biases) read whole as `shape`.
  auto read_vector = [&](const std::string& name, const Shape& shape, float offset) -> const float* {
    const TensorSource* s = find(name, shape, false);
    if (!s) return nullptr;
    i64 n = 1;
    for (i64 d : shape) n *= d;
    owned->v.emplace_back(static_cast<std::size_t>(n));
    float* v = owned->v.back().data();
    kernels::dequantize_row(s->type, s->data, v, n);
    if (offset != 0.f)
      for (i64 i = 0; i < n; ++i) v[i] = offset + v[i];  // Gemma: (1 + w) in float32, as transformers
    return v;
  };
  for (const TensorName& tn : a.tensors) {
    const char* pattern = gguf ? tn.gguf : tn.hf;
    if (!pattern) continue;
    const i64 layers = slot_is_per_layer(tn.slot) ? c.num_layers() : 1;
    for (i64 l = 0; l < layers; ++l) {
      const std::string name = expand_name(pattern, l);
      const Need need = slot_need(c, a, tn.slot, l);
      if (need == Need::No || (need == Need::IfPresent && !t.count(name))) continue;
      if (need == Need::Ignored) {  // a tied head saved anyway: it is the embedding
        if (t.count(name)) used.insert(name);
        continue;
      }
      const Shape shape = slot_shape(c, tn.slot, l);
      if (slot_is_expert(tn.slot)) {  // E matrices: one 3-D tensor viewed by experts, or one tensor each
        DecoderLayerWeights& L = w.layers[static_cast<std::size_t>(l)];
        std::vector<kernels::QMatrix>& list =
            tn.slot == Slot::ExpertGate ? L.expert_gate : tn.slot == Slot::ExpertUp ? L.expert_up : L.expert_down;
        const i64 E = shape[0], rows = shape[1], cols = shape[2];
        list.clear();
        if (per_expert_name(pattern)) {
          for (i64 e = 0; e < E; ++e) list.push_back(read_matrix(expand_name(pattern, l, e), {rows, cols}));
        } else if (const TensorSource* s = find(name, shape, true)) {
          const kernels::QMatrix all = kernels::qmatrix(s->type, s->data, E * rows, cols);
          for (i64 e = 0; e < E; ++e) list.push_back(row_view(all, e * rows, rows));
        }
        continue;
      }
      if (!slot_is_matrix(tn.slot)) {
        const float offset = !gguf && slot_is_norm(tn.slot) ? a.norm_offset : 0.f;
        const float* v = read_vector(name, shape, offset);
        if (!v) continue;
        if (expert_vector_slot(tn.slot)) {
          *vector_slot(w, tn.slot, l) = v;
          continue;
        }
        std::vector<float> vec(v, v + shape[0]);
        switch (tn.slot) {
          case Slot::RopeFreqs: c.ropes.front().freq_factors = vec; break;
          case Slot::RopeLong: c.ropes.front().scaling.long_factor = vec; break;
          case Slot::RopeShort: c.ropes.front().scaling.short_factor = vec; break;
          default: *vector_slot(w, tn.slot, l) = v; break;
        }
        continue;
      }
      const kernels::QMatrix m = read_matrix(name, shape);
      if (!m.data) continue;
      DecoderLayerWeights* L = slot_is_per_layer(tn.slot) ? &w.layers[static_cast<std::size_t>(l)] : nullptr;
      switch (tn.slot) {
        case Slot::Embed: w.embed = m; break;
        case Slot::LmHead: w.lm_head = m; break;
        case Slot::QKV: {  // rows [q; k; v]
          const i64 HD = c.num_heads * c.head_dim, KD = c.num_kv_heads * c.head_dim;
          L->q.w = row_view(m, 0, HD), L->k.w = row_view(m, HD, KD), L->v.w = row_view(m, HD + KD, KD);
          break;
        }
        case Slot::GateUp: {  // rows [gate; up]
          const i64 F = c.intermediate_size;
          L->gate.w = row_view(m, 0, F), L->up.w = row_view(m, F, F);
          break;
        }
        default: *matrix_slot(w, tn.slot, l) = m; break;
      }
    }
  }
  if (c.tied) w.lm_head = w.embed;
  std::vector<std::string> unexpected;
  for (const auto& [name, s] : t)
    if (!used.count(name) && !(!gguf && name.find("rotary_emb.inv_freq") != std::string::npos) &&
        !(a.ignored && a.ignored(name, c)))
      unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !wrong.empty()) {
    std::string msg = fmt::format("{}: does not match the {} config:", source, c.model_type);
    if (!missing.empty()) msg += fmt::format(" missing {} tensors: {};", missing.size(), list(missing));
    if (!unexpected.empty()) msg += fmt::format(" unexpected {} tensors: {};", unexpected.size(), list(unexpected));
    if (!wrong.empty()) msg += " wrong shape or type: " + list(wrong) + ";";
    msg.pop_back();
    throw FormatError(msg);
  }
  w.keep_alive.push_back(owned);
  return w;
}

std::optional<kernels::QType> st_qtype(io::StDType d) {
  switch (d) {
    case io::StDType::F32: return kernels::QType::F32;
    case io::StDType::F16: return kernels::QType::F16;
    case io::StDType::BF16: return kernels::QType::BF16;
    default: return std::nullopt;
  }
}

// The spec checked as the model will check it, as a FormatError naming the file.
void check_spec(const DecoderSpec& c, const std::string& source) {
  try {
    check_decoder_spec(c);
  } catch (const ValueError& e) {
    throw FormatError(source + ": " + e.what());
  }
}

}  // namespace

DecoderSpec decoder_spec_from_config(const std::string& text, const std::string& src) {
  const json j = hf::parse_object(text, src);
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) hf::bad(src, "field 'model_type' is missing or not a string");
  const Architecture& a = architecture_of_model_type(mt->get<std::string>(), src);
  DecoderSpec c = a.from_config(j, src);
  c.arch = a.name;
  check_spec(c, src);
  return c;
}

DecoderSpec decoder_spec_from_gguf(const io::GGUFFile& f) {
  const Architecture& a = architecture_of_gguf(f);
  DecoderSpec c = a.from_gguf(f);
  c.arch = a.name;
  return c;
}

DecoderFootprint decoder_footprint(const io::GGUFFile& f, const DecoderSpec& spec) {
  DecoderFootprint out;
  const i64 E = spec.moe.experts, k = spec.moe.top_k;
  for (const io::GGUFTensorInfo& t : f.tensors()) {
    const bool experts = E > 0 && t.shape.size() == 3 && t.shape[0] == E;
    const i64 n = t.numel(), bytes = static_cast<i64>(t.nbytes);
    out.parameters += n;
    out.active_parameters += experts ? n / E * k : n;
    if (t.name == "token_embd.weight" && !spec.tied)  // (tied: the output head reads it all)
      out.decode_bytes += t.rows() > 0 ? bytes / t.rows() : 0;
    else
      out.decode_bytes += experts ? bytes / E * k : bytes;
  }
  return out;
}

std::shared_ptr<DecoderLM> load_decoder_gguf(std::shared_ptr<const io::GGUFFile> file) {
  const io::GGUFFile& f = *file;
  const Architecture& a = architecture_of_gguf(f);
  DecoderSpec c = decoder_spec_from_gguf(f);
  // The sizes the tensor shapes are computed from, bounded first (as check_decoder_spec bounds
  // them; products of two then stay in int64): the rest of the spec is checked with the weights.
  for (auto [name, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                         {"intermediate_size", c.intermediate_size}, {"num_attention_heads", c.num_heads},
                         {"num_key_value_heads", c.num_kv_heads}, {"head_dim", c.head_dim},
                         {"expert_feed_forward_length", std::max<i64>(c.moe.expert_ff, 1)}})
    if (v < 1 || v > (i64{1} << 24))
      throw FormatError(fmt::format("{}: DecoderSpec: {} must be in [1, 2^24], got {}", f.source(), name, v));
  std::map<std::string, TensorSource> t;
  for (const io::GGUFTensorInfo& info : f.tensors()) t[info.name] = TensorSource{info.type, f.data(info), info.shape};
  DecoderWeights w = assemble(c, a, t, f.source(), /*gguf=*/true);
  check_spec(c, f.source());
  w.keep_alive.push_back(file);
  w.mapping = file->mapping();
  return std::make_shared<DecoderLM>(std::move(c), std::move(w));
}

std::shared_ptr<DecoderLM> load_decoder(const std::string& path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    if (!io::is_gguf_file(path))
      throw FormatError(path + ": not a GGUF file (a decoder model is a .gguf file or a Hugging Face folder)");
    return load_decoder_gguf(std::make_shared<io::GGUFFile>(io::GGUFFile::open(path)));
  }
  if (!fs::is_directory(path, ec)) throw IOError("load_decoder: '" + path + "' does not exist");
  const std::string cfg_path = (fs::path(path) / "config.json").string();
  DecoderSpec c = decoder_spec_from_config(io::read_file(cfg_path, "load_decoder"), cfg_path);
  const Architecture& a = *find_architecture(c.arch);
  // The weight files: model.safetensors, or the shards named by model.safetensors.index.json.
  std::vector<std::string> files;
  const fs::path index = fs::path(path) / "model.safetensors.index.json";
  if (fs::exists(index, ec)) {
    json j;
    try {
      j = json::parse(io::read_file(index.string(), "load_decoder"));
    } catch (const json::exception& e) {
      throw FormatError(index.string() + ": not valid JSON: " + e.what());
    }
    auto wm = j.find("weight_map");
    if (!j.is_object() || wm == j.end() || !wm->is_object())
      throw FormatError(index.string() + ": needs an object 'weight_map' (tensor name -> file)");
    std::set<std::string> names;
    for (const auto& [name, file] : wm->items()) {
      if (!file.is_string()) throw FormatError(index.string() + ": weight_map['" + name + "'] is not a file name");
      const std::string fname = file.get<std::string>();
      if (fname.empty() || fname.find('/') != std::string::npos || fname == "." || fname == "..")
        throw FormatError(index.string() + ": weight_map['" + name + "'] = '" + fname + "' is not a file of the folder");
      names.insert(fname);
    }
    for (const std::string& n : names) files.push_back((fs::path(path) / n).string());
  } else {
    files.push_back((fs::path(path) / "model.safetensors").string());
  }
  std::map<std::string, FolderTensor> ft;
  std::map<std::string, std::string> file_of;
  std::vector<std::shared_ptr<const void>> keep;
  for (const std::string& file : files) {
    auto st = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(file));
    for (const io::StTensorInfo& info : st->tensors()) {
      if (ft.count(info.name)) throw FormatError(file + ": tensor " + info.name + " is also in another shard");
      ft[info.name] = FolderTensor{st_qtype(info.dtype), st->data(info), info.shape, io::st_dtype_name(info.dtype)};
      file_of[info.name] = file;
    }
    keep.push_back(st);
  }
  if (a.hf_rename) {  // the table's names (a multimodal checkpoint's text model, say)
    std::map<std::string, FolderTensor> renamed;
    std::map<std::string, std::string> renamed_file;
    for (auto& [name, s] : ft)
      if (const auto n = a.hf_rename(name)) renamed[*n] = s, renamed_file[*n] = file_of[name];
    ft = std::move(renamed);
    file_of = std::move(renamed_file);
  }
  if (a.hf_convert) a.hf_convert(ft, keep, c, path);
  std::map<std::string, TensorSource> t;
  for (const auto& [name, s] : ft) {
    if (!s.qtype) {
      auto f = file_of.find(name);
      throw FormatError(fmt::format("{}: tensor {} has dtype {} ({} weights must be F32, F16 or BF16)",
                                    f != file_of.end() ? f->second : path, name, s.dtype, a.display));
    }
    t[name] = TensorSource{*s.qtype, s.data, s.shape};
  }
  DecoderWeights w = assemble(c, a, t, files.size() == 1 ? files[0] : path, /*gguf=*/false);
  for (auto& k : keep) w.keep_alive.push_back(k);
  return std::make_shared<DecoderLM>(std::move(c), std::move(w));
}

}  // namespace qkv::models
