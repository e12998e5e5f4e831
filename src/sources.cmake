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
)
