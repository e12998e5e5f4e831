// qkv tokenize: text -> ids (or ids -> text with --decode) with a model's tokenizer (a folder's
// tokenizer.json, tokenizer.model, vocab.json + merges.txt or vocab.txt, or a GGUF file's
// vocabulary: tokenize::find_tokenizer), one line per argument; --chat / --messages: the prompt the chat template renders, and its ids; and
// `qkv tokenize train`, which learns such a BPE (cmd_tokenize_train.cpp).
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cmd_tokenize_train.h"
#include "command.h"
#include "model_dir.h"
#include "qkv/core/error.h"
#include "qkv/infer/language_model.h"
#include "qkv/io/files.h"

namespace qkv::tool {
namespace {

struct TokenizeOptions {
  std::string model, chat, messages, chat_template, chat_kwargs;
  std::vector<std::string> texts;
  bool json = false, decode = false, add_special = false;
};

// The rendered chat prompt (--chat TEXT as one user message, or --messages FILE) and its ids.
int run_tokenize_chat(const TokenizeOptions& o, std::ostream& out) {
  if (!o.texts.empty() || o.decode)
    throw ValueError("tokenize: --chat / --messages take no TEXT arguments or --decode");
  if (!o.chat.empty() && !o.messages.empty()) throw ValueError("tokenize: give --chat or --messages, not both");
  const infer::LanguageModel lm = infer::load_language_model(o.model, {.chat_template_file = o.chat_template});
  std::vector<tokenize::ChatMessage> messages;
  if (!o.messages.empty())
    messages = tokenize::parse_chat_messages_json(io::read_file(o.messages, "--messages"), o.messages);
  else
    messages.push_back({.role = "user", .content = o.chat});
  const std::map<std::string, std::string> vars =
      o.chat_kwargs.empty() ? std::map<std::string, std::string>{}
                            : tokenize::parse_chat_template_kwargs(o.chat_kwargs, "--chat-template-kwargs");
  const std::string text = lm.render_chat(messages, true, vars);
  const std::vector<std::int64_t> ids = lm.chat_prompt(messages, true, vars);
  if (o.json) {
    out << nlohmann::ordered_json{{"text", text}, {"ids", ids}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
        << "\n";
  } else {
    out << text << "\n";
    for (std::size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << ids[i];
    out << "\n";
  }
  return 0;
}

// The tokenizer of a GGUF file (its header only) or of a folder; a folder without one names the
// missing file.
std::shared_ptr<const tokenize::Tokenizer> model_tokenizer(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(model, ec) && !tokenize::find_tokenizer(model))
    throw FormatError(model + " has no tokenizer (tokenizer.ggml.model)");
  return load_tokenizer(model, true, "by qkv tokenize");
}

int run_tokenize(const TokenizeOptions& o, std::ostream& out) {
  if (!o.chat.empty() || !o.messages.empty()) return run_tokenize_chat(o, out);
  const auto tokp = model_tokenizer(o.model);
  const tokenize::Tokenizer& tok = *tokp;
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
    const std::vector<std::int64_t> ids = o.add_special ? tok.encode_with_specials(t) : tok.encode(t);
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
    .summary = "Token ids of texts with a model's tokenizer (or texts of ids with --decode; chat prompts)",
    .order = 52,
    .group = "Inspect, convert and measure",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "One line per TEXT: its ids separated by spaces, or with --json {\"text\": ..., \"ids\": [...]}. With "
          "--decode each argument is a list of ids (\"15496,995\") and the line is its text (bytes that are not "
          "valid UTF-8 become U+FFFD, as Hugging Face decodes them). The ids are transformers' "
          "tokenizer(text, add_special_tokens=False) for the folder's files (special tokens written in the text are "
          "matched as tokens); --add-special adds those the tokenizer puts around a text (a BOS, BERT's [CLS] and "
          "[SEP]), as tokenizer(text) and qkv generate do. A GGUF file's vocabulary tokenizes as llama.cpp does "
          "(its SentencePiece vocabularies put a space before the text after every special token).\n\n"
          "--chat TEXT (or --messages FILE) prints the prompt the model's chat template renders and its ids (the "
          "ids qkv generate --chat feeds the model; with --json {\"text\", \"ids\"}).\n\n"
          "Examples:\n"
          "  qkv tokenize --model tests/fixtures/gpt2_tiny \"Hello world\" \"And God said\"\n"
          "  qkv tokenize --model models/SmolLM2-135M-Instruct.Q4_1.gguf --chat \"Hi!\" --json\n"
          "  qkv tokenize --model tests/fixtures/gpt2_tiny --decode 72,101\n\n"
          "'qkv tokenize train --text FILE... --vocab-size N --out DIR' learns a tokenizer (see its --help). A TEXT "
          "that is the word train goes after --: qkv tokenize --model DIR -- train");
      auto opt = std::make_shared<TokenizeOptions>();
      // --model and TEXT are required unless the `train` subcommand runs (checked once parsing is done).
      CLI::Option* model = add_lm_model_option(sub, opt->model, "A GGUF file, or a model / tokenizer folder (tokenizer.json, "
                                                                 "tokenizer.model, vocab.json + merges.txt, or vocab.txt)");
      CLI::Option* chat = sub.add_option("--chat", opt->chat, "The prompt of this user message through the chat template");
      CLI::Option* messages = sub.add_option("--messages", opt->messages, "The prompt of a conversation (JSON list of {role, content})")
                                  ->check(input_file("a JSON file of messages"))
                                  ->type_name("FILE");
      sub.add_option("--chat-template", opt->chat_template, "A Jinja chat template file instead of the model's")
          ->check(input_file("a Jinja template file"))
          ->type_name("FILE");
      sub.add_option("--chat-template-kwargs", opt->chat_kwargs,
                     "Variables for the chat template as a JSON object, e.g. '{\"enable_thinking\": false}'")
          ->type_name("JSON");
      CLI::Option* texts = sub.add_option("texts", opt->texts, "Texts (or id lists with --decode)");
      CLI::Option* json = sub.add_flag("--json", opt->json, "One JSON object per line");
      CLI::Option* decode = sub.add_flag("--decode", opt->decode, "Arguments are id lists; print their text");
      sub.add_flag("--add-special", opt->add_special,
                   "Add the special tokens the tokenizer puts around a text (BOS; [CLS] ... [SEP]), as qkv generate does")
          ->excludes(decode);
      CLI::App* train = sub.add_subcommand("train", "Learn a byte-level BPE from text files (see 'qkv tokenize train --help')");
      const Action train_action = setup_tokenize_train(*train);
      sub.parse_complete_callback([model, texts, json, decode, train, chat, messages] {
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
        if (texts->count() == 0 && chat->count() == 0 && messages->count() == 0)
          throw CLI::ValidationError("texts is required: at least one TEXT to tokenize (or --chat / --messages)");
      });
      return [opt, train, train_action] { return train->parsed() ? train_action() : run_tokenize(*opt, std::cout); };
    }});

}  // namespace
}  // namespace qkv::tool
