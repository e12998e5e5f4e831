#include "qkv/io/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "qkv/io/tensors.h"

namespace qkv::io {

namespace {
constexpr const char* kFormat = "qkv-checkpoint-v2";      // written: carries a 'checksum'
constexpr const char* kFormatV1 = "qkv-checkpoint-v1";    // still read: no checksum
const char* kReserved[] = {"format", "model_type", "config", "rng_seed", "rng_offset", "checksum"};

std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull, kP2 = 0xC2B2AE3D27D4EB4Full, kP3 = 0x165667B19E3779F9ull;

// The checksum of a checkpoint: every metadata entry but 'checksum' (in key order),
// then every tensor in name order (name, dtype, shape, bytes), each piece length-prefixed.
class Summer {
 public:
  void str(const std::string& s) {
    u64(s.size());
    h_ = digest64(s.data(), s.size(), h_);
  }
  void u64(std::uint64_t v) { h_ = digest64(&v, sizeof v, h_); }
  void tensor(const std::string& name, const Tensor& t) {
    str(name);
    str(dtype_name(t.dtype()));
    u64(static_cast<std::uint64_t>(t.dim()));
    for (std::int64_t d : t.shape()) u64(static_cast<std::uint64_t>(d));
    const Tensor c = t.contiguous();
    const std::size_t n = static_cast<std::size_t>(c.numel()) * dtype_size(c.dtype());
    u64(n);
    if (n) h_ = digest64(c.raw_data(), n, h_);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 0x716b762d636b7074ull;  // "qkv-ckpt"
};

std::string hex16(std::uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::uint64_t checksum_of(const std::map<std::string, std::string>& meta,
                          std::vector<std::pair<std::string, Tensor>> tensors) {
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  Summer s;
  for (const auto& [k, v] : meta)
    if (k != "checksum") {
      s.str(k);
      s.str(v);
    }
  for (const auto& [n, t] : tensors) s.tensor(n, t);
  return s.value();
}
}  // namespace

std::string checkpoint_checksum(const std::map<std::string, std::string>& metadata,
                                const std::vector<std::pair<std::string, Tensor>>& tensors) {
  return hex16(checksum_of(metadata, tensors));
}

std::uint64_t digest64(const void* data, std::size_t n, std::uint64_t seed) {
  // xxHash64's round and avalanche (not its exact output): four lanes of 8-byte words.
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t v[4] = {seed + kP1 + kP2, seed + kP2, seed, seed - kP1};
  auto round = [](std::uint64_t acc, std::uint64_t w) { return rotl(acc + w * kP2, 31) * kP1; };
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int l = 0; l < 4; ++l) {
      std::uint64_t w;
      std::memcpy(&w, p + i + 8 * l, 8);
      v[l] = round(v[l], w);
    }
  std::uint64_t h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18) + n;
  for (; i < n; ++i) h = rotl(h ^ (p[i] * kP3), 11) * kP1;
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  return h ^ (h >> 32);
}

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
  meta["checksum"] = hex16(checksum_of(meta, tensors));
  save_safetensors(path, tensors, meta);
}

static Checkpoint checkpoint_from(LoadedTensors f, const std::string& path);

Checkpoint load_checkpoint(const std::string& path) { return checkpoint_from(load_safetensors(path), path); }

Checkpoint load_checkpoint_bytes(std::vector<std::uint8_t> bytes, const std::string& source) {
  return checkpoint_from(load_safetensors_bytes(std::move(bytes), source), source);
}

static Checkpoint checkpoint_from(LoadedTensors f, const std::string& path) {
  Checkpoint c;
  c.metadata = f.metadata;
  auto it = f.metadata.find("format");
  if (it == f.metadata.end() || (it->second != kFormat && it->second != kFormatV1))
    throw FormatError(path + ": not a qkv checkpoint (metadata 'format' is " +
                      (it == f.metadata.end() ? std::string("missing") : "'" + it->second + "'") + ", expected '" +
                      kFormat + "')");
  // The checksum covers the metadata and every tensor: a flipped byte anywhere in
  // the file is either a parse error above or a mismatch here.
  const auto cs = f.metadata.find("checksum");
  if (cs == f.metadata.end()) {
    if (it->second == kFormat) throw FormatError(path + ": checkpoint has no 'checksum' (a " + kFormat + " file must)");
  } else {
    const bool hex = cs->second.size() == 16 && std::all_of(cs->second.begin(), cs->second.end(), [](char ch) {
                       return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
                     });
    if (!hex) throw FormatError(path + ": checkpoint metadata 'checksum' is not 16 hex digits: '" + cs->second + "'");
    const std::string got = hex16(checksum_of(f.metadata, f.tensors));
    if (got != cs->second)
      throw FormatError(path + ": checkpoint is damaged: its contents give checksum " + got +
                        ", its metadata says " + cs->second);
  }
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
