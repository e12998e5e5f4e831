#include "qkv/io/checkpoint.h"

#include <algorithm>
#include <string>

#include "qkv/io/tensors.h"

namespace qkv::io {

namespace {
constexpr const char* kFormat = "qkv-checkpoint-v1";
const char* kReserved[] = {"format", "model_type", "config", "rng_seed", "rng_offset"};
}  // namespace

void save_checkpoint(const std::string& path, const SaveCheckpointArgs& a) {
  if (!a.model) throw ValueError("save_checkpoint: no model given");
  if (a.model_type.empty()) throw ValueError("save_checkpoint: model_type is empty");
  std::map<std::string, std::string> meta = a.metadata;
  for (const char* k : kReserved)
    if (meta.count(k)) throw ValueError(std::string("save_checkpoint: metadata key '") + k + "' is reserved");
  meta["format"] = kFormat;
  meta["model_type"] = a.model_type;
  meta["config"] = a.config_json.empty() ? "{}" : a.config_json;
  if (a.rng) {
    meta["rng_seed"] = std::to_string(a.rng->seed());
    meta["rng_offset"] = std::to_string(a.rng->offset());
  }
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (auto& [n, t] : a.model->state_dict()) {
    if (n.rfind("optim.", 0) == 0 || n.rfind("extra.", 0) == 0)
      throw ValueError("save_checkpoint: model tensor name '" + n + "' collides with a reserved prefix");
    tensors.emplace_back(n, t);
  }
  if (a.optimizer)
    for (auto& [n, t] : a.optimizer->state()) tensors.emplace_back("optim." + n, t);
  for (auto& [n, t] : a.extra) tensors.emplace_back("extra." + n, t);
  save_safetensors(path, tensors, meta);
}

Checkpoint load_checkpoint(const std::string& path) {
  LoadedTensors f = load_safetensors(path);
  Checkpoint c;
  c.metadata = f.metadata;
  auto it = f.metadata.find("format");
  if (it == f.metadata.end() || it->second != kFormat)
    throw FormatError(path + ": not a qkv checkpoint (metadata 'format' is " +
                      (it == f.metadata.end() ? std::string("missing") : "'" + it->second + "'") + ", expected '" +
                      kFormat + "')");
  auto mt = f.metadata.find("model_type");
  if (mt == f.metadata.end() || mt->second.empty()) throw FormatError(path + ": checkpoint has no 'model_type'");
  c.model_type = mt->second;
  auto cf = f.metadata.find("config");
  c.config_json = cf == f.metadata.end() ? "{}" : cf->second;
  auto parse_u64 = [&](const char* key, std::uint64_t* out) {
    auto m = f.metadata.find(key);
    if (m == f.metadata.end()) return false;
    *out = parse_metadata_u64(m->second, path + ": checkpoint metadata '" + key + "'");
    return true;
  };
  const bool hs = parse_u64("rng_seed", &c.rng_seed);
  const bool ho = parse_u64("rng_offset", &c.rng_offset);
  c.has_rng = hs && ho;
  for (auto& [n, t] : f.tensors) {
    if (n.rfind("optim.", 0) == 0)
      c.optimizer.emplace_back(n.substr(6), t);
    else if (n.rfind("extra.", 0) == 0)
      c.extra[n.substr(6)] = t;
    else
      c.model[n] = t;
  }
  return c;
}

std::uint64_t parse_metadata_u64(const std::string& text, const std::string& what) {
  const bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  std::uint64_t v = 0;
  bool ok = digits;
  if (digits) {
    try {
      v = std::stoull(text);
    } catch (const std::exception&) {  // out of range
      ok = false;
    }
  }
  if (!ok) throw FormatError(what + " is not an unsigned integer: '" + text + "'");
  return v;
}

}  // namespace qkv::io
