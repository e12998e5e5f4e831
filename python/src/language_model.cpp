// qkv.LLM's compiled part: a causal language model loaded once by infer::load_language_model
// (the loader of the CLI: GPT-2 and Llama-family folders, GGUF files; the model's tokenizer,
// chat template and end-of-sequence tokens), generation through infer::generate with the GIL
// released (taken back per token for the callback and Python's signal check: Ctrl-C unwinds the
// call with KeyboardInterrupt), and a text's token log-probabilities and perplexity through
// infer::score_tokens.
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
#include "qkv/infer/language_model.h"
#include "qkv/infer/reply.h"
#include "qkv/infer/score.h"
#include "qkv/infer/speculative.h"
#include "qkv/infer/text_stream.h"
#include "qkv/models/registry.h"
#include "qkv/tokenize/chat_template.h"

namespace qkv::python {
namespace {

struct PyLanguageModel {
  infer::LanguageModel lm;
  // Speculative decoding for every generate() call (qkv.LLM(draft=...)); set once, at construction.
  infer::DraftOptions draft;

  // The conversation (OpenAI-style messages as JSON) through the model's chat template, with the
  // package's own hint when there is no template (the library's names the CLI flag).
  std::vector<tokenize::ChatMessage> messages(const std::string& json) const {
    if (!lm.chat_template)
      throw ValueError((lm.chat_template_error.empty() ? "'" + lm.path + "' has no chat template"
                                                       : lm.chat_template_error) +
                       ": pass chat_template= (a Jinja template) to qkv.LLM");
    return tokenize::parse_chat_messages_json(json, "messages");
  }
  // chat_template_kwargs as JSON ("" for none).
  static std::map<std::string, std::string> kwargs(const std::string& json) {
    if (json.empty()) return {};
    return tokenize::parse_chat_template_kwargs(json, "chat_template_kwargs");
  }
};

// One generated sequence as Python receives it: (new ids, stop reason, logprobs as
// [(id, logprob, [(id, logprob), ...])]).
using LogprobRow = std::tuple<std::int64_t, double, std::vector<std::pair<std::int64_t, double>>>;
using PyResult = std::tuple<std::vector<std::int64_t>, std::string, std::vector<LogprobRow>>;
// Speculative decoding's counts over a call: (drafted, accepted, target passes, tokens per pass).
using PySpeculative = std::tuple<std::int64_t, std::int64_t, std::int64_t, double>;

}  // namespace

void register_language_model(nb::module_& m) {
  // The registry's families, for qkv.supported_models(): (name, display, role, model_types, gguf architectures).
  m.def("_model_families", [] {
    std::vector<std::tuple<std::string, std::string, std::string, std::vector<std::string>, std::vector<std::string>>> v;
    for (const models::ModelFamily* f : models::model_families())
      v.emplace_back(f->name, f->display, f->role == models::ModelRole::CausalLM ? "causal-lm" : "encoder",
                     f->model_types, f->gguf_names);
    return v;
  });
  nb::class_<PyLanguageModel>(m, "_LanguageModel")
      .def("__init__",
           [](PyLanguageModel* self, const std::string& path, std::optional<std::string> chat_template,
              const std::string& activations, const std::string& kv_cache) {
             infer::LanguageModelOptions o;
             o.kv_cache = infer::parse_kv_type(kv_cache, "qkv.LLM: kv_cache");
             if (activations != "f32" && activations != "q8")
               throw ValueError("qkv.LLM: activations must be 'f32' or 'q8', got '" + activations + "'");
             o.activations = activations == "q8" ? kernels::QActivations::Q8 : kernels::QActivations::F32;
             if (chat_template) {
               if (chat_template->empty()) throw ValueError("qkv.LLM: chat_template is empty (give a Jinja template)");
               o.chat_template_text = *chat_template;
             }
             std::optional<infer::LanguageModel> lm;
             {
               nb::gil_scoped_release release;
               lm = infer::load_language_model(path, o);
             }
             new (self) PyLanguageModel{std::move(*lm)};
           },
           nb::arg("path"), nb::arg("chat_template").none(), nb::arg("activations"), nb::arg("kv_cache"))
      .def_prop_ro("vocab_size", [](const PyLanguageModel& p) { return p.lm.model->vocab_size(); })
      .def_prop_ro("max_positions", [](const PyLanguageModel& p) { return p.lm.model->max_positions(); })
      .def_prop_ro("architecture", [](const PyLanguageModel& p) { return p.lm.architecture; })
      .def_prop_ro("eos_ids", [](const PyLanguageModel& p) { return p.lm.eos_ids; })
      .def_prop_ro("bos_id", [](const PyLanguageModel& p) { return p.lm.bos_id; })
      .def_prop_ro("has_tokenizer", [](const PyLanguageModel& p) { return p.lm.tokenizer != nullptr; })
      .def_prop_ro("drafts", [](const PyLanguageModel& p) { return p.draft.on(); })
      // Speculative decoding for every later generate(): a draft model (another _LanguageModel,
      // its tokenizer checked token by token against this one's when both have one) or prompt
      // lookup over n-grams of up to `ngram` tokens (draft None); at most `max` tokens per draft.
      // The library's checks (speculative.h: ranges, vocabulary sizes) run here, before any work.
      .def("set_draft",
           [](PyLanguageModel& p, const PyLanguageModel* draft, std::int64_t ngram, std::int64_t max) {
             infer::DraftOptions d{.max = max};
             if (draft) {
               if (p.lm.tokenizer && draft->lm.tokenizer)
                 infer::check_same_vocabulary(*p.lm.tokenizer, p.lm.path, *draft->lm.tokenizer, draft->lm.path);
               d.model = draft->lm.model;
             } else {
               if (ngram < 1 || ngram > infer::kMaxDraftNgram)
                 throw ValueError("qkv.LLM: draft_ngram must be in [1, " + std::to_string(infer::kMaxDraftNgram) +
                                  "], got " + std::to_string(ngram));
               d.ngram = ngram;
             }
             infer::check_draft(*p.lm.model, d, 1);
             p.draft = d;
           },
           nb::arg("draft").none(), nb::arg("ngram"), nb::arg("max"))
      .def("tokenize",
           [](const PyLanguageModel& p, const std::string& text, bool add_bos) {
             return add_bos ? p.lm.encode_prompt(text) : p.lm.tok().encode(text);
           },
           nb::arg("text"), nb::arg("add_bos"))
      .def("detokenize", [](const PyLanguageModel& p, const std::vector<std::int64_t>& ids) { return p.lm.tok().decode(ids); },
           nb::arg("ids"))
      .def("render_chat",
           [](const PyLanguageModel& p, const std::string& messages_json, bool add_generation_prompt,
              const std::string& kwargs_json) {
             return p.lm.render_chat(p.messages(messages_json), add_generation_prompt, PyLanguageModel::kwargs(kwargs_json));
           },
           nb::arg("messages_json"), nb::arg("add_generation_prompt"), nb::arg("kwargs_json"))
      .def("chat_prompt",
           [](const PyLanguageModel& p, const std::string& messages_json, bool add_generation_prompt,
              const std::string& kwargs_json) {
             return p.lm.chat_prompt(p.messages(messages_json), add_generation_prompt, PyLanguageModel::kwargs(kwargs_json));
           },
           nb::arg("messages_json"), nb::arg("add_generation_prompt"), nb::arg("kwargs_json"))
      // prompts (token ids) -> (results, tokens/s over all sequences, speculative counts). on_token(seq, token) -> bool
      // (False stops that sequence), called in generation order with the GIL held. Every eos id
      // of the model ends a sequence (GenerationOptions eos_id and stop_ids) unless ignore_eos.
      .def("generate",
           [](const PyLanguageModel& p, const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t max_new_tokens,
              double temperature, std::int64_t top_k, double top_p, std::uint64_t seed, std::int64_t logprobs,
              bool ignore_eos, nb::object on_token, double min_p, double repeat_penalty, std::int64_t repeat_last_n,
              double frequency_penalty, double presence_penalty,
              const std::vector<std::pair<std::int64_t, double>>& logit_bias) {
             infer::GenerationOptions o{.max_new_tokens = max_new_tokens,
                                        .sampling = {.temperature = temperature,
                                                     .top_k = top_k,
                                                     .top_p = top_p,
                                                     .seed = seed,
                                                     .min_p = min_p,
                                                     .logit_bias = logit_bias,
                                                     .repeat_penalty = repeat_penalty,
                                                     .repeat_last_n = repeat_last_n,
                                                     .frequency_penalty = frequency_penalty,
                                                     .presence_penalty = presence_penalty},
                                        .eos_id = ignore_eos ? std::nullopt : p.lm.eos_id(),
                                        .logprobs = logprobs};
             if (!ignore_eos && !p.lm.eos_ids.empty()) o.stop_ids.assign(p.lm.eos_ids.begin() + 1, p.lm.eos_ids.end());
             o.draft = p.draft;
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
               infer::check_generation(*p.lm.model, prompts, o);
               results = infer::generate(*p.lm.model, prompts, o, cb, &stats);
             }
             std::vector<PyResult> out;
             for (const infer::GenerationResult& r : results) {
               std::vector<LogprobRow> lps;
               for (const infer::TokenLogprob& t : r.logprobs) lps.emplace_back(t.id, t.logprob, t.top);
               out.emplace_back(r.new_ids, infer::stop_reason_name(r.reason), std::move(lps));
             }
             const double seconds = stats.prefill_seconds + stats.decode_seconds;
             const infer::SpeculativeStats& sp = stats.speculative;
             return std::make_tuple(out, static_cast<double>(stats.new_tokens) / std::max(seconds, 1e-9),
                                    PySpeculative{sp.drafted, sp.accepted, sp.target_passes, sp.tokens_per_pass()});
           },
           nb::arg("prompts"), nb::arg("max_new_tokens"), nb::arg("temperature"), nb::arg("top_k"), nb::arg("top_p"),
           nb::arg("seed"), nb::arg("logprobs"), nb::arg("ignore_eos"), nb::arg("on_token").none(), nb::arg("min_p"),
           nb::arg("repeat_penalty"), nb::arg("repeat_last_n"), nb::arg("frequency_penalty"), nb::arg("presence_penalty"),
           nb::arg("logit_bias"))
      // ids -> (context, stride, windows, positions, [(id, logprob, [(id, logprob), ...])] per scored position, nll_sum,
      // seconds): infer::score_tokens in its sliding windows (context / stride 0: its defaults; top -1: no alternatives),
      // the GIL released; Python's signals are checked after each forward pass (Ctrl-C: KeyboardInterrupt).
      .def("score",
           [](const PyLanguageModel& p, const std::vector<std::int64_t>& ids, std::int64_t context, std::int64_t stride,
              std::int64_t top) {
             const infer::ScoreOptions o{.context = context, .stride = stride, .top = top};
             infer::ScoreResult r;
             {
               nb::gil_scoped_release release;
               infer::check_score(*p.lm.model, ids, o);
               r = infer::score_tokens(*p.lm.model, ids, o, [](std::int64_t, std::int64_t) {
                 nb::gil_scoped_acquire gil;
                 if (PyErr_CheckSignals() != 0) throw nb::python_error();
               });
             }
             std::vector<LogprobRow> rows;
             rows.reserve(r.tokens.size());
             for (const infer::TokenLogprob& t : r.tokens) rows.emplace_back(t.id, t.logprob, t.top);
             return std::make_tuple(r.context, r.stride, r.windows, r.positions, std::move(rows), r.nll_sum, r.seconds);
           },
           nb::arg("ids"), nb::arg("context"), nb::arg("stride"), nb::arg("top"));

  // A sequence's text, whole UTF-8 characters only, ended where a stop string ends: the CLI's
  // infer::ReplyStream (StopMode::Keep); the eos tokens show no text unless ignore_eos. A chat
  // reply of a reasoning model (chat true) is its answer, its reasoning apart (infer/reply.h).
  nb::class_<infer::ReplyStream>(m, "_ReplyStream")
      .def("__init__",
           [](infer::ReplyStream* self, const PyLanguageModel& p, const std::vector<std::string>& stops, bool ignore_eos,
              const std::vector<std::int64_t>& prompt, bool chat) {
             new (self) infer::ReplyStream(
                 p.lm.tokenizer, chat ? infer::reply_format(p.lm.tok()) : infer::ReplyFormat::Plain, prompt,
                 {.stops = stops, .skip = ignore_eos ? std::vector<std::int64_t>{} : p.lm.eos_ids,
                  .mode = infer::StopMode::Keep});
           },
           nb::arg("model"), nb::arg("stops"), nb::arg("ignore_eos"), nb::arg("prompt"), nb::arg("chat"),
           nb::keep_alive<1, 2>())
      .def("push", [](infer::ReplyStream& s, std::int64_t id) { return s.push(id).content; }, nb::arg("id"))
      .def("finish", [](infer::ReplyStream& s) { return s.finish().content; })
      .def_prop_ro("stopped", &infer::ReplyStream::stopped)
      .def_prop_ro("text", &infer::ReplyStream::text)
      .def_prop_ro("reasoning", &infer::ReplyStream::reasoning);
}

}  // namespace qkv::python
