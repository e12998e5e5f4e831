# Library sources above the kernels (one line per file). Paths relative to src/.
set(QKV_SOURCES
  core/tensor.cpp
  autograd/autograd.cpp
  ops/elementwise.cpp
  ops/reduce.cpp
  ops/shape_ops.cpp
  ops/linalg.cpp
  ops/nn_functional.cpp
  ops/attention.cpp
  nn/module.cpp
  nn/layers.cpp
  nn/positional.cpp
  nn/attention.cpp
  nn/transformer.cpp
  optim/optimizer.cpp
  io/tensors.cpp
  io/checkpoint.cpp
  io/files.cpp
  infer/kv_cache.cpp
  models/gpt2.cpp
  models/gpt2_io.cpp
  infer/sampling.cpp
  infer/generate.cpp
  models/attention_maps.cpp
  models/classifier.cpp
  models/seq2seq.cpp
  models/seq2seq_decode.cpp
  models/bert.cpp
  tokenize/wordpiece.cpp
  tokenize/wordpiece_unicode.cpp
  infer/embed.cpp
  viz/heatmap.cpp
  viz/font.cpp
  viz/explorer.cpp
  tokenize/utf8.cpp
  tokenize/pretokenize.cpp
  tokenize/bpe_load.cpp
  tokenize/bpe.cpp
  train/loop.cpp
  train/corpus.cpp
  train/lm.cpp
  train/seq2seq.cpp
  tokenize/bpe_train.cpp
)

# The functional ops and the optimisers are elementwise loops and reductions that only
# vectorise at -O3 (GCC's -O2 cost model refuses loops that need alias checks); the rest
# of the library stays at -O2 for build time.
set(QKV_O3_SOURCES
  ops/elementwise.cpp
  ops/reduce.cpp
  ops/shape_ops.cpp
  ops/linalg.cpp
  ops/nn_functional.cpp
  ops/attention.cpp
  optim/optimizer.cpp
)
