// Placeholder until the classifier model lands.
#include "qkv/models/attention_maps.h"
namespace qkv::models {
std::vector<AttentionMap> classifier_attention_maps(const io::Checkpoint&, const std::string&) {
  throw ValueError("classifier: not built yet");
}
}  // namespace qkv::models
