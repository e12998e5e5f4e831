// qkv tokenize: text -> ids (or ids -> text with --decode) with a model folder's
// byte-level BPE (vocab.json + merges.txt), one line per argument.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "model_dir.h"

namespace qkv::tool {
namespace {

struct TokenizeOptions {
  std::string model;
  std::vector<std::string> texts;
  bool json = false, decode = false;
};

int run_tokenize(const TokenizeOptions& o, std::ostream& out) {
  const tokenize::ByteLevelBPE tok = *load_tokenizer(o.model, true, "by qkv tokenize");
  for (const std::string& t : o.texts) {
    if (o.decode) {
      const std::vector<std::int64_t> ids = parse_ids(t, "--decode");
      const std::string text = tok.decode(ids);
      if (o.json)
        out << nlohmann::ordered_json{{"ids", ids}, {"text", text}}.dump() << "\n";
      else
        out << text << "\n";
      continue;
    }
    const std::vector<std::int64_t> ids = tok.encode(t);
    if (o.json) {
      out << nlohmann::ordered_json{{"text", t}, {"ids", ids}}.dump() << "\n";
    } else {
      for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
      out << "\n";
    }
  }
  return 0;
}

QKV_TOOL_COMMAND(tokenize, {
    .name = "tokenize",
    .summary = "Token ids of texts with a model folder's byte-level BPE (or texts of ids with --decode)",
    .order = 61,
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "One line per TEXT: its ids separated by spaces, or with --json {\"text\": ..., \"ids\": [...]}. With "
          "--decode each argument is a list of ids (\"15496,995\") and the line is its text (bytes that are not "
          "valid UTF-8 become U+FFFD, as Hugging Face decodes them). The ids are those of Hugging Face tokenizers "
          "for the same vocab.json and merges.txt.\n\n"
          "Examples:\n"
          "  qkv tokenize --model tests/fixtures/gpt2_tiny \"Hello world\" \"And God said\"\n"
          "  qkv tokenize --model tests/fixtures/gpt2_tiny --decode 72,101");
      auto opt = std::make_shared<TokenizeOptions>();
      sub.add_option("--model", opt->model, "Folder with vocab.json and merges.txt")->required()->check(CLI::ExistingDirectory);
      sub.add_option("texts", opt->texts, "Texts (or id lists with --decode)")->required();
      sub.add_flag("--json", opt->json, "One JSON object per line");
      sub.add_flag("--decode", opt->decode, "Arguments are id lists; print their text");
      return [opt] { return run_tokenize(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
