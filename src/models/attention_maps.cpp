#include "qkv/models/attention_maps.h"

namespace qkv::models {

std::vector<AttentionMap> attention_maps_for(const io::Checkpoint& ckpt, const std::string& input) {
  if (ckpt.model_type == "classifier") return classifier_attention_maps(ckpt, input);
  if (ckpt.model_type == "seq2seq") return seq2seq_attention_maps(ckpt, input);
  throw ValueError("attention maps: unknown model_type '" + ckpt.model_type +
                   "' (this qkv knows 'classifier' and 'seq2seq')");
}

}  // namespace qkv::models
