// qkv train classify: the first tutorial's TinyTextClassifier on its toy task
// (label 1 iff tokens 3 and 7 both appear), full-batch Adam, with checkpoints.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace qkv::tool {

struct TrainClassifyOptions {
  int epochs = 50;              // total epochs (with --resume: train until this epoch)
  double lr = 1e-3;
  std::int64_t layers = 2, d_model = 16, heads = 4, d_ff = 32;
  double dropout = 0.1;
  std::uint64_t seed = 42;      // model init, dropout and (mixed) the data
  bool balanced = false;        // 200 train / 200 validation, half positive
  std::int64_t train_size = 200;
  std::int64_t val_size = 0;    // 0: 50 (tutorial) or 200 (balanced)
  std::int64_t grad_accum = 1;  // the training set in this many micro-batches per epoch (per rank under mpirun)
  std::string save;             // checkpoint written at the end (and every save_every epochs)
  bool overwrite = false;       // replace an existing --save file (else refused)
  int save_every = 0;
  std::string resume;           // checkpoint to continue from
  int log_every = 10;           // print a row every N epochs (and the last one)
  bool json = false;            // one JSON object per printed epoch, then a summary object
  bool progress = true;         // progress bar on stderr
};

// Trains, prints and saves; returns 0 or throws qkv::Error (NumericError for a
// non-finite loss, naming the epoch; no checkpoint is written then).
// If files_written is non-null the checkpoint paths written are appended.
int run_train_classify(const TrainClassifyOptions& opt, std::ostream& out,
                       std::vector<std::string>* files_written = nullptr);

}  // namespace qkv::tool
