// qkv train seq2seq: an encoder-decoder Transformer (decoder blocks with
// cross-attention) trained on a toy sequence task (reverse, copy or sort a
// digit string), reporting exact-sequence accuracy of greedy decoding on a
// held-out set disjoint from the training set.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace qkv::tool {

struct Seq2SeqCliOptions {
  std::string task = "reverse";
  std::int64_t epochs = 3;         // passes over the training set
  std::int64_t steps = 0;          // > 0: total optimiser steps instead of epochs
  std::int64_t batch = 64;
  std::int64_t grad_accum = 1;     // micro-batches of `batch` per step (per rank under mpirun)
  double lr = 2e-3;                // peak AdamW learning rate
  std::int64_t warmup = 150;       // linear warmup steps, then cosine decay
  double dropout = 0.0;
  std::int64_t d_model = 64, heads = 4, layers = 2, d_ff = 128;
  std::int64_t min_len = 1, max_len = 10;
  std::int64_t train_size = 10000, test_size = 1000;
  double target_acc = 0.0;         // > 0: stop once held-out exact accuracy reaches it
  std::uint64_t seed = 0;
  std::string save;                // checkpoint written at the end (and every save_every epochs)
  bool overwrite = false;          // replace an existing --save file (else refused)
  std::int64_t save_every = 0;
  std::string resume;              // checkpoint of a run to continue (it fixes every setting above)
  std::int64_t stop_after_epoch = 0;  // > 0: stop once this many epochs of the run are done
  std::int64_t examples = 5;       // example decodings printed at the end
  bool json = false;               // one JSON object per report, then a summary object
  bool progress = true;            // progress bar on stderr
};

// Trains (or, with resume, continues a saved run), prints and saves; returns 0, or 130
// after a Ctrl-C (the step saved when --save is given), or throws qkv::Error. If files_written is non-null the checkpoint paths written
// are appended.
int run_train_seq2seq(const Seq2SeqCliOptions& opt, std::ostream& out,
                      std::vector<std::string>* files_written = nullptr);

}  // namespace qkv::tool
