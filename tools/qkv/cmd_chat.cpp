// qkv chat: a conversation with a model in the terminal, through its chat template. Replies
// stream as they are made; the conversation's KV cache is kept between turns (infer::Session),
// so a turn computes only its new tokens. Ctrl-C stops the reply being written and keeps the
// conversation; Ctrl-D (end of input) ends it; /reset starts over. With stdin not a terminal,
// every line is one user message and every reply one line of output.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "command.h"
#include "model_dir.h"
#include "qkv/core/error.h"
#include "qkv/infer/language_model.h"
#include "qkv/infer/sampling.h"
#include "qkv/infer/session.h"
#include "sampling_flags.h"

namespace qkv::tool {
namespace {

using i64 = std::int64_t;

struct ChatOptions {
  std::string model, system, chat_template, chat_kwargs, activations = "f32", kv_cache = "f32";
  i64 max_new = 512;
  i64 ctx = 0;
  SamplingFlags sampling;
};

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

// SIGINT sets a flag for the reply loop instead of ending the process (restored on exit).
class SigintFlag {
 public:
  SigintFlag() {
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: a read at the prompt returns, and the loop ends
    sigaction(SIGINT, &sa, &old_);
  }
  ~SigintFlag() { sigaction(SIGINT, &old_, nullptr); }

 private:
  struct sigaction old_ {};
};

int run_chat(const ChatOptions& o) {
  require_model_role(o.model, models::ModelRole::CausalLM, "chat");
  if (o.activations != "f32" && o.activations != "q8")
    throw ValueError("--activations must be f32 or q8, got '" + o.activations + "'");
  const infer::LanguageModel lm = infer::load_language_model(
      o.model, {.chat_template_file = o.chat_template,
                .activations = o.activations == "q8" ? kernels::QActivations::Q8 : kernels::QActivations::F32,
                .kv_cache = infer::parse_kv_type(o.kv_cache, "--kv-cache")});
  const std::map<std::string, std::string> vars =
      o.chat_kwargs.empty() ? std::map<std::string, std::string>{}
                            : tokenize::parse_chat_template_kwargs(o.chat_kwargs, "--chat-template-kwargs");
  // The model's sampling advice (generation_config.json, a GGUF's general.sampling) over
  // llama.cpp's defaults, with the flags given on the command line over both.
  const infer::SamplingOptions sampling = o.sampling.options(&lm.default_sampling);
  lm.tok();  // a chat needs the tokenizer: a clear error now rather than at the first message
  if (!lm.chat_template) lm.render_chat({});  // throws the reason there is no usable template
  const i64 ctx = o.ctx ? o.ctx : std::min<i64>(lm.model->max_positions(), 8192);
  if (ctx > lm.model->max_positions())
    throw ValueError("--ctx " + std::to_string(ctx) + " is more than the model's " +
                     std::to_string(lm.model->max_positions()) + " positions");
  const bool tty = ::isatty(STDIN_FILENO);
  infer::Session session(lm.model, ctx);
  std::vector<tokenize::ChatMessage> messages;
  auto start = [&] {
    messages.clear();
    if (!o.system.empty()) messages.push_back({.role = "system", .content = o.system});
    session.reset();
  };
  start();
  if (tty) {
    std::cerr << "qkv chat with " << lm.name << " (" << lm.architecture << ", context " << ctx
              << "). Ctrl-C stops a reply, Ctrl-D ends, /reset starts over.\n";
    std::ostringstream how;
    if (sampling.temperature == 0) {
      how << "greedy";
    } else {
      how << "temperature " << sampling.temperature;
      if (sampling.top_k > 0) how << ", top-k " << sampling.top_k;
      if (sampling.top_p < 1) how << ", top-p " << sampling.top_p;
      if (sampling.min_p > 0) how << ", min-p " << sampling.min_p;
    }
    if (sampling.repeat_penalty != 1) how << ", repeat penalty " << sampling.repeat_penalty;
    std::cerr << "Sampling: " << how.str() << " (" << lm.default_sampling_source
              << " where no flag says otherwise; --temperature 0 for greedy).\n";
  }
  SigintFlag sigint;
  const i64 V = lm.model->vocab_size();
  for (std::uint64_t turn = 0;; ++turn) {
    if (tty) std::cerr << "> " << std::flush;
    g_interrupted.store(false);
    std::string line;
    if (!std::getline(std::cin, line)) {
      if (tty) std::cerr << "\n";
      return 0;  // Ctrl-D, end of input, or Ctrl-C at the prompt
    }
    if (line.empty()) continue;
    if (line == "/reset") {
      start();
      if (tty) std::cerr << "(a new conversation)\n";
      continue;
    }
    if (line == "/exit" || line == "/quit") return 0;
    messages.push_back({.role = "user", .content = line});
    std::vector<i64> ids;
    try {
      ids = lm.chat_prompt(messages, true, vars);
      if (static_cast<i64>(ids.size()) + 1 > ctx)
        throw ValueError("the conversation has " + std::to_string(ids.size()) + " tokens, the context " +
                         std::to_string(ctx) + "; /reset to start over (or a larger --ctx)");
    } catch (const Error& e) {
      messages.pop_back();
      std::cerr << "qkv: error: " << e.what() << "\n";
      if (!tty) return 1;
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const i64 computed = session.sync(ids);
    const auto t1 = std::chrono::steady_clock::now();
    infer::SamplingOptions so = sampling;
    so.seed = sampling.seed + turn;  // each turn its own stream, the same for the same seed
    infer::Sampler sampler(so);
    sampler.add_prompt(ids.data(), static_cast<i64>(ids.size()));  // the conversation so far, for --repeat-penalty
    tokenize::StreamDecoder dec(lm.tokenizer);
    std::string reply;
    i64 n = 0;
    const char* why = "length";
    while (n < o.max_new) {
      const i64 id = sampler.next(session.logits().data(), V);
      if (lm.is_eos(id)) {
        why = "eos";
        break;
      }
      const std::string piece = dec.push(id);
      reply += piece;
      std::cout << piece << std::flush;
      ++n;
      if (g_interrupted.load()) {
        why = "interrupted";
        break;
      }
      if (session.length() >= ctx) {
        why = "context full";
        break;
      }
      session.push(id);
    }
    const std::string rest = dec.finish();
    reply += rest;
    std::cout << rest << "\n" << std::flush;
    messages.push_back({.role = "assistant", .content = reply});
    const double prefill = std::chrono::duration<double>(t1 - t0).count();
    const double decode = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    if (tty)
      std::cerr << "[" << n << " tokens, " << static_cast<double>(n) / std::max(decode, 1e-9) << " tokens/s; "
                << computed << " prompt tokens computed in " << prefill << " s; " << why << "]\n";
  }
}

QKV_TOOL_COMMAND(chat, {
    .name = "chat",
    .summary = "Chat with a model in the terminal (its chat template, replies streamed, KV cache kept)",
    .order = 10,
    .group = "Chat with and serve a model",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Talks with a chat model (a GGUF file or a Hugging Face folder with a chat template) turn by turn: each "
          "message is rendered with the conversation through the model's chat template, the reply streams as it is "
          "generated, and the conversation's KV cache is kept between turns (a turn computes only its new tokens). "
          "Ctrl-C stops the reply being written (the conversation keeps it), Ctrl-D ends, /reset starts a new "
          "conversation. With stdin not a terminal, every line is one user message and every reply one line of "
          "output.\n\n"
          "Examples:\n"
          "  qkv chat --model models/SmolLM2-135M-Instruct.Q4_1.gguf\n"
          "  echo \"What is the capital of France?\" | qkv chat --model models/SmolLM2-135M-Instruct.Q4_1.gguf");
      auto opt = std::make_shared<ChatOptions>();
      add_lm_model_option(sub, opt->model, "The model: a GGUF file or a model folder with a chat template")->required();
      sub.add_option("--system", opt->system, "A system message that opens the conversation");
      sub.add_option("--max-new", opt->max_new, "Most tokens of one reply")->check(int_range(1, 1 << 20))->capture_default_str();
      sub.add_option("--ctx", opt->ctx, "Context: most tokens of the conversation (default: the model's, at most 8192)")
          ->check(int_range(1, 1 << 24));
      sub.add_option("--chat-template", opt->chat_template, "A Jinja chat template file instead of the model's")
          ->check(input_file("a Jinja template file"))
          ->type_name("FILE");
      sub.add_option("--chat-template-kwargs", opt->chat_kwargs,
                     "Variables for the chat template as a JSON object, e.g. '{\"enable_thinking\": false}'")
          ->type_name("JSON");
      sub.add_option("--activations", opt->activations,
                     "f32 (exact, the default) or q8 (quantized weights meet activations quantized per 32 values)")
          ->capture_default_str();
      sub.add_option("--kv-cache", opt->kv_cache, "f32 (the default) or f16: the KV cache's element type")
          ->capture_default_str();
      add_sampling_flags(sub, opt->sampling);
      return [opt] { return run_chat(*opt); };
    }});

}  // namespace
}  // namespace qkv::tool
