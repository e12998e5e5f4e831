// GPT-2 files: Hugging Face config.json and model.safetensors (Conv1D [in, out]
// weights, fused c_attn) read into and written from qkv's modules ([out, in] Linear
// weights, separate w_q / w_k / w_v). See the name table in gpt2.h.
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/storage.h"
#include "qkv/io/files.h"
#include "qkv/io/tensors.h"
#include "qkv/models/gpt2.h"
#include "qkv/ops/ops.h"
#include "hf_json.h"

namespace qkv::models {
namespace {

using i64 = std::int64_t;
using json = nlohmann::json;
using hf::bad;
using hf::get_bool;
using hf::get_double;
using hf::get_int;
using hf::get_token_id;

// The parameter p now views t (the file's mapped bytes, or their float32 conversion): no copy.
// A file in float64 is converted into the parameter's float32 storage instead.
void take(const Tensor& p, const Tensor& t) {
  if (t.dtype() == p.dtype()) p.set_data_(t);
  else p.copy_(t);
}

// One tensor of the Hugging Face file: its expected shape and where its values go.
struct Slot {
  Shape shape;
  std::function<void(const Tensor&)> load;  // receives the file tensor (float32)
};

// Hugging Face name (without "transformer.") -> slot, for every tensor the model needs.
std::map<std::string, Slot> hf_slots(GPT2LMHeadModel& m) {
  const GPT2Config& c = m.config();
  const i64 C = c.n_embd, F = c.d_ff();
  std::map<std::string, Slot> s;
  auto direct = [](const Tensor& p) { return [p](const Tensor& t) { take(p, t); }; };
  // Conv1D [in, out] into a Linear weight [out, in]: a transposed view (ops::linear reads it in place).
  auto conv = [](const Tensor& p) { return [p](const Tensor& t) { take(p, t.transpose(0, 1)); }; };
  s["wte.weight"] = {{c.vocab_size, C}, direct(m.wte->weight)};
  s["wpe.weight"] = {{c.n_positions, C}, direct(m.wpe->weight)};
  for (i64 i = 0; i < c.n_layer; ++i) {
    const nn::TransformerEncoderBlock& b = *m.h[static_cast<std::size_t>(i)];
    const nn::MultiHeadAttention& a = *b.self_attn;
    const std::string p = "h." + std::to_string(i) + ".";
    s[p + "ln_1.weight"] = {{C}, direct(b.norm1->weight)};
    s[p + "ln_1.bias"] = {{C}, direct(b.norm1->bias)};
    s[p + "attn.c_attn.weight"] = {{C, 3 * C}, [&a, C](const Tensor& t) {
                                     take(a.w_q->weight, t.narrow(1, 0, C).transpose(0, 1));
                                     take(a.w_k->weight, t.narrow(1, C, C).transpose(0, 1));
                                     take(a.w_v->weight, t.narrow(1, 2 * C, C).transpose(0, 1));
                                   }};
    s[p + "attn.c_attn.bias"] = {{3 * C}, [&a, C](const Tensor& t) {
                                   take(a.w_q->bias, t.narrow(0, 0, C));
                                   take(a.w_k->bias, t.narrow(0, C, C));
                                   take(a.w_v->bias, t.narrow(0, 2 * C, C));
                                 }};
    s[p + "attn.c_proj.weight"] = {{C, C}, conv(a.w_o->weight)};
    s[p + "attn.c_proj.bias"] = {{C}, direct(a.w_o->bias)};
    s[p + "ln_2.weight"] = {{C}, direct(b.norm2->weight)};
    s[p + "ln_2.bias"] = {{C}, direct(b.norm2->bias)};
    s[p + "mlp.c_fc.weight"] = {{C, F}, conv(b.ffn->linear1->weight)};
    s[p + "mlp.c_fc.bias"] = {{F}, direct(b.ffn->linear1->bias)};
    s[p + "mlp.c_proj.weight"] = {{F, C}, conv(b.ffn->linear2->weight)};
    s[p + "mlp.c_proj.bias"] = {{C}, direct(b.ffn->linear2->bias)};
  }
  s["ln_f.weight"] = {{C}, direct(m.ln_f->weight)};
  s["ln_f.bias"] = {{C}, direct(m.ln_f->bias)};
  if (m.lm_head) s["lm_head.weight"] = {{c.vocab_size, C}, direct(m.lm_head->weight)};
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string list(const std::vector<std::string>& v) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < 12; ++i) out += (i ? ", " : "") + v[i];
  if (v.size() > 12) out += ", ... (" + std::to_string(v.size() - 12) + " more)";
  return out;
}

}  // namespace

GPT2Config gpt2_config_from_json(const std::string& text, const std::string& src) {
  const json j = hf::parse_object(text, src);
  if (auto it = j.find("model_type"); it != j.end() && !(it->is_string() && it->get<std::string>() == "gpt2"))
    bad(src, "model_type " + it->dump() + " is not supported (only \"gpt2\")");
  GPT2Config c;
  c.vocab_size = get_int(j, "vocab_size", src);
  c.n_positions = j.contains("n_positions") ? get_int(j, "n_positions", src) : get_int(j, "n_ctx", src);
  c.n_embd = get_int(j, "n_embd", src);
  c.n_layer = get_int(j, "n_layer", src);
  c.n_head = get_int(j, "n_head", src);
  c.n_inner = j.contains("n_inner") && !j["n_inner"].is_null() ? get_int(j, "n_inner", src) : 0;
  // Widths are multiplied (3 * n_embd for c_attn, 4 * n_embd for the default n_inner): bounded
  // so those products cannot overflow; no real model is within orders of magnitude of 2^24.
  for (auto [key, v] : {std::pair{"n_embd", c.n_embd}, {"n_inner", c.n_inner}})
    if (v > kGpt2MaxWidth)
      bad(src, std::string("field '") + key + "' is " + std::to_string(v) + ", more than qkv supports (" +
                   std::to_string(kGpt2MaxWidth) + ")");
  if (c.n_embd % c.n_head)
    bad(src, "n_embd " + std::to_string(c.n_embd) + " is not divisible by n_head " + std::to_string(c.n_head));
  c.layer_norm_epsilon = get_double(j, "layer_norm_epsilon", src, 1e-5);
  if (!(c.layer_norm_epsilon > 0)) bad(src, "field 'layer_norm_epsilon' must be > 0");
  if (auto it = j.find("activation_function"); it != j.end()) {
    if (!it->is_string()) bad(src, "field 'activation_function' must be a string, got " + it->dump());
    c.activation_function = it->get<std::string>();
    if (c.activation_function != "gelu_new" && c.activation_function != "gelu_pytorch_tanh" &&
        c.activation_function != "gelu_fast" && c.activation_function != "gelu")
      bad(src, "activation_function \"" + c.activation_function +
                   "\" is not supported (gelu_new, gelu_pytorch_tanh, gelu_fast, gelu)");
  }
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", src, true);
  if (!get_bool(j, "scale_attn_weights", src, true)) bad(src, "scale_attn_weights false is not supported");
  if (get_bool(j, "scale_attn_by_inverse_layer_idx", src, false))
    bad(src, "scale_attn_by_inverse_layer_idx true is not supported");
  if (get_bool(j, "add_cross_attention", src, false)) bad(src, "add_cross_attention true is not supported");
  c.dropout = get_double(j, "resid_pdrop", src, 0.0);
  c.bos_token_id = get_token_id(j, "bos_token_id", src);
  c.eos_token_id = get_token_id(j, "eos_token_id", src);
  return c;
}

std::string gpt2_config_to_json(const GPT2Config& c) {
  nlohmann::ordered_json j;
  j["activation_function"] = c.activation_function;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["attn_pdrop"] = c.dropout;
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  j["embd_pdrop"] = c.dropout;
  j["eos_token_id"] = c.eos_token_id ? json(*c.eos_token_id) : json(nullptr);
  j["initializer_range"] = 0.02;
  j["layer_norm_epsilon"] = c.layer_norm_epsilon;
  j["model_type"] = "gpt2";
  j["n_ctx"] = c.n_positions;
  j["n_embd"] = c.n_embd;
  j["n_head"] = c.n_head;
  j["n_inner"] = c.n_inner > 0 ? json(c.n_inner) : json(nullptr);
  j["n_layer"] = c.n_layer;
  j["n_positions"] = c.n_positions;
  j["reorder_and_upcast_attn"] = false;
  j["resid_pdrop"] = c.dropout;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["scale_attn_weights"] = true;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = "float32";
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

namespace {

void load_weights_from(GPT2LMHeadModel& model, const io::SafetensorsFile& f, const std::string& path) {
  std::map<std::string, Slot> slots = hf_slots(model);
  std::vector<std::string> missing, unexpected, wrong;
  std::map<std::string, const io::StTensorInfo*> found;
  for (const io::StTensorInfo& t : f.tensors()) {
    std::string name = t.name;
    if (name.rfind("transformer.", 0) == 0) name = name.substr(12);
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;  // old causal-mask buffers
    auto it = slots.find(name);
    if (it == slots.end()) {
      if (name == "lm_head.weight" && !model.lm_head) continue;  // a tied head saved anyway: it is wte
      unexpected.push_back(t.name);
      continue;
    }
    if (found.count(name)) {
      unexpected.push_back(t.name + " (a second copy of " + name + ")");
      continue;
    }
    if (t.shape != it->second.shape)
      wrong.push_back(t.name + " is " + shape_str(t.shape) + ", the config needs " + shape_str(it->second.shape));
    else if (t.dtype != io::StDType::F32 && t.dtype != io::StDType::F16 && t.dtype != io::StDType::BF16 &&
             t.dtype != io::StDType::F64)
      wrong.push_back(t.name + " has dtype " + io::st_dtype_name(t.dtype) + " (need a float dtype)");
    found[name] = &t;
  }
  for (const auto& [name, slot] : slots)
    if (!found.count(name)) missing.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !wrong.empty()) {
    std::string msg = path + ": does not match the GPT-2 config:";
    if (!missing.empty()) msg += " missing " + std::to_string(missing.size()) + " tensors: " + list(missing) + ";";
    if (!unexpected.empty())
      msg += " unexpected " + std::to_string(unexpected.size()) + " tensors: " + list(unexpected) + ";";
    if (!wrong.empty()) msg += " wrong shape or dtype: " + list(wrong) + ";";
    msg.pop_back();
    throw FormatError(msg);
  }
  autograd::NoGradGuard no_grad;
  // Parameters view the mapped file where its tensors are float32 (the pages are read when first
  // used, nothing is copied), else their converted copies.
  for (const auto& [name, info] : found) slots[name].load(io::view_tensor(f, *info));
}

// A count that may be astronomically large (from a hostile config): an integer or like 1.2e+18.
std::string general_count(double v) {
  if (v < 1e15) return std::to_string(static_cast<std::int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// The model is built (and its memory taken) before its tensors are matched against the file, so
// a config far larger than the file's tensors is refused first: a small folder must not make qkv
// allocate gigabytes. A smaller disagreement is left to the detailed list of load_weights_from.
void check_config_fits_file(const GPT2Config& c, const io::SafetensorsFile& f, const std::string& cfg_path,
                            const std::string& st_path) {
  double have = 0;
  for (const io::StTensorInfo& t : f.tensors()) have += static_cast<double>(t.numel());
  const double C = static_cast<double>(c.n_embd), F = static_cast<double>(c.d_ff());
  const double need = (static_cast<double>(c.vocab_size) + static_cast<double>(c.n_positions)) * C +
                      static_cast<double>(c.n_layer) * (4 * C * C + 2 * C * F);
  if (need > 2 * have + (1 << 20))
    throw FormatError(cfg_path + " describes a model of at least " + general_count(need) + " parameters, far more than the " +
                      general_count(have) + " values of " + st_path);
}

}  // namespace

void load_gpt2_weights(GPT2LMHeadModel& model, const std::string& path) {
  load_weights_from(model, io::SafetensorsFile::open(path), path);
}

std::shared_ptr<GPT2LMHeadModel> load_gpt2(const std::string& dir) {
  const std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
  const std::string st_path = (std::filesystem::path(dir) / "model.safetensors").string();
  const GPT2Config cfg = gpt2_config_from_json(io::read_file(cfg_path, "load_gpt2"), cfg_path);
  if (!std::filesystem::exists(st_path)) throw IOError("load_gpt2: '" + st_path + "' does not exist");
  check_gpt2_config(cfg);  // an unaffordable config is refused before its file is read
  const io::SafetensorsFile f = io::SafetensorsFile::open(st_path);
  check_config_fits_file(cfg, f, cfg_path, st_path);
  auto model = [&] {
    nn::SkipInitGuard skip;  // every parameter is loaded next: no random initialisation
    return std::make_shared<GPT2LMHeadModel>(cfg);
  }();
  load_weights_from(*model, f, st_path);
  model->eval();
  return model;
}

void save_gpt2(const GPT2LMHeadModel& m, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IOError("save_gpt2: cannot create '" + dir + "': " + ec.message());
  autograd::NoGradGuard no_grad;
  const GPT2Config& c = m.config();
  std::vector<std::pair<std::string, Tensor>> t;
  auto conv = [](const Tensor& w) { return w.transpose(0, 1); };  // Linear [out, in] -> Conv1D [in, out]
  t.emplace_back("transformer.wte.weight", m.wte->weight);
  t.emplace_back("transformer.wpe.weight", m.wpe->weight);
  for (i64 i = 0; i < c.n_layer; ++i) {
    const nn::TransformerEncoderBlock& b = *m.h[static_cast<std::size_t>(i)];
    const nn::MultiHeadAttention& a = *b.self_attn;
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    t.emplace_back(p + "ln_1.weight", b.norm1->weight);
    t.emplace_back(p + "ln_1.bias", b.norm1->bias);
    t.emplace_back(p + "attn.c_attn.weight", concat({conv(a.w_q->weight), conv(a.w_k->weight), conv(a.w_v->weight)}, 1));
    t.emplace_back(p + "attn.c_attn.bias", concat({a.w_q->bias, a.w_k->bias, a.w_v->bias}, 0));
    t.emplace_back(p + "attn.c_proj.weight", conv(a.w_o->weight));
    t.emplace_back(p + "attn.c_proj.bias", a.w_o->bias);
    t.emplace_back(p + "ln_2.weight", b.norm2->weight);
    t.emplace_back(p + "ln_2.bias", b.norm2->bias);
    t.emplace_back(p + "mlp.c_fc.weight", conv(b.ffn->linear1->weight));
    t.emplace_back(p + "mlp.c_fc.bias", b.ffn->linear1->bias);
    t.emplace_back(p + "mlp.c_proj.weight", conv(b.ffn->linear2->weight));
    t.emplace_back(p + "mlp.c_proj.bias", b.ffn->linear2->bias);
  }
  t.emplace_back("transformer.ln_f.weight", m.ln_f->weight);
  t.emplace_back("transformer.ln_f.bias", m.ln_f->bias);
  if (m.lm_head) t.emplace_back("lm_head.weight", m.lm_head->weight);
  for (auto& [name, x] : t) x = x.to(DType::F32);
  io::save_safetensors((std::filesystem::path(dir) / "model.safetensors").string(), t, {{"format", "pt"}});
  io::write_file_atomic((std::filesystem::path(dir) / "config.json").string(), gpt2_config_to_json(c), "save_gpt2");
}

}  // namespace qkv::models
