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

#include <nlohmann/json.hpp>

#include "command.h"
#include "line_reader.h"
#include "model_dir.h"
#include "qkv/core/error.h"
#include "qkv/infer/language_model.h"
#include "qkv/infer/sampling.h"
#include "qkv/infer/reply.h"
#include "qkv/infer/session.h"
#include "qkv/io/files.h"
#include "sampling_flags.h"

namespace qkv::tool {
namespace {

using i64 = std::int64_t;

struct ChatOptions {
  std::string model, system, chat_template, chat_kwargs, activations = "f32", kv_cache = "f32";
  i64 max_new = 512;
  i64 ctx = 0;
  bool no_context_shift = false;
  bool no_history = false;
  bool hide_reasoning = false;
  SamplingFlags sampling;
};

const char* const kChatHelp =
    "Commands (a line starting with / ; //text sends /text):\n"
    "  /help               this list\n"
    "  /reset              a new conversation (the system message kept)\n"
    "  /system TEXT        a new conversation with TEXT as the system message\n"
    "  /save FILE          the conversation as OpenAI-style JSON ([{\"role\", \"content\"}, ...])\n"
    "  /load FILE          continue a conversation saved by /save (or any such JSON list)\n"
    "  /set NAME VALUE     temperature, top_k, top_p, min_p, repeat_penalty, seed, max_new\n"
    "  /tokens             how much of the context the conversation uses\n"
    "  /exit, /quit        end (as Ctrl-D)\n"
    "A line ending in \\ continues on the next line; a line holding \"\"\" alone starts and ends a\n"
    "block of several lines. Ctrl-C stops a reply (the conversation keeps what was written).\n";

// One message from the input: a line, lines joined while they end in a backslash, or the lines
// between two lines holding """ alone. False at the end of the input.
bool read_message(LineReader& in, std::string& out) {
  out.clear();
  std::string line;
  if (!in.read("> ", line)) return false;
  if (line == "\"\"\"") {
    bool first = true;
    while (in.read(". ", line) && line != "\"\"\"") {
      out += (first ? "" : "\n") + line;
      first = false;
    }
  } else {
    while (!line.empty() && line.back() == '\\') {
      line.pop_back();
      out += line + "\n";
      if (!in.read(". ", line)) return true;
    }
    out += line;
  }
  in.remember(out);
  return true;
}

std::string json_of(const std::vector<tokenize::ChatMessage>& messages) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

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
  const bool tty = ::isatty(STDIN_FILENO) && ::isatty(STDOUT_FILENO);
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
  // Line editing and history on a terminal (libedit); plain lines otherwise.
  LineReader reader(tty, o.no_history ? "" : default_chat_history_file());
  SigintFlag sigint;
  const i64 V = lm.model->vocab_size();
  infer::SamplingOptions sampling_now = sampling;
  i64 max_new = o.max_new;
  // A command's answer or complaint: on stderr, one line.
  auto say = [&](const std::string& text) { std::cerr << text << "\n"; };
  for (std::uint64_t turn = 0;; ++turn) {
    g_interrupted.store(false);
    std::string line;
    if (!read_message(reader, line)) {
      if (tty) std::cerr << "\n";
      return 0;  // Ctrl-D, end of input, or Ctrl-C at the prompt
    }
    if (line.empty()) continue;
    if (line[0] == '/' && line.size() > 1 && line[1] == '/') {
      line.erase(0, 1);  // "//text": the text "/text"
    } else if (line[0] == '/') {
      const auto space = line.find(' ');
      const std::string cmd = line.substr(0, space), arg = space == std::string::npos ? "" : line.substr(space + 1);
      try {
        if (cmd == "/exit" || cmd == "/quit") return 0;
        if (cmd == "/help") {
          std::cerr << kChatHelp;
        } else if (cmd == "/reset") {
          start();
          say("(a new conversation)");
        } else if (cmd == "/system") {
          if (arg.empty()) throw ValueError("/system needs the text of the system message");
          messages.clear();
          messages.push_back({.role = "system", .content = arg});
          session.reset();
          say("(a new conversation with that system message)");
        } else if (cmd == "/save") {
          if (arg.empty()) throw ValueError("/save needs a file name");
          io::write_file_atomic(arg, json_of(messages), "/save");
          say("(saved " + std::to_string(messages.size()) + " messages to " + arg + ")");
        } else if (cmd == "/load") {
          if (arg.empty()) throw ValueError("/load needs a file name");
          std::vector<tokenize::ChatMessage> loaded = tokenize::parse_chat_messages_json(io::read_file(arg, "/load"), arg);
          lm.chat_prompt(loaded, true, vars);  // the template takes it
          messages = std::move(loaded);
          say("(loaded " + std::to_string(messages.size()) + " messages from " + arg + ")");
        } else if (cmd == "/set") {
          const auto sp = arg.find(' ');
          if (sp == std::string::npos) throw ValueError("/set needs a name and a value, e.g. /set temperature 0.7");
          const std::string name = arg.substr(0, sp), value = arg.substr(sp + 1);
          std::size_t used = 0;
          double v = 0;
          try {
            v = std::stod(value, &used);
          } catch (const std::exception&) {
            used = 0;
          }
          if (used == 0 || used != value.size()) throw ValueError("/set " + name + ": '" + value + "' is not a number");
          infer::SamplingOptions next = sampling_now;
          if (name == "temperature") next.temperature = v;
          else if (name == "top_k" || name == "top-k") next.top_k = static_cast<i64>(v);
          else if (name == "top_p" || name == "top-p") next.top_p = v;
          else if (name == "min_p" || name == "min-p") next.min_p = v;
          else if (name == "repeat_penalty" || name == "repeat-penalty") next.repeat_penalty = v;
          else if (name == "seed") next.seed = static_cast<std::uint64_t>(v);
          else if (name == "max_new" || name == "max-new") {
            if (v < 1) throw ValueError("/set max_new must be >= 1");
            max_new = static_cast<i64>(v);
          } else {
            throw ValueError("/set: no setting '" + name + "' (temperature, top_k, top_p, min_p, repeat_penalty, seed, max_new)");
          }
          infer::check_sampling(next);
          sampling_now = next;
          say("(" + name + " = " + value + ")");
        } else if (cmd == "/tokens") {
          const i64 used = messages.empty() ? 0 : static_cast<i64>(lm.chat_prompt(messages, false, vars).size());
          say("(" + std::to_string(used) + " of " + std::to_string(ctx) + " context tokens used by " +
              std::to_string(messages.size()) + " messages)");
        } else {
          throw ValueError("no command " + cmd + "; /help lists them (//text sends a message starting with /)");
        }
      } catch (const Error& e) {
        say("qkv: " + std::string(e.what()));
      }
      continue;
    }
    messages.push_back({.role = "user", .content = line});
    std::vector<i64> ids;
    try {
      if (o.no_context_shift) {
        ids = lm.chat_prompt(messages, true, vars);
        if (static_cast<i64>(ids.size()) + 1 > ctx)
          throw ValueError("the conversation has " + std::to_string(ids.size()) + " tokens, the context " +
                           std::to_string(ctx) + "; /reset to start over (or a larger --ctx)");
      } else {
        // Context shifting: the oldest turns go (the system message stays) so that the prompt
        // and a reply's room fit.
        std::size_t dropped = 0;
        const i64 room = std::max<i64>(1, std::min<i64>(max_new, ctx / 4));
        ids = lm.chat_prompt_within(messages, ctx, room, &dropped, vars);
        if (dropped > 0) {
          const bool dim = ::isatty(STDERR_FILENO);  // no escape codes where stderr is not a terminal
          say(std::string(dim ? "\x1b[2m" : "") + "(the context is full: the oldest " + std::to_string(dropped) +
              " messages were dropped)" + (dim ? "\x1b[0m" : ""));
        }
      }
    } catch (const Error& e) {
      if (!messages.empty() && messages.back().role == "user" && messages.back().content == line) messages.pop_back();
      std::cerr << "qkv: error: " << e.what() << "\n";
      if (!tty) return 1;
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const i64 computed = session.sync(ids);
    const auto t1 = std::chrono::steady_clock::now();
    infer::SamplingOptions so = sampling_now;
    so.seed = sampling_now.seed + turn;  // each turn its own stream, the same for the same seed
    infer::Sampler sampler(so);
    sampler.add_prompt(ids.data(), static_cast<i64>(ids.size()));  // the conversation so far, for --repeat-penalty
    // A reasoning model's reply (infer/reply.h): its reasoning printed dimmed (or not at all with
    // --hide-reasoning), the markup of its format never; the answer alone joins the conversation.
    infer::ReplyStream text(lm.tokenizer, infer::reply_format(lm.tok()), ids, {});
    const bool dim_out = ::isatty(STDOUT_FILENO);
    bool in_thought = false;
    std::string reply;
    auto show = [&](const infer::ReplyStream::Piece& p) {
      if (!p.reasoning.empty() && !o.hide_reasoning) {
        if (!in_thought && dim_out) std::cout << "\x1b[2m";
        in_thought = true;
        std::cout << p.reasoning;
      }
      if (!p.content.empty() && in_thought) {
        std::cout << (dim_out ? "\x1b[0m" : "") << "\n";
        in_thought = false;
      }
      reply += p.content;
      std::cout << p.content << std::flush;
    };
    i64 n = 0;
    const char* why = "length";
    while (n < max_new) {
      const i64 id = sampler.next(session.logits().data(), V);
      if (lm.is_eos(id)) {
        why = "eos";
        break;
      }
      show(text.push(id));
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
    show(text.finish());
    if (in_thought && dim_out) std::cout << "\x1b[0m";
    std::cout << "\n" << std::flush;
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
          "Ctrl-C stops the reply being written (the conversation keeps it), Ctrl-D ends; /help lists the commands "
          "(/reset, /system, /save, /load, /set, /tokens). A line ending in \\ continues on the next, and lines "
          "between two lines of \"\"\" are one message. When the context is full, the oldest turns are dropped (the "
          "system message stays; --no-context-shift refuses instead). It samples as the model advises, else as "
          "llama.cpp does (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05); --temperature 0 is greedy. With "
          "stdin not a terminal, every line is one user message and every reply one line of output.\n\n"
          "Examples:\n"
          "  qkv chat --model models/SmolLM2-135M-Instruct.Q4_1.gguf\n"
          "  echo \"What is the capital of France?\" | qkv chat --model models/SmolLM2-135M-Instruct.Q4_1.gguf");
      auto opt = std::make_shared<ChatOptions>();
      add_lm_model_option(sub, opt->model, "The model: a GGUF file or a model folder with a chat template")->required();
      sub.add_option("--system", opt->system, "A system message that opens the conversation");
      sub.add_option("--max-new", opt->max_new, "Most tokens of one reply")->check(int_range(1, 1 << 20))->capture_default_str();
      sub.add_option("--ctx", opt->ctx, "Context: most tokens of the conversation (default: the model's, at most 8192)")
          ->check(int_range(1, 1 << 24));
      sub.add_flag("--no-history", opt->no_history,
                   "Do not read or write the history of messages ($XDG_STATE_HOME/qkv/chat_history, else "
                   "~/.local/state/qkv/chat_history)");
      sub.add_flag("--hide-reasoning", opt->hide_reasoning,
                   "Do not print a reasoning model's reasoning (<think> ... </think>, gpt-oss's analysis channel); "
                   "it is printed dimmed otherwise, and never kept in the conversation");
      sub.add_flag("--no-context-shift", opt->no_context_shift,
                   "When the context is full, refuse the message instead of dropping the oldest turns");
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
