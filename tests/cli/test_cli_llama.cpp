// End-to-end tests of the language-model commands on the Llama family: `qkv generate` (--chat,
// --messages, --logprobs, --ignore-eos) and `qkv chat` on SmolLM2-135M-Instruct (the GGUF file
// `make models` fetches), `qkv convert` to GGUF and back on the committed tiny Llama folder, and
// `qkv bench generate` on a GGUF file; each bad input a clear one-line error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <iterator>
#include <cstdlib>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "testing/sanitizers.h"

namespace {

namespace fs = std::filesystem;
using qkv::cli_test::Result;
using qkv::cli_test::json_lines;
using qkv::cli_test::run;

const std::string kSmol = std::string(QKV_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kTiny = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/llama_family/llama";

struct Scratch {
  fs::path dir = qkv::cli_test::unique_temp("llm");
  Scratch() { fs::create_directories(dir); }
  ~Scratch() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(dir / name, std::ios::binary) << bytes;
    return (dir / name).string();
  }
};

void need_smol() { ASSERT_TRUE(fs::exists(kSmol)) << kSmol << " is missing: run `make models` first"; }

TEST(CliLlama, ChatPromptThroughTheTemplateAnswers) {
  need_smol();
  const Result r = run("generate --model '" + kSmol + "' --chat 'What is the capital of France?' --max-new 20 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = json_lines(r.out).at(0);
  // SmolLM2's ChatML template with its default system message, then the reply (greedy; the same
  // ids as transformers on the dequantized weights: tests/models/test_llama_parity.cpp).
  EXPECT_NE(j["prompt"].get<std::string>().find("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                                                "<|im_start|>assistant\n"),
            std::string::npos)
      << j["prompt"];
  EXPECT_EQ(j["text"], "The capital of France is Paris.");
  EXPECT_EQ(j["stop_reason"], "eos");
  // As text: the reply alone (the templated conversation with --verbose-prompt); a plain prompt
  // is shown before its continuation unless --no-display-prompt.
  const Result shown = run("generate --model '" + kSmol + "' --chat 'What is the capital of France?' --max-new 20");
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_EQ(shown.out, "The capital of France is Paris.\n");
  const Result verbose = run("generate --model '" + kSmol + "' --chat 'What is the capital of France?' --max-new 20 --verbose-prompt");
  ASSERT_EQ(verbose.code, 0) << verbose.err;
  EXPECT_EQ(verbose.out, j["prompt"].get<std::string>() + "The capital of France is Paris.\n");
  const Result plain = run("generate --model '" + kSmol + "' --max-new 3 'The capital of France'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.out.rfind("The capital of France", 0), 0u) << plain.out;
  const Result bare = run("generate --model '" + kSmol + "' --max-new 3 --no-display-prompt 'The capital of France'");
  ASSERT_EQ(bare.code, 0) << bare.err;
  EXPECT_EQ(plain.out, "The capital of France" + bare.out) << bare.out;
  // qkv tokenize --chat shows that prompt and its ids; plain texts use the GGUF's vocabulary.
  const Result t = run("tokenize --model '" + kSmol + "' --chat 'What is the capital of France?' --json");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(json_lines(t.out).at(0)["ids"], j["prompt_ids"]);
  EXPECT_EQ(json_lines(t.out).at(0)["text"], j["prompt"]);
  const Result p = run("tokenize --model '" + kSmol + "' --json 'Hello world'");
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(json_lines(p.out).at(0)["ids"], (nlohmann::json{19556, 905})) << p.out;
  // --messages: the same conversation as JSON gives the same reply.
  Scratch s;
  const std::string m = s.write("m.json", R"([{"role": "user", "content": "What is the capital of France?"}])");
  const Result r2 = run("generate --model '" + kSmol + "' --messages '" + m + "' --max-new 20 --json");
  ASSERT_EQ(r2.code, 0) << r2.err;
  EXPECT_EQ(json_lines(r2.out).at(0)["new_ids"], j["new_ids"]);
  // --ignore-eos runs to --max-new; --logprobs gives each token's and the top alternatives'.
  const Result r3 =
      run("generate --model '" + kSmol + "' --chat 'What is the capital of France?' --max-new 12 --ignore-eos --logprobs 3 --json");
  ASSERT_EQ(r3.code, 0) << r3.err;
  const auto j3 = json_lines(r3.out).at(0);
  EXPECT_EQ(j3["new_ids"].size(), 12u);
  EXPECT_EQ(j3["stop_reason"], "length");
  ASSERT_EQ(j3["logprobs"].size(), 12u);
  for (const auto& t : j3["logprobs"]) {
    ASSERT_EQ(t["top"].size(), 3u);
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    EXPECT_EQ(t["top"][0]["id"], t["id"]) << "greedy picks the most likely token";
  }
}

TEST(CliLlama, PromptIdsWithATokenizerPrintTheContinuation) {
  need_smol();
  const std::string ids = "1,504,3458,314";
  const Result r = run("generate --model '" + kSmol + "' --prompt-ids " + ids + " --max-new 4 --ignore-eos");
  ASSERT_EQ(r.code, 0) << r.err;
  const Result j = run("generate --model '" + kSmol + "' --prompt-ids " + ids + " --max-new 4 --ignore-eos --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const auto o = json_lines(j.out).at(0);
  EXPECT_EQ(o["new_ids"].size(), 4u);
  EXPECT_EQ(r.out, "[0] " + o["text"].get<std::string>() + "\n");
}

TEST(CliLlama, ChatKeepsTheConversation) {
  need_smol();
  Scratch s;
  const std::string in = s.write("in.txt", "What is the capital of France?\n/reset\nWhat is the capital of France?\n");
  const Result r = run("chat --model '" + kSmol + "' --temperature 0 --max-new 20 < '" + in + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "The capital of France is Paris.\nThe capital of France is Paris.\n");
}

// --kv-cache f16: keys and values kept as IEEE halves (llama.cpp's default cache). The reply to
// the chat prompt is unchanged, and bench generate counts the cache at half the bytes.
// qkv chat samples as the model advises, else as llama.cpp does (temperature 0.8, top-k 40, top-p
// 0.95, min-p 0.05): greedy decoding looped on SmolLM2 ("She was a great beauty, and she was a
// great beauty, ..."); with the defaults no reply repeats a 6-gram more than twice (fixed seeds).
TEST(CliLlama, ChatDefaultSamplingDoesNotLoop) {
  need_smol();
  Scratch s;
  const std::string in = s.write("q.txt", "What is the capital of France?\nGive me one tip to sleep better.\n"
                                          "Write a story about a beautiful princess.\n");
  for (const int seed : {1, 2}) {
    const Result r = run("chat --model '" + kSmol + "' --max-new " + std::to_string(qkv::testing::full_or_reduced(160, 60)) +
                         " --seed " + std::to_string(seed) + " < '" + in + "'");
    ASSERT_EQ(r.code, 0) << r.err;
    std::istringstream words(r.out);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    EXPECT_GT(w.size(), 30u) << r.out;
    std::map<std::vector<std::string>, int> count;
    int worst = 0;
    for (std::size_t i = 0; i + 6 <= w.size(); ++i)
      worst = std::max(worst, ++count[std::vector<std::string>(w.begin() + static_cast<std::ptrdiff_t>(i),
                                                                w.begin() + static_cast<std::ptrdiff_t>(i + 6))]);
    EXPECT_LE(worst, 2) << "seed " << seed << ":\n" << r.out;
  }
  // Greedy on request, the same reply as generate --chat.
  const Result g = run("chat --model '" + kSmol + "' --temperature 0 --max-new 20 < '" + in + "'");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(g.out.rfind("The capital of France is Paris.\n", 0), 0u) << g.out;
}

// The chat's commands, multi-line messages and context shifting, with stdin a file (one message
// per line): commands are never sent to the model; /save then /load continues the same
// conversation (the next reply is the one the whole conversation gets from generate --messages).
TEST(CliLlama, ChatCommandsMultiLineMessagesAndContextShift) {
  need_smol();
  Scratch s;
  const std::string saved = (s.dir / "conv.json").string();
  const std::string in = s.write("in.txt", "/help\n/set temperature 0\nWhat is the capital of France?\n/tokens\n"
                                           "\"\"\"\nfirst line\nsecond line\n\"\"\"\nthird \\\nfourth\n/save " + saved +
                                           "\n/bogus\n/set colour 3\n");
  const Result r = run("chat --model '" + kSmol + "' --max-new 12 < '" + in + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("The capital of France is Paris.\n", 0), 0u) << r.out;
  for (const char* want : {"/save FILE", "(temperature = 0)", "context tokens used by 2 messages", "(saved 6 messages to ",
                           "no command /bogus; /help lists them", "/set: no setting 'colour'"})
    EXPECT_NE(r.err.find(want), std::string::npos) << want << " in\n" << r.err;
  std::ifstream f(saved);
  const auto conv = nlohmann::json::parse(f);
  ASSERT_EQ(conv.size(), 6u) << conv;
  EXPECT_EQ(conv[2]["content"], "first line\nsecond line");
  EXPECT_EQ(conv[4]["content"], "third \nfourth");
  // /load, then one more message: the reply generate --messages gives the whole conversation.
  const std::string more = s.write("more.txt", "/load " + saved + "\nAnd of Italy?\n");
  const Result l = run("chat --model '" + kSmol + "' --temperature 0 --max-new 12 < '" + more + "'");
  ASSERT_EQ(l.code, 0) << l.err;
  nlohmann::json whole = conv;
  whole.push_back({{"role", "user"}, {"content", "And of Italy?"}});
  const std::string msgs = s.write("whole.json", whole.dump());
  const Result g = run("generate --model '" + kSmol + "' --messages '" + msgs + "' --max-new 12 --json");
  ASSERT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(l.out, json_lines(g.out).at(0)["text"].get<std::string>() + "\n") << l.err;
  // A small context: old turns go (the conversation goes on); --no-context-shift refuses.
  std::string turns;
  for (int i = 0; i < 6; ++i) turns += "Tell me about the number " + std::to_string(i) + ".\n";
  const std::string many = s.write("many.txt", turns);
  const Result c = run("chat --model '" + kSmol + "' --temperature 0 --ctx 120 --max-new 16 --system 'Be brief.' < '" + many + "'");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.err.find("messages were dropped)"), std::string::npos) << c.err;
  EXPECT_EQ(c.err.find("\x1b["), std::string::npos) << "no escape codes off a terminal: " << c.err;
  const Result n = run("chat --model '" + kSmol + "' --temperature 0 --ctx 120 --max-new 16 --no-context-shift < '" + many + "'");
  EXPECT_EQ(n.code, 1) << n.err;
  EXPECT_NE(n.err.find("/reset to start over"), std::string::npos) << n.err;
}

// qkv chat on a terminal, driven through tmux as a person types: the arrow keys edit the line
// (libedit), Up recalls the last message, Ctrl-C stops a reply and the chat goes on, Ctrl-D ends,
// and the history is kept in $XDG_STATE_HOME/qkv/chat_history for the next session.
class Tmux {
 public:
  Tmux(const std::string& socket, const std::string& command) : socket_(socket) {
    sh("new-session -d -s chat -x 160 -y 50 " + quote(command));
  }
  ~Tmux() { sh("kill-server"); }
  void keys(const std::string& k) { sh("send-keys -t chat " + k); }
  void type(const std::string& text) { sh("send-keys -t chat -l " + quote(text)); }
  std::string screen() {
    const std::string out = qkv::cli_test::unique_temp("tmux").string();
    sh("capture-pane -p -t chat -S -200 > " + quote(out));
    std::ifstream f(out);
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    fs::remove(out);
    return s;
  }
  // Waits (up to 60 s) until the screen shows `text` `times` times.
  bool wait_for(const std::string& text, int times = 1) {
    for (int i = 0; i < 600; ++i) {
      const std::string s = screen();
      int n = 0;
      for (std::size_t at = s.find(text); at != std::string::npos; at = s.find(text, at + 1)) ++n;
      if (n >= times) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }
  bool alive() { return std::system(("tmux -L " + socket_ + " has-session -t chat 2>/dev/null").c_str()) == 0; }

 private:
  static std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  }
  int sh(const std::string& args) { return std::system(("tmux -L " + socket_ + " " + args + " 2>/dev/null").c_str()); }
  std::string socket_;
};

TEST(CliLlama, ChatOnATerminalEditsRecallsAndKeepsHistory) {
  need_smol();
  ASSERT_EQ(std::system("command -v tmux >/dev/null"), 0) << "tmux is missing: run `make setup`";
  Scratch s;
  const std::string state = (s.dir / "state").string();
  const std::string socket = "qkvtest" + std::to_string(::getpid());
  const std::string cmd = "env XDG_STATE_HOME=" + state + " TERM=xterm '" + std::string(QKV_BIN) + "' chat --model '" +
                          kSmol + "' --temperature 0 --max-new " + std::to_string(qkv::testing::full_or_reduced(300, 300));
  Tmux t(socket, cmd);
  ASSERT_TRUE(t.wait_for("Ctrl-D ends")) << t.screen();
  // A typo mended with the arrow keys: "Frnce" -> "France".
  t.type("What is the capital of Frnce?");
  t.keys("Left Left Left Left");
  t.type("a");
  t.keys("Enter");
  ASSERT_TRUE(t.wait_for("The capital of France is Paris.")) << t.screen();
  ASSERT_TRUE(t.wait_for("tokens/s")) << t.screen();
  // Up recalls it; Ctrl-U clears the line again.
  t.keys("Up");
  ASSERT_TRUE(t.wait_for("> What is the capital of France?", 2)) << t.screen();
  t.keys("C-u");
  t.type("/tokens");
  t.keys("Enter");
  ASSERT_TRUE(t.wait_for("context tokens used by 2 messages")) << t.screen();
  // Ctrl-C stops a long reply; the chat goes on.
  t.type("Write a very long story about a dragon and a knight.");
  t.keys("Enter");
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  t.keys("C-c");
  ASSERT_TRUE(t.wait_for("interrupted]")) << t.screen();
  t.type("/help");
  t.keys("Enter");
  ASSERT_TRUE(t.wait_for("/save FILE")) << t.screen();
  // Ctrl-D ends it; the history file holds the messages.
  t.keys("C-d");
  for (int i = 0; i < 100 && t.alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(t.alive());
  std::ifstream h(state + "/qkv/chat_history");
  const std::string hist((std::istreambuf_iterator<char>(h)), std::istreambuf_iterator<char>());
  EXPECT_NE(hist.find("What"), std::string::npos) << hist;
  EXPECT_NE(hist.find("dragon"), std::string::npos) << hist;
}

TEST(CliLlama, HalfPrecisionCacheGivesTheSameReply) {
  need_smol();
  const std::string chat = " --chat 'What is the capital of France?' --max-new 20 --json";
  const Result f32 = run("generate --model '" + kSmol + "'" + chat);
  const Result f16 = run("generate --model '" + kSmol + "' --kv-cache f16" + chat);
  ASSERT_EQ(f32.code, 0) << f32.err;
  ASSERT_EQ(f16.code, 0) << f16.err;
  EXPECT_EQ(json_lines(f16.out).at(0)["new_ids"], json_lines(f32.out).at(0)["new_ids"]);
  Scratch s;
  const std::string in = s.write("in.txt", "What is the capital of France?\n");
  const Result c = run("chat --model '" + kSmol + "' --temperature 0 --kv-cache f16 --max-new 20 < '" + in + "'");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, json_lines(f16.out).at(0)["text"].get<std::string>() + "\n");
  const std::string bench = "bench generate --model '" + kSmol + "' --prompt-len 8 --new 2 --repeat 1 --bandwidth-mb 64 --json";
  const Result b32 = run(bench), b16 = run(bench + " --kv-cache f16");
  ASSERT_EQ(b32.code, 0) << b32.err;
  ASSERT_EQ(b16.code, 0) << b16.err;
  const auto j32 = json_lines(b32.out).at(0), j16 = json_lines(b16.out).at(0);
  EXPECT_EQ(j32["kv_cache"], "f32");
  EXPECT_EQ(j16["kv_cache"], "f16");
  EXPECT_NEAR(j16["cache_mb"].get<double>() * 2, j32["cache_mb"].get<double>(), 0.01) << b16.out;
}

TEST(CliLlama, ConvertToGgufAndBack) {
  Scratch s;
  const std::string f32 = (s.dir / "tiny.gguf").string(), q8 = (s.dir / "tiny_q8.gguf").string();
  Result r = run("convert --model '" + kTiny + "' --out '" + f32 + "'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("GGUF, llama, weights as stored"), std::string::npos) << r.out;
  const std::string args = " --prompt-ids 1,5,9,2 --max-new 12 --ignore-eos --json";
  const auto folder = json_lines(run("generate --model '" + kTiny + "'" + args).out).at(0)["new_ids"];
  EXPECT_EQ(json_lines(run("generate --model '" + f32 + "'" + args).out).at(0)["new_ids"], folder);
  r = run("convert --model '" + f32 + "' --out '" + q8 + "' --type q8_0");
  ASSERT_EQ(r.code, 0) << r.err;
  const Result g = run("inspect '" + q8 + "'");
  EXPECT_NE(g.out.find("Q8_0"), std::string::npos) << g.out;
  // Existing outputs are refused without --overwrite, and left as they were.
  const auto before = fs::file_size(q8);
  r = run("convert --model '" + kTiny + "' --out '" + q8 + "' --type f16");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--overwrite"), std::string::npos) << r.err;
  EXPECT_EQ(fs::file_size(q8), before);
  r = run("convert --model '" + kTiny + "' --out '" + (s.dir / "x.gguf").string() + "' --type q2_k_s");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--type must be one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k_s, q3_k_m, q3_k_l, "
                       "q4_k_s, q4_k_m, q5_k_s, q5_k_m, q6_k, iq4_nl, iq4_xs, mxfp4_moe, q3_k, q4_k, q5_k "
                       "(llama-quantize's names); got 'q2_k_s'"),
            std::string::npos)
      << r.err;
  // A k-quant mix (the tiny model's rows of 64 fall back to 32-value types) and --pure.
  const std::pair<const char*, int> mixes[] = {{"q4_k_m", 15}, {"q3_k_l", 13}, {"iq4_xs", 30}, {"q5_k_s --pure", 16}};
  for (const auto& [mix, file_type] : mixes) {
    const std::string out = (s.dir / ("tiny_" + std::to_string(file_type) + ".gguf")).string();
    r = run("convert --model '" + f32 + "' --out '" + out + "' --type " + mix);
    ASSERT_EQ(r.code, 0) << mix << ": " << r.err;
    EXPECT_NE(r.out.find("GGUF, llama, "), std::string::npos) << r.out;
    const auto j = nlohmann::json::parse(run("inspect --json '" + out + "'").out);
    EXPECT_EQ(j["metadata"]["general.file_type"]["value"], file_type) << mix;
    EXPECT_EQ(json_lines(run("generate --model '" + out + "'" + args).out).size(), 1u) << mix;
  }
  r = run("convert --model '" + kTiny + "' --out '" + (s.dir / "y.gguf").string() + "' --pure");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--pure needs a --type"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(s.dir / "x.gguf"));
  r = run("convert --model '" + kTiny + "' --out '" + (s.dir / "folder").string() + "'");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("is a Llama folder; qkv convert writes a folder back only for a family it trains (give an --out "
                       "ending in .gguf"),
            std::string::npos)
      << r.err;
}

TEST(CliLlama, BadInputsAreOneClearLine) {
  need_smol();
  Scratch s;
  const std::string M = "generate --model '" + kSmol + "' ";
  auto expect = [](const Result& r, int code, const std::string& needle) {
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  };
  expect(run(M + "--system 'be brief' hi"), 1, "--system needs --chat");
  expect(run(M + "--chat --prompt-ids 1,2"), 1, "--chat renders text; it cannot take --prompt-ids");
  expect(run(M + "--activations int4 hi"), 1, "--activations must be f32 or q8, got 'int4'");
  expect(run(M + "--logprobs 21 hi"), 2, "--logprobs");
  expect(run(M + "--kv-cache int8 hi"), 1, "--kv-cache must be f32 or f16, got 'int8'");
  expect(run(M + "--kv-cache f16 --no-cache hi"), 1, "--kv-cache f16 sets the KV cache's type; it cannot go with --no-cache");
  expect(run(M + "--messages '" + s.write("bad.json", R"([{"role": "user"}])") + "'"), 1, "has no \"content\"");
  expect(run(M + "--chat hi --chat-template '" + s.write("t.jinja", "{% for m in messages %}{{ m.content }") + "'"), 1,
         "t.jinja");
  expect(run(M + "hi --max-new 9000"), 1, "more than the model's");
  expect(run("tokenize --model '" + kSmol + "' --chat hi --messages '" + s.write("m.json", "[]") + "'"), 1,
         "give --chat or --messages, not both");
  expect(run("chat --model '" + kTiny + "' < /dev/null"), 1, "has no tokenizer");
}

TEST(CliLlama, BenchGenerateReadsAGgufFile) {
  need_smol();
  const Result r = run("bench generate --model '" + kSmol + "' --prompt-len 8 --new 4 --repeat 1 --bandwidth-mb 64 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = json_lines(r.out).at(0);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
  EXPECT_GT(j["prefill_tokens_per_s"].get<double>(), 0);
}

}  // namespace
