// qkv tokenize train --text FILE... --vocab-size N [--min-frequency F] --out DIR [--json]
#include "cmd_tokenize_train.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "format.h"
#include "output.h"
#include "progress.h"
#include "qkv/io/folder.h"
#include "qkv/tokenize/bpe_train.h"

namespace qkv::tool {

namespace {

struct TrainOptions {
  std::vector<std::string> texts;
  std::string out;
  std::int64_t vocab_size = 0, min_frequency = 0;
  bool json = false, overwrite = false, progress = true;
};

const char* stop_note(tokenize::BpeTrainStop s) {
  switch (s) {
    case tokenize::BpeTrainStop::VocabFull: return "";
    case tokenize::BpeTrainStop::NoPairsLeft: return "no pair of tokens is left to merge";
    case tokenize::BpeTrainStop::BelowMinFrequency: return "every pair left occurs fewer than --min-frequency times";
  }
  return "";
}

int run_train(const TrainOptions& o, std::ostream& out) {
  // Inputs and the output first: nothing is trained or written before they pass.
  for (const std::string& t : o.texts) check_input_file(t, "tokenize train: --text");
  check_output_folder(o.out, {.cmd = "tokenize train", .overwrite = o.overwrite});
  tokenize::BpeTrainOptions to{.vocab_size = o.vocab_size, .min_frequency = o.min_frequency};
  // A bar for the merges on a terminal only (training takes seconds; logs stay clean).
  std::unique_ptr<ProgressBar> bar;
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  to.progress = [&](const tokenize::BpeTrainProgress& p) {
    if (!tty || !o.progress || p.stage != tokenize::BpeTrainProgress::Stage::Merge) return;
    if (!bar) bar = std::make_unique<ProgressBar>("merges", std::max<std::int64_t>(p.total, 1));
    bar->update(std::min(p.done, p.total));
  };
  const auto t0 = std::chrono::steady_clock::now();
  const tokenize::BpeTrainResult r = tokenize::train_byte_level_bpe_files(o.texts, to);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    io::StagedFolder f(o.out, "tokenize train");  // DIR appears (or is replaced) whole, once complete
    tokenize::save_bpe(r, f.path());
    f.commit();
  }
  if (bar) bar->finish();
  const std::string note = stop_note(r.stop);
  if (o.json) {
    out << nlohmann::ordered_json{{"vocab_size", r.vocab.size()}, {"merges", r.merges.size()},
                                  {"text_bytes", r.text_bytes},   {"seconds", seconds},
                                  {"out", o.out}}
               .dump()
        << '\n';
    return 0;
  }
  out << "trained a byte-level BPE on " << r.text_bytes << " bytes of text (" << o.texts.size() << " file"
      << (o.texts.size() == 1 ? "" : "s") << ", " << r.words << " distinct words) in " << fixed(seconds, 2) << " s\n";
  const std::size_t specials = to.special_tokens.size();
  out << "vocab size " << r.vocab.size() << " (" << specials << " special token" << (specials == 1 ? "" : "s")
      << " + 256 bytes + " << r.vocab.size() - 256 - specials << " merged), " << r.merges.size() << " merges\n";
  if (!note.empty())
    out << "stopped before --vocab-size " << o.vocab_size << ": " << note << '\n';
  out << "wrote " << o.out << "/vocab.json and " << o.out << "/merges.txt\n";
  return 0;
}

}  // namespace

Action setup_tokenize_train(CLI::App& sub) {
  sub.footer(
      "Learns a GPT-2 byte-level BPE (GPT-2 pre-tokenization, all 256 bytes, <|endoftext|> as id 0) and writes "
      "DIR/vocab.json and DIR/merges.txt (DIR appears whole once both are written; a DIR that already holds "
      "files is refused unless --overwrite). The merges and ids are those of Hugging Face tokenizers' BpeTrainer "
      "(pre_tokenizers.ByteLevel(add_prefix_space=False), initial_alphabet=ByteLevel.alphabet(), "
      "special_tokens=[\"<|endoftext|>\"]) trained with Tokenizer.train([FILE, ...]): every line of the files, "
      "with its line end, is one sequence. DIR loads with `qkv tokenize --model DIR`, `qkv generate` and "
      "transformers' GPT2TokenizerFast.\n\n"
      "Examples:\n"
      "  qkv tokenize train --text tests/fixtures/text/kjv_genesis.txt --vocab-size 1000 --out /tmp/bpe\n"
      "  qkv tokenize --model /tmp/bpe \"In the beginning\"");
  auto opt = std::make_shared<TrainOptions>();
  sub.add_option("--text", opt->texts, "UTF-8 text files to learn from (in order)")->type_name("FILE")->required()->expected(1, -1);
  sub.add_option("--vocab-size", opt->vocab_size, "Tokens in the vocabulary (at least 257: 256 bytes + <|endoftext|>)")
      ->required()
      ->check(int_range(1, std::numeric_limits<std::int32_t>::max()));
  sub.add_option("--min-frequency", opt->min_frequency, "Do not merge a pair seen fewer times (default 0)")
      ->check(int_range(0, std::numeric_limits<std::int64_t>::max()));
  sub.add_option("--out", opt->out, "Folder to write vocab.json and merges.txt to (created if missing)")
      ->type_name("DIR")
      ->required();
  sub.add_flag("--json", opt->json, "One JSON object: vocab_size, merges, text_bytes, seconds, out");
  add_overwrite_flag(sub, opt->overwrite, "--out");
  add_no_progress_flag(sub, opt->progress);
  return [opt] { return run_train(*opt, std::cout); };
}

}  // namespace qkv::tool
