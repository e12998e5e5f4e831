// Placeholder until the seq2seq model lands.
#include "qkv/models/attention_maps.h"
namespace qkv::models {
std::vector<AttentionMap> seq2seq_attention_maps(const io::Checkpoint&, const std::string&) {
  throw ValueError("seq2seq: not built yet");
}
}  // namespace qkv::models
