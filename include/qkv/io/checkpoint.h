// Checkpoints: one safetensors file that PyTorch's `safetensors` package reads.
//   tensors  "<dotted.param.name>"         model parameters and persistent buffers (PyTorch names)
//            "optim.<entry>"               optimiser state (Optimizer::state(): step, lr, exp_avg.<p>, ...)
//            "extra.<name>"                anything else the caller keeps (e.g. a data set)
//   metadata "format" = "qkv-checkpoint-v2", "model_type", "config" (a JSON object as text),
//            "rng_seed", "rng_offset" (the default generator, for bitwise resume),
//            "checksum" (16 hex digits: digest64 of every other metadata entry and every
//            tensor's name, dtype, shape and bytes, in sorted order), plus caller entries.
// Saving is atomic (temp file, fsync, rename, fsync dir): an interrupted save
// never damages the previous checkpoint. Loading uses the strict reader and then
// verifies the checksum, so a truncated file or any flipped byte (header or data) is
// a FormatError naming the file. "qkv-checkpoint-v1" files (no checksum) still load.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "qkv/core/rng.h"
#include "qkv/nn/module.h"
#include "qkv/optim/optimizer.h"

namespace qkv::io {

struct Checkpoint {
  std::string model_type;
  std::string config_json;                    // "{}" if none
  nn::StateDict model;                        // by dotted name
  optim::NamedParams optimizer;               // entries without the "optim." prefix, in file order
  std::map<std::string, Tensor> extra;        // without the "extra." prefix
  std::map<std::string, std::string> metadata;  // everything in __metadata__
  std::uint64_t rng_seed = 0, rng_offset = 0;
  bool has_rng = false;
};

struct SaveCheckpointArgs {
  const nn::Module* model = nullptr;          // required
  std::string model_type;                     // required, e.g. "classifier"
  std::string config_json = "{}";
  const optim::Optimizer* optimizer = nullptr;
  const Generator* rng = nullptr;             // saved as rng_seed / rng_offset
  std::map<std::string, Tensor> extra;
  std::map<std::string, std::string> metadata;  // caller entries (must not clash with the reserved keys)
};

void save_checkpoint(const std::string& path, const SaveCheckpointArgs& args);
// FormatError (naming the file) if it is not a qkv checkpoint or is malformed.
Checkpoint load_checkpoint(const std::string& path);
// The same from a file's bytes (e.g. received from another process); `source` names it in messages.
Checkpoint load_checkpoint_bytes(std::vector<std::uint8_t> bytes, const std::string& source);

// A metadata value that must be an unsigned decimal integer (digits only, no sign or
// spaces); throws FormatError "<what> is not an unsigned integer: '<text>'" otherwise.
std::uint64_t parse_metadata_u64(const std::string& text, const std::string& what);

// A 64-bit digest of n bytes (xxHash64-style rounds; not cryptographic: it detects
// damage, not tampering). Chain pieces by passing the previous digest as seed.
std::uint64_t digest64(const void* data, std::size_t n, std::uint64_t seed = 0);
// The 'checksum' metadata value of a checkpoint with this metadata (its own
// 'checksum' entry ignored) and these tensors (names as in the file).
std::string checkpoint_checksum(const std::map<std::string, std::string>& metadata,
                                const std::vector<std::pair<std::string, Tensor>>& tensors);

}  // namespace qkv::io
