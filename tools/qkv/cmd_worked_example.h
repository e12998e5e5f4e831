// qkv worked-example: the second tutorial's d_k = 2 attention example.
#pragma once
#include <iosfwd>

namespace qkv::tool {

struct WorkedExampleOptions {
  bool json = false;  // one JSON object instead of the tables
};

// Computes QK^T, the scaled scores and the softmax weights with the library
// and prints them beside the tutorial's printed table. Returns the exit code.
int run_worked_example(const WorkedExampleOptions& opt, std::ostream& out);

}  // namespace qkv::tool
