// The functional API: check shapes -> record autograd node -> call kernel.
#pragma once
#include "qkv/ops/attention.h"
#include "qkv/ops/elementwise.h"
#include "qkv/ops/linalg.h"
#include "qkv/ops/nn_functional.h"
#include "qkv/ops/reduce.h"
#include "qkv/ops/rotary.h"
#include "qkv/ops/shape_ops.h"
