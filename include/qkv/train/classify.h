// The first tutorial's classifier run (qkv train classify) on the shared train::Loop:
// full-batch Adam on the token-presence task (one optimiser step per epoch), train and
// validation accuracy as the evaluation, checkpoints that resume bitwise.
//
// Checkpoint (io checkpoint, model_type "classifier", so `qkv heatmap` reads it):
//   extra.{train,val}_{tokens,labels}   the data (not redrawn on resume)
//   metadata task "classify", epoch, seed, data_seed, balanced, train_size, val_size,
//            grad_accum, optimizer "Adam", lr, plus the loop's own (train/loop.h)
// Every step is one epoch over the whole training set: K = 1 one micro-batch; K > 1 the rows
// cut into K consecutive parts [k n / K, (k+1) n / K), summed in order (data-parallel ranks
// compute their parts; train/loop.h).
// The learning rate is constant, so a resumed run may be extended: --epochs is the total.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "qkv/core/memory.h"
#include "qkv/io/checkpoint.h"
#include "qkv/models/classifier.h"
#include "qkv/optim/optimizer.h"
#include "qkv/train/loop.h"

namespace qkv::train {

struct ClassifyRunOptions {
  models::ClassifierOptions model;
  std::int64_t epochs = 50;
  double lr = 1e-3;
  std::uint64_t seed = 42;        // init and dropout; the data use seed ^ a constant
  bool balanced = false;
  std::int64_t train_size = 200;
  std::int64_t val_size = 0;      // 0: 50, or 200 when balanced
  std::int64_t eval_every = 10;   // accuracies every N epochs and at the last
  std::int64_t grad_accum = 1;    // K: the training set is cut into K micro-batches per step (over all ranks)
};

struct ClassifyReport {
  std::int64_t epoch = 0;
  double loss = 0;                // of that epoch's step
  double train_acc = 0, val_acc = 0;
};

// The memory a new run needs at its peak, checked before the data or the model exist:
// the parameters four times over (weights, gradients, Adam's two moments), the data, and
// what the full-batch forward over every training sequence keeps for the backward (about
// 10 d_model + 2 d_ff floats per layer and 8 d_model more per token, dropout masks included).
MemoryEstimate classify_training_memory(const ClassifyRunOptions& o);

class ClassifyTask;  // src/train/classify.cpp

class ClassifyTrainer {
 public:
  // A new run: draws the data, then manual_seed(seed) and builds the model.
  explicit ClassifyTrainer(const ClassifyRunOptions& o);
  // Continues a run saved by save() until `epochs` (>= the saved epoch + 1; ValueError
  // otherwise); eval_every as given. FormatError naming `source` for a malformed file.
  ClassifyTrainer(const io::Checkpoint& c, const std::string& source, std::int64_t epochs, std::int64_t eval_every);
  ~ClassifyTrainer();

  // Per step: on_report (after an evaluation), then on_epoch. A non-finite loss or
  // gradient is a NumericError naming the epoch; nothing is changed then.
  bool train(const std::function<void(const ClassifyReport&)>& on_report = {},
             const std::function<void(std::int64_t epoch, double loss)>& on_epoch = {});
  // Atomic; every `save_every` epochs may be saved from on_epoch.
  void save(const std::string& path) const;

  const models::TinyTextClassifier& model() const { return *model_; }
  const models::ClassifyData& train_data() const { return train_; }
  const models::ClassifyData& val_data() const { return val_; }
  const ClassifyRunOptions& options() const { return o_; }
  std::int64_t epoch() const { return loop_->step(); }
  std::int64_t epochs() const { return loop_->total_steps(); }
  double elapsed_s() const { return loop_->elapsed_s(); }

 private:
  void init_run();
  ClassifyRunOptions o_;
  std::uint64_t data_seed_ = 0;
  models::ClassifyData train_, val_;
  std::unique_ptr<models::TinyTextClassifier> model_;
  std::unique_ptr<optim::Adam> opt_;
  std::unique_ptr<ClassifyTask> task_;
  std::unique_ptr<Loop> loop_;
};

}  // namespace qkv::train
