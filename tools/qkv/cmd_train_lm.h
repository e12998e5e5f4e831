// qkv train lm: trains a GPT-2 language model on text files (train::LMTrainer) and
// writes a Hugging Face GPT-2 folder that `qkv generate` and transformers load.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "qkv/train/lm.h"

namespace qkv::tool {

struct TrainLMCliOptions {
  std::vector<std::string> texts;  // --text FILE...
  std::string out;                 // --out DIR
  std::string tokenizer;           // --tokenizer DIR (vocab.json + merges.txt); else trained (--vocab-size)
  std::int64_t vocab_size = 0;     // > 0: train a byte-level BPE of this size on the texts
  std::int64_t min_frequency = 0;  // of the BPE trainer
  std::int64_t layers = 6, d_model = 256, heads = 8;
  double dropout = 0.0;
  train::LMTrainOptions train;     // steps, batch, context, lr, ... (context = the model's n_positions)
  std::string prompt;              // sample prompt at each evaluation ("": the first tokens of the held-out text)
  std::int64_t sample_tokens = 32;
  std::int64_t stop_after = 0;     // > 0: stop once this many steps of the run are done (resume later)
  bool resume = false;             // continue the run saved in --out
  bool overwrite = false;          // replace an --out that holds files (else refused)
  bool init_only = false;          // write the step-0 model and state, then stop
  bool json = false;
  bool progress = true;
};

// Checks every option, the inputs, --out and the memory the run needs, then trains,
// prints and saves (each save replaces --out as a whole; nothing is written before the
// first). Returns 0, or 130 after a Ctrl-C (the step saved, the resume command printed);
// throws qkv::Error.
int run_train_lm(const TrainLMCliOptions& o, std::ostream& out);

}  // namespace qkv::tool
