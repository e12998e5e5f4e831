// qkv.LLM's compiled part: a causal language model loaded once, generation through
// infer::generate with the GIL released (taken back per token for the callback and Python's
// signal check: Ctrl-C unwinds the call with KeyboardInterrupt), tokenizer, chat template.
//
// TODO(lead): load through infer::load_language_model (include/qkv/infer/language_model.h, the
// one loader of the CLI, the server and Python) once it is on main: then GGUF files and the
// Llama family load here too, with the model's own chat template and stop tokens. Until then
// this loads GPT-2 folders (config.json, model.safetensors, optional vocab.json + merges.txt).
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "qkv/core/error.h"
#include "qkv/infer/generate.h"
#include "qkv/models/gpt2.h"
#include "qkv/tokenize/bpe.h"
#include "qkv/tokenize/chat_template.h"

namespace qkv::python {
namespace {

struct PyLanguageModel {
  std::string path;
  std::shared_ptr<const models::GPT2LMHeadModel> model;
  std::optional<tokenize::ByteLevelBPE> tokenizer;
  std::optional<tokenize::ChatTemplate> chat_template;
  std::optional<std::int64_t> eos_id;

  const tokenize::ByteLevelBPE& tok() const {
    if (!tokenizer) throw ValueError("'" + path + "' has no tokenizer (vocab.json, merges.txt): pass token ids");
    return *tokenizer;
  }
};

// One generated sequence as Python receives it: (new ids, stop reason, logprobs as
// [(id, logprob, [(id, logprob), ...])]).
using LogprobRow = std::tuple<std::int64_t, double, std::vector<std::pair<std::int64_t, double>>>;
using PyResult = std::tuple<std::vector<std::int64_t>, std::string, std::vector<LogprobRow>>;

}  // namespace

void register_language_model(nb::module_& m) {
  nb::class_<PyLanguageModel>(m, "_LanguageModel")
      .def("__init__",
           [](PyLanguageModel* self, const std::string& path, std::optional<std::string> chat_template) {
             PyLanguageModel lm{.path = path};
             {
               nb::gil_scoped_release release;
               lm.model = models::load_gpt2(path);
               namespace fs = std::filesystem;
               if (fs::exists(fs::path(path) / "vocab.json") && fs::exists(fs::path(path) / "merges.txt"))
                 lm.tokenizer = tokenize::ByteLevelBPE::from_folder(path);
               if (chat_template) lm.chat_template = tokenize::ChatTemplate::parse(*chat_template);
               lm.eos_id = lm.tokenizer && lm.tokenizer->eos_id() ? lm.tokenizer->eos_id()
                                                                   : lm.model->config().eos_token_id;
             }
             new (self) PyLanguageModel(std::move(lm));
           },
           nb::arg("path"), nb::arg("chat_template").none())
      .def_prop_ro("vocab_size", [](const PyLanguageModel& p) { return p.model->vocab_size(); })
      .def_prop_ro("max_positions", [](const PyLanguageModel& p) { return p.model->max_positions(); })
      .def_prop_ro("eos_id", [](const PyLanguageModel& p) { return p.eos_id; })
      .def_prop_ro("has_tokenizer", [](const PyLanguageModel& p) { return p.tokenizer.has_value(); })
      .def("tokenize", [](const PyLanguageModel& p, const std::string& text) { return p.tok().encode(text); },
           nb::arg("text"))
      .def("detokenize", [](const PyLanguageModel& p, const std::vector<std::int64_t>& ids) { return p.tok().decode(ids); },
           nb::arg("ids"))
      .def("token_bytes", [](const PyLanguageModel& p, std::int64_t id) { return nb::bytes(p.tok().token_bytes(id).data(), p.tok().token_bytes(id).size()); },
           nb::arg("id"))
      .def("render_chat",
           [](const PyLanguageModel& p, const std::vector<std::pair<std::string, std::string>>& messages,
              bool add_generation_prompt) {
             if (!p.chat_template)
               throw ValueError("'" + p.path + "' has no chat template: pass chat_template= (a Jinja template) to qkv.LLM");
             std::vector<tokenize::ChatMessage> msgs;
             for (const auto& [role, content] : messages) msgs.push_back({.role = role, .content = content});
             tokenize::ChatTemplateOptions o{.add_generation_prompt = add_generation_prompt};
             if (p.eos_id && p.tokenizer) o.eos_token = p.tokenizer->token_bytes(*p.eos_id);
             return p.chat_template->render(msgs, o);
           },
           nb::arg("messages"), nb::arg("add_generation_prompt"))
      // prompts (token ids) -> (results, tokens/s over all sequences). on_token(seq, token) -> bool
      // (False stops that sequence), called in generation order with the GIL held.
      .def("generate",
           [](const PyLanguageModel& p, const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t max_new_tokens,
              double temperature, std::int64_t top_k, double top_p, std::uint64_t seed, std::int64_t logprobs,
              nb::object on_token) {
             infer::GenerationOptions o{.max_new_tokens = max_new_tokens,
                                        .sampling = {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed},
                                        .eos_id = p.eos_id,
                                        .logprobs = logprobs};
             infer::TokenCallback cb = [&on_token](std::int64_t seq, std::int64_t token) {
               nb::gil_scoped_acquire gil;
               if (PyErr_CheckSignals() != 0) throw nb::python_error();
               if (on_token.is_none()) return true;
               return nb::cast<bool>(on_token(seq, token));
             };
             std::vector<infer::GenerationResult> results;
             infer::GenerationStats stats;
             {
               nb::gil_scoped_release release;
               infer::check_generation(*p.model, prompts, o);
               results = infer::generate(*p.model, prompts, o, cb, &stats);
             }
             std::vector<PyResult> out;
             for (const infer::GenerationResult& r : results) {
               std::vector<LogprobRow> lps;
               for (const infer::TokenLogprob& t : r.logprobs) lps.emplace_back(t.id, t.logprob, t.top);
               out.emplace_back(r.new_ids, infer::stop_reason_name(r.reason), std::move(lps));
             }
             const double seconds = stats.prefill_seconds + stats.decode_seconds;
             return std::make_pair(out, static_cast<double>(stats.new_tokens) / std::max(seconds, 1e-9));
           },
           nb::arg("prompts"), nb::arg("max_new_tokens"), nb::arg("temperature"), nb::arg("top_k"), nb::arg("top_p"),
           nb::arg("seed"), nb::arg("logprobs"), nb::arg("on_token").none());

  // Text of a token stream, whole UTF-8 characters only (tokenize::StreamDecoder).
  nb::class_<tokenize::StreamDecoder>(m, "_StreamDecoder")
      .def("__init__",
           [](tokenize::StreamDecoder* self, const PyLanguageModel& p) { new (self) tokenize::StreamDecoder(p.tok()); },
           nb::arg("model"))
      .def("push", &tokenize::StreamDecoder::push, nb::arg("id"))
      .def("finish", &tokenize::StreamDecoder::finish);
}

}  // namespace qkv::python
