// qkv search (cmd_search.cpp), also run by the demo.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace qkv::tool {

struct SearchOptions {
  std::string index, model;
  std::vector<std::string> queries;
  std::int64_t top_k = 5;
  bool json = false;
};

// Prints the top_k index lines closest to each query. Returns the exit code; throws qkv::Error.
int run_search(const SearchOptions& o, std::ostream& out);

}  // namespace qkv::tool
