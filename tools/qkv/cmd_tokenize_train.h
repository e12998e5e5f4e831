// qkv tokenize train (cmd_tokenize_train.cpp): learns a byte-level BPE from text
// files, as Hugging Face tokenizers' BpeTrainer does, and writes vocab.json and
// merges.txt. Mounted under `qkv tokenize` by cmd_tokenize.cpp.
#pragma once
#include <CLI/CLI.hpp>

#include "command.h"

namespace qkv::tool {

// Declares the options of `qkv tokenize train` on sub; returns what to run.
Action setup_tokenize_train(CLI::App& sub);

}  // namespace qkv::tool
