// qkv umbrella header: everything a user of the library needs.
#pragma once
#include "qkv/autograd/autograd.h"
#include "qkv/core/parallel.h"
#include "qkv/core/rng.h"
#include "qkv/core/tensor.h"
#include "qkv/io/tensors.h"
#include "qkv/nn/attention.h"
#include "qkv/nn/layers.h"
#include "qkv/nn/module.h"
#include "qkv/nn/positional.h"
#include "qkv/nn/transformer.h"
#include "qkv/ops/ops.h"
#include "qkv/optim/optimizer.h"
