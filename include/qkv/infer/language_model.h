// A language model as every front end uses it (the CLI's generate / chat / tokenize / bench,
// the HTTP server, the Python package): the network, its tokenizer, its chat template and its
// special tokens, loaded from any causal LM qkv reads (models/registry.h) — a Hugging Face
// folder or a GGUF file.
//
//   auto lm = infer::load_language_model("models/SmolLM2-135M-Instruct.Q4_1.gguf");
//   const auto ids = lm.chat_prompt({{"user", "Hi!"}});          // through the chat template
//   auto out = infer::generate(*lm.model, {ids}, {.max_new_tokens = 64, .eos_id = lm.eos_id()});
//   std::cout << lm.tokenizer->decode(out[0].new_ids);
//
// Thread safety: read-only once loaded; any number of threads may use one at once.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "qkv/infer/causal_lm.h"
#include "qkv/infer/sampling.h"
#include "qkv/kernels/qgemm.h"
#include "qkv/tokenize/tokenizer.h"
#include "qkv/tokenize/chat_template.h"

namespace qkv::infer {

struct LanguageModelOptions {
  // A Jinja chat template file that replaces the model's own (tokenizer.chat_template of a GGUF,
  // chat_template in tokenizer_config.json or chat_template.jinja of a folder).
  std::string chat_template_file;
  // The same given as the template's text (the Python package's chat_template=); wins over
  // chat_template_file when both are set.
  std::string chat_template_text;
  // How activations meet quantized weights in the Llama family (kernels/qgemm.h): F32, exact
  // (the default), or Q8 (activations quantized per 32 values, integer products; faster, less exact).
  kernels::QActivations activations = kernels::QActivations::F32;
  // The KV caches' element type (infer/kv_cache.h): float32 (the default) or float16 (half the
  // cache's memory and of the bytes a decode step reads at depth; keys and values rounded once).
  KVType kv_cache = KVType::F32;
};

struct LanguageModel {
  std::string path;
  std::string name;          // the file or folder name: the model's id in listings and the API
  std::string architecture;  // the registry's family (models/registry.h): "llama", "qwen3", "gpt2", ...
  std::shared_ptr<const CausalLM> model;
  std::shared_ptr<const tokenize::Tokenizer> tokenizer;  // null for a folder without one
  std::shared_ptr<const tokenize::ChatTemplate> chat_template;  // null when the model has none
  // Why the model's own template could not be used (a construct outside qkv's Jinja subset, say):
  // the model still loads and runs plain prompts; render_chat throws this message.
  std::string chat_template_error;
  std::vector<std::int64_t> eos_ids;  // tokens that end a reply (the config's and the tokenizer's)
  std::optional<std::int64_t> bos_id;
  bool add_bos = false;                 // a plain prompt starts with bos_id
  // How to sample when the user says nothing (qkv chat, qkv serve): the model's own advice
  // (generation_config.json of a folder: do_sample, temperature, top_k, top_p, min_p,
  // repetition_penalty; a GGUF's general.sampling.* keys) over llama.cpp's defaults (temperature
  // 0.8, top-k 40, top-p 0.95, min-p 0.05); default_sampling_source says which.
  SamplingOptions default_sampling;
  std::string default_sampling_source;
  std::int64_t weight_bytes = 0;        // bytes of weights the products read per generated token
  bool q8_activations = false;          // LanguageModelOptions::activations applies (quantized products)

  // The first stop token, if any (what GenerationOptions::eos_id takes).
  std::optional<std::int64_t> eos_id() const;
  // The tokenizer; ValueError naming the model when it has none ("... has no tokenizer").
  const tokenize::Tokenizer& tok() const;
  // A plain (completion) prompt: BOS first when the model wants one, then encode(text).
  std::vector<std::int64_t> encode_prompt(const std::string& text) const;
  // A conversation rendered by the chat template, as transformers' apply_chat_template renders
  // it (bos_token / eos_token set from the tokenizer). ValueError when the model has no template
  // ("pass --chat-template FILE"); ChatTemplateError from the template.
  // `vars`: more variables for the template (name -> JSON text: tokenize::parse_chat_template_kwargs),
  // such as {"enable_thinking", "false"}.
  std::string render_chat(const std::vector<tokenize::ChatMessage>& messages, bool add_generation_prompt = true,
                          const std::map<std::string, std::string>& vars = {}) const;
  // Its token ids: special tokens in the rendered text are matched as tokens, no BOS added
  // unless the template writes it (transformers' apply_chat_template(tokenize=True)).
  std::vector<std::int64_t> chat_prompt(const std::vector<tokenize::ChatMessage>& messages,
                                        bool add_generation_prompt = true,
                                        const std::map<std::string, std::string>& vars = {}) const;
  // chat_prompt of the conversation made to fit a context of `context` positions with `room` of
  // them left for the reply: the oldest turns after a leading system (or developer) message are
  // dropped from `messages` (a user message and what answered it, together) until it fits
  // (context shifting, as llama-cli's conversation mode does). Returns the ids; *dropped gets
  // how many messages went. ValueError when the last message alone (with the system message)
  // does not fit; `messages` is then left with that message alone after the system message.
  std::vector<std::int64_t> chat_prompt_within(std::vector<tokenize::ChatMessage>& messages, std::int64_t context,
                                               std::int64_t room, std::size_t* dropped = nullptr,
                                               const std::map<std::string, std::string>& vars = {}) const;
  // True if id ends a reply.
  bool is_eos(std::int64_t id) const;
};

// Loads the model at `path`. IOError when it does not exist; FormatError naming the file and the
// problem for an unsupported or damaged model, with the kind found named for a folder of another
// kind ("... is a BERT folder; generation needs a causal language model: a GGUF file (gemma2,
// ...) or a folder of model_type ...", the lists from the registry). Nothing is initialised at random; weights are mapped, not copied, where they can be.
LanguageModel load_language_model(const std::string& path, const LanguageModelOptions& options = {});

// llama.cpp's sampling defaults (common_params_sampling): temperature 0.8, top-k 40, top-p 0.95,
// min-p 0.05, no penalties.
SamplingOptions llama_cpp_default_sampling();

// A folder's chat template text: tokenizer_config.json's chat_template (a string, or the "default"
// entry of a list of named templates), else chat_template.jinja; nullopt when it has none.
// FormatError naming the file for a malformed tokenizer_config.json.
struct ChatTemplateSource {
  std::string text;
  std::string name;  // the file (and key) it came from, for messages
};
std::optional<ChatTemplateSource> folder_chat_template_source(const std::string& dir);


// What a model folder or file declares itself, from its config.json model_type or GGUF
// architecture ("" when it cannot tell); models/registry.h says what qkv reads it as.
std::string model_kind(const std::string& path);

}  // namespace qkv::infer
