// qkv tokenize: text -> ids (or ids -> text with --decode) with a model folder's
// byte-level BPE (vocab.json + merges.txt), one line per argument; and
// `qkv tokenize train`, which learns such a BPE (cmd_tokenize_train.cpp).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmd_tokenize_train.h"
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
          "  qkv tokenize --model tests/fixtures/gpt2_tiny --decode 72,101\n\n"
          "'qkv tokenize train --text FILE... --vocab-size N --out DIR' learns a tokenizer (see its --help). A TEXT "
          "that is the word train goes after --: qkv tokenize --model DIR -- train");
      auto opt = std::make_shared<TokenizeOptions>();
      // --model and TEXT are required unless the `train` subcommand runs (checked once parsing is done).
      CLI::Option* model = sub.add_option("--model", opt->model, "Model or tokenizer folder with vocab.json and merges.txt")
                               ->check(input_folder("a tokenizer folder (vocab.json + merges.txt)"))
                               ->type_name("DIR");
      CLI::Option* texts = sub.add_option("texts", opt->texts, "Texts (or id lists with --decode)");
      CLI::Option* json = sub.add_flag("--json", opt->json, "One JSON object per line");
      CLI::Option* decode = sub.add_flag("--decode", opt->decode, "Arguments are id lists; print their text");
      CLI::App* train = sub.add_subcommand("train", "Learn a byte-level BPE from text files (see 'qkv tokenize train --help')");
      const Action train_action = setup_tokenize_train(*train);
      sub.parse_complete_callback([model, texts, json, decode, train] {
        if (train->parsed()) {
          // `qkv tokenize --model M train ...`: options of `qkv tokenize` itself mean a mistake.
          for (const CLI::Option* o : {model, texts, decode})
            if (o->count() > 0)
              throw CLI::ValidationError("qkv tokenize train", "does not take " + o->get_name() + " (it trains a "
                                                                  "tokenizer; tokenize with 'qkv tokenize --model DIR TEXT')");
          if (json->count() > 0) throw CLI::ValidationError("qkv tokenize train", "put --json after 'train'");
          return;
        }
        // (not CLI::RequiredError: main.cpp reads that, in a command with subcommands, as a missing subcommand)
        if (model->count() == 0)
          throw CLI::ValidationError("--model is required: the folder with vocab.json and merges.txt ('qkv tokenize "
                                     "train' learns one)");
        if (texts->count() == 0) throw CLI::ValidationError("texts is required: at least one TEXT to tokenize");
      });
      return [opt, train, train_action] { return train->parsed() ? train_action() : run_tokenize(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
