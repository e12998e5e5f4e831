// The registry of model families and decoder architectures (models/registry.h, arch/arch.h).
#include "qkv/models/registry.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "arch/arch.h"
#include "arch/common.h"
#include "qkv/core/error.h"
#include "qkv/io/files.h"
#include "qkv/io/gguf.h"

namespace qkv::models {
namespace {

namespace fs = std::filesystem;

struct Registry {
  std::map<std::string, ModelFamily, std::less<>> families;  // by name
  std::map<std::string, Architecture, std::less<>> archs;    // by name
};
Registry& storage() {
  static Registry r;
  return r;
}
// The registry, every file of models/arch/ registered the first time it is used (their
// functions are called by the build's generated arch_list.cpp); read-only after.
const Registry& registry() {
  static const bool filled = (register_builtin_architectures(), true);
  (void)filled;
  return storage();
}

std::string join(std::set<std::string> names) {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string folder_model_type(const std::string& dir) {
  const fs::path cfg = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(cfg, ec)) return "";
  try {
    const auto j = nlohmann::json::parse(io::read_file(cfg.string(), "model_kind"));
    if (auto it = j.find("model_type"); it != j.end() && it->is_string()) return it->get<std::string>();
  } catch (const std::exception&) {
  }
  return "";
}

LoadedCausalLM named(const ModelFamily& f, LoadedCausalLM m) {
  m.architecture = f.name;
  return m;
}

}  // namespace

void register_model_family(const ModelFamily& f) {
  Registry& r = storage();
  for (const auto& [name, other] : r.families) {
    if (name == f.name) throw ValueError("register_model_family: '" + f.name + "' is registered twice");
    for (const std::string& t : f.model_types)
      if (std::find(other.model_types.begin(), other.model_types.end(), t) != other.model_types.end())
        throw ValueError(fmt::format("register_model_family: model_type '{}' of '{}' is also '{}''s", t, f.name, name));
  }
  r.families.emplace(f.name, f);
}

void register_architecture(const Architecture& a) {
  storage().archs.emplace(a.name, a);
  register_model_family({.name = a.name,
                         .display = a.display,
                         .model_types = a.model_types,
                         .gguf_names = a.gguf_names,
                         .role = ModelRole::CausalLM,
                         .decoder = true,
                         .load_causal_lm = &arch::load_decoder_causal_lm,
                         .write_gguf = &arch::write_decoder_gguf});
}

const Architecture* find_architecture(std::string_view name) {
  const auto& m = registry().archs;
  auto it = m.find(name);
  return it == m.end() ? nullptr : &it->second;
}

std::vector<const ModelFamily*> model_families() {
  std::vector<const ModelFamily*> out;
  for (const auto& [name, f] : registry().families) out.push_back(&f);
  return out;
}

const ModelFamily* find_model_family(std::string_view model_type) {
  for (const auto& [name, f] : registry().families)
    if (name == model_type || std::find(f.model_types.begin(), f.model_types.end(), model_type) != f.model_types.end())
      return &f;
  return nullptr;
}

const ModelFamily* find_gguf_family(std::string_view gguf_architecture) {
  for (const auto& [name, f] : registry().families)
    if (std::find(f.gguf_names.begin(), f.gguf_names.end(), gguf_architecture) != f.gguf_names.end()) return &f;
  return nullptr;
}

std::string model_types_list(ModelRole role) {
  std::set<std::string> s;
  for (const auto& [name, f] : registry().families)
    if (f.role == role) s.insert(f.model_types.begin(), f.model_types.end());
  return join(s);
}

std::string gguf_architectures_list() {
  std::set<std::string> s;
  for (const auto& [name, f] : registry().families)
    if (f.load_causal_lm) s.insert(f.gguf_names.begin(), f.gguf_names.end());
  return join(s);
}

ModelKind model_kind(const std::string& path) {
  ModelKind k;
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    try {
      if (!io::is_gguf_file(path)) return k;
      k.gguf = true;
      const io::GGUFFile f = io::GGUFFile::open_header(path);
      if (auto a = f.find_string("general.architecture")) {
        k.declared = std::string(*a);
        k.family = find_gguf_family(k.declared);
      }
    } catch (const Error&) {
    }
    return k;
  }
  k.declared = folder_model_type(path);
  if (!k.declared.empty()) k.family = find_model_family(k.declared);
  return k;
}

LoadedCausalLM load_causal_lm(const std::string& path, const CausalLMLoadOptions& o) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw IOError("'" + path + "' does not exist");
  const std::string needs = fmt::format("a causal language model: a GGUF file ({}) or a folder of model_type {}",
                                        gguf_architectures_list(), model_types_list(ModelRole::CausalLM));
  if (fs::is_regular_file(path, ec)) {
    if (!io::is_gguf_file(path))
      throw FormatError(path + " is not a GGUF file (a model is a .gguf file or a Hugging Face folder)");
    const ModelKind k = model_kind(path);
    if (!k.family || !k.family->load_causal_lm)
      throw FormatError(fmt::format("{}: GGUF architecture '{}' is not one qkv generates with ({})", path, k.declared,
                                    gguf_architectures_list()));
    return named(*k.family, k.family->load_causal_lm(path, o));
  }
  const ModelKind k = model_kind(path);
  if (k.family && k.family->role == ModelRole::CausalLM) return named(*k.family, k.family->load_causal_lm(path, o));
  if (k.family)
    throw FormatError(fmt::format("{} is a {} folder; generation needs {}", path, k.family->display, needs));
  if (k.declared.empty()) {
    // A config.json without model_type (or one that does not parse): the family that reads such
    // folders (GPT-2's first configs had no model_type) names what is wrong with it.
    if (fs::exists(fs::path(path) / "config.json", ec))
      for (const auto& [name, f] : registry().families)
        if (f.load_causal_lm && f.untyped_folders) return named(f, f.load_causal_lm(path, o));
    throw FormatError(path + " is not a model folder qkv reads (no config.json with a model_type)");
  }
  throw FormatError(fmt::format("{}: model_type \"{}\" is not one qkv generates with ({})", path, k.declared,
                                model_types_list(ModelRole::CausalLM)));
}

}  // namespace qkv::models
