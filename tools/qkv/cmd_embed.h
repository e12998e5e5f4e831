// qkv embed (cmd_embed.cpp), also run by the demo.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace qkv::tool {

struct EmbedCmdOptions {
  std::string model, file, out;
  std::vector<std::string> texts;
  std::int64_t batch = 32;
  bool json = false, similarity = false;
  bool overwrite = false;  // replace an existing --out file
  bool progress = true;    // a progress bar on stderr for long inputs
};

// Embeds o.texts or the lines of o.file; prints them (JSON lines with o.json), their similarity
// matrix (o.similarity) or writes an index (o.out). Returns the exit code; throws qkv::Error.
int run_embed(const EmbedCmdOptions& o, std::ostream& out);

}  // namespace qkv::tool
