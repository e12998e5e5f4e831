// `qkv bench embed`: sentence-embedding throughput of a BERT folder on 1000 generated sentences.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "command.h"

namespace qkv::tool {

// n sentences of mixed length (3 to ~250 words, most short), the same on every run and machine.
std::vector<std::string> bench_sentences(std::int64_t n);

// Adds `embed` to the `qkv bench` subcommand; returns it and its action.
std::pair<CLI::App*, Action> add_bench_embed(CLI::App& bench);

}  // namespace qkv::tool
