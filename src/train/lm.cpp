// Language-model training: LMTrainOptions, the LM task (batches, validation) and
// LMTrainer (new run, save into a GPT-2 folder, resume). See qkv/train/lm.h.
#include "qkv/train/lm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include <nlohmann/json.hpp>

#include "../io/json_fields.h"
#include "qkv/autograd/autograd.h"
#include "qkv/core/error.h"
#include "qkv/core/rng.h"
#include "qkv/io/checkpoint.h"
#include "qkv/io/files.h"
#include "qkv/io/folder.h"
#include "qkv/ops/ops.h"

namespace qkv::train {
namespace {
using i64 = std::int64_t;
constexpr const char* kModelType = "gpt2-lm-train";
}  // namespace

// ---------------------------------------------------------------- options

std::string LMTrainOptions::to_json() const {
  const nlohmann::ordered_json j = {
      {"steps", steps},         {"batch", batch},
      {"context", context},     {"grad_accum", grad_accum},
      {"lr", lr},               {"warmup", warmup},
      {"min_lr", min_lr},       {"weight_decay", weight_decay},
      {"grad_clip", grad_clip}, {"eval_every", eval_every},
      {"val_fraction", val_fraction}, {"val_windows", val_windows},
      {"seed", seed},           {"skip_nonfinite", skip_nonfinite}};
  return j.dump();
}

LMTrainOptions LMTrainOptions::from_json(const std::string& text) {
  const io::JsonFields f(text, "language-model training config",
                         {"steps", "batch", "context", "grad_accum", "lr", "warmup", "min_lr", "weight_decay",
                          "grad_clip", "eval_every", "val_fraction", "val_windows", "seed", "skip_nonfinite"});
  LMTrainOptions o;
  f.get("steps", &o.steps, 1);
  f.get("batch", &o.batch, 1);
  f.get("context", &o.context, 1);
  f.get("grad_accum", &o.grad_accum, 1);
  f.get("lr", &o.lr);
  f.get("warmup", &o.warmup, 0);
  f.get("min_lr", &o.min_lr);
  f.get("weight_decay", &o.weight_decay);
  f.get("grad_clip", &o.grad_clip);
  f.get("eval_every", &o.eval_every, 0);
  f.get("val_fraction", &o.val_fraction);
  f.get("val_windows", &o.val_windows, 1);
  f.get("seed", &o.seed);
  f.get("skip_nonfinite", &o.skip_nonfinite);
  o.validate();
  return o;
}

void LMTrainOptions::validate() const {
  auto fail = [](const std::string& m) { throw ValueError("train lm: " + m); };
  if (steps < 1) fail("--steps must be >= 1, got " + std::to_string(steps));
  if (batch < 1) fail("--batch must be >= 1, got " + std::to_string(batch));
  if (context < 1) fail("--context must be >= 1, got " + std::to_string(context));
  if (grad_accum < 1) fail("--grad-accum must be >= 1, got " + std::to_string(grad_accum));
  if (!(lr > 0) || !std::isfinite(lr)) fail("--lr must be a finite number > 0");
  if (!(min_lr >= 0) || min_lr > lr) fail("--min-lr must be in [0, --lr]");
  if (warmup < 0) fail("--warmup must be >= 0");
  if (!(weight_decay >= 0) || !std::isfinite(weight_decay)) fail("--weight-decay must be a finite number >= 0");
  if (!std::isfinite(grad_clip)) fail("--grad-clip must be finite");
  if (eval_every < 0) fail("--eval-every must be >= 0");
  if (!(val_fraction > 0 && val_fraction < 1)) fail("--val-fraction must be in (0, 1)");
  if (val_windows < 1) fail("--val-windows must be >= 1");
}

MemoryEstimate lm_training_memory(const models::GPT2Config& c, const LMTrainOptions& o) {
  MemoryEstimate e = models::gpt2_memory(c);
  e.scale(4);  // weights, gradients, AdamW's exp_avg and exp_avg_sq
  const i64 B = o.batch, T = o.context;
  e.add({B, T, c.n_layer, c.n_embd}, 10).add({B, T, c.n_layer, c.d_ff()}, 2);  // per block
  e.add({B, T, c.n_embd}, 8).add({B, T, c.vocab_size}, 3);                      // embeddings, ln_f, logits
  return e;
}

void check_lm_training_memory(const models::GPT2Config& c, const LMTrainOptions& o, std::uint64_t extra_bytes) {
  MemoryEstimate e = lm_training_memory(c, o);
  e.add_bytes(extra_bytes);
  try {
    e.check("train lm (" + std::to_string(c.n_layer) + " layers, d_model " + std::to_string(c.n_embd) + ", vocab " +
            std::to_string(c.vocab_size) + "; batch " + std::to_string(o.batch) + " x context " +
            std::to_string(o.context) + " tokens)");
  } catch (const ResourceError& err) {
    throw ResourceError(std::string(err.what()) +
                        "; lower --batch (--grad-accum keeps the tokens per step), --context or the model's size");
  }
}

LoopOptions lm_loop_options(const LMTrainOptions& o) {
  return {.total_steps = o.steps,
          .grad_accum = o.grad_accum,
          .clip_norm = o.grad_clip,
          .eval_every = o.eval_every,
          .schedule = {.lr = o.lr, .warmup = o.warmup, .min_lr_ratio = o.min_lr / o.lr, .decay = true},
          .on_nonfinite = o.skip_nonfinite ? NonFiniteStep::Skip : NonFiniteStep::Error};
}

// ---------------------------------------------------------------- task

LMTask::LMTask(const models::GPT2LMHeadModel& model, const TokenFile& tokens,
               const std::vector<std::int32_t>& token_bytes, const LMTrainOptions& o)
    : model_(model), tokens_(tokens), token_bytes_(token_bytes), o_(o) {
  const i64 N = tokens.size(), T = o.context;
  if (T > model.config().n_positions)
    throw ValueError("train lm: --context " + std::to_string(T) + " exceeds the model's n_positions " +
                     std::to_string(model.config().n_positions));
  if (static_cast<i64>(tokens.vocab_size()) > model.config().vocab_size)
    throw ValueError("train lm: the token file's vocabulary (" + std::to_string(tokens.vocab_size()) +
                     ") is larger than the model's (" + std::to_string(model.config().vocab_size) + ")");
  const i64 n_val = std::max<i64>(T + 1, static_cast<i64>(std::floor(static_cast<double>(N) * o.val_fraction)));
  n_train_ = N - n_val;
  if (n_train_ < T + 1)
    throw ValueError("train lm: the corpus has " + std::to_string(N) + " tokens; a context of " + std::to_string(T) +
                     " needs at least " + std::to_string(T + 1) + " for training and " + std::to_string(n_val) +
                     " held out (--val-fraction " + std::to_string(o.val_fraction) + ")");
}

std::pair<Tensor, Tensor> LMTask::batch(i64 step, i64 micro) const {
  const i64 B = o_.batch, T = o_.context;
  Tensor ids = Tensor::empty({B, T}, DType::I64), tgt = Tensor::empty({B, T}, DType::I64);
  i64* x = ids.data<i64>();
  i64* y = tgt.data<i64>();
  const auto span = static_cast<std::uint64_t>(n_train_ - T);
  for (i64 b = 0; b < B; ++b) {
    const auto counter = static_cast<std::uint64_t>((step * o_.grad_accum + micro) * B + b);
    const auto start = static_cast<i64>(random_bits(o_.seed, counter) % span);
    for (i64 t = 0; t < T; ++t) {
      x[b * T + t] = tokens_[start + t];
      y[b * T + t] = tokens_[start + t + 1];
    }
  }
  return {ids, tgt};
}

Tensor lm_loss(const models::GPT2LMHeadModel& model, const Tensor& ids, const Tensor& targets) {
  if (ids.dim() != 2 || targets.shape() != ids.shape())
    throw ShapeError("lm_loss: ids " + ids.shape_str() + " and targets " + targets.shape_str() +
                     " must both be [B, T]");
  const i64 BT = ids.shape()[0] * ids.shape()[1];
  const Tensor logits = model.forward(ids);  // [B, T, V]
  return cross_entropy(logits.reshape({BT, model.config().vocab_size}), targets.reshape({BT}));
}

std::unique_ptr<optim::AdamW> make_lm_optimizer(const models::GPT2LMHeadModel& model, const LMTrainOptions& o) {
  const optim::NamedParams params = model.named_parameters();
  auto opt = std::make_unique<optim::AdamW>(
      params, optim::AdamOptions{.lr = o.lr, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = o.weight_decay});
  opt->exclude_from_weight_decay([&](const std::string& name) {
    for (const auto& [n, p] : params)
      if (n == name) return p.dim() < 2;
    return false;
  });
  return opt;
}

Tensor LMTask::loss(i64 step, i64 micro) {
  const auto [ids, tgt] = batch(step, micro);
  return lm_loss(model_, ids, tgt);
}

Metrics LMTask::evaluate(i64) {
  autograd::NoGradGuard no_grad;
  const i64 T = o_.context, V = model_.config().vocab_size;
  const i64 tail = tokens_.size() - n_train_;
  const i64 windows = std::min<i64>(o_.val_windows, (tail - 1) / T);
  double nats = 0, bytes = 0;
  for (i64 w0 = 0; w0 < windows; w0 += o_.batch) {
    const i64 nb = std::min<i64>(o_.batch, windows - w0);
    Tensor ids = Tensor::empty({nb, T}, DType::I64), tgt = Tensor::empty({nb, T}, DType::I64);
    i64* x = ids.data<i64>();
    i64* y = tgt.data<i64>();
    for (i64 b = 0; b < nb; ++b) {
      const i64 start = n_train_ + (w0 + b) * T;
      for (i64 t = 0; t < T; ++t) {
        x[b * T + t] = tokens_[start + t];
        y[b * T + t] = tokens_[start + t + 1];
        bytes += token_bytes_[static_cast<std::size_t>(y[b * T + t])];
      }
    }
    const Tensor logits = model_.forward(ids);
    nats += cross_entropy(logits.reshape({nb * T, V}), tgt.reshape({nb * T}), {.mean = false}).item();
  }
  const double n = static_cast<double>(windows * T);
  return {{"val_loss", nats / n},
          {"val_bpb", bytes > 0 ? nats / std::numbers::ln2 / bytes : 0.0},
          {"val_tokens", n}};
}

// ---------------------------------------------------------------- trainer

LMTrainer::LMTrainer(std::shared_ptr<models::GPT2LMHeadModel> m, const LMTrainOptions& o, const TokenFile& tokens,
                     const tokenize::Tokenizer& bpe)
    : o_(o), model_(std::move(m)), tokens_(tokens) {
  o_.validate();
  if (bpe.vocab_size() != static_cast<i64>(tokens.vocab_size()))
    throw ValueError("train lm: the tokenizer has " + std::to_string(bpe.vocab_size()) +
                     " tokens, the token file was made with " + std::to_string(tokens.vocab_size()));
  token_bytes_.resize(static_cast<std::size_t>(model_->config().vocab_size), 0);
  for (i64 id = 0; id < bpe.vocab_size(); ++id)
    token_bytes_[static_cast<std::size_t>(id)] = static_cast<std::int32_t>(bpe.token_text(id).size());
  task_ = std::make_unique<LMTask>(*model_, tokens_, token_bytes_, o_);
  opt_ = make_lm_optimizer(*model_, o_);
  loop_ = std::make_unique<Loop>(*model_, *opt_, *task_, lm_loop_options(o_));
}

LMTrainer::LMTrainer(const models::GPT2Config& cfg, const LMTrainOptions& o, const TokenFile& tokens,
                     const tokenize::Tokenizer& bpe)
    : LMTrainer(
          [&] {
            o.validate();
            check_lm_training_memory(cfg, o);
            auto m = std::make_shared<models::GPT2LMHeadModel>(cfg);
            models::init_gpt2_weights(*m, o.seed);
            return m;
          }(),
          o, tokens, bpe) {}

std::unique_ptr<LMTrainer> LMTrainer::resume(const std::string& dir, const TokenFile& tokens,
                                             const tokenize::Tokenizer& bpe) {
  const std::string path = dir + "/" + kStateFile;
  const io::Checkpoint c = io::load_checkpoint(path);
  std::unique_ptr<LMTrainer> t = resume_from(c, path, tokens, bpe);
  t->restore_folder(dir, c);
  return t;
}

void LMTrainer::restore_folder(const std::string& dir, const io::Checkpoint& state) const {
  // The state file is the commit record of a save: model.safetensors and config.json
  // are written before it, so a save killed between them leaves model files one save
  // ahead of the state. The state names the digest of the files it belongs to; if they
  // differ, the state's own weights are written back over them.
  const auto want = state.metadata.find("folder_digest");
  if (want != state.metadata.end() && folder_digest(dir) != want->second) models::save_gpt2(*model_, dir);
}

std::unique_ptr<LMTrainer> LMTrainer::resume_from(const io::Checkpoint& c, const std::string& path,
                                                  const TokenFile& tokens, const tokenize::Tokenizer& bpe) {
  const StateReader r(c, path);
  if (c.model_type != kModelType)
    throw r.bad("holds a '" + c.model_type + "' run, not a language-model training run ('" + kModelType + "')");
  models::GPT2Config cfg;
  LMTrainOptions o;
  try {
    cfg = models::gpt2_config_from_json(c.config_json, path + " (config)");
    o = LMTrainOptions::from_json(r.meta("train_config"));
  } catch (const ValueError& e) {
    throw r.bad(e.what());
  }
  const std::uint64_t key = r.meta_u64("tokens_key");
  if (key != tokens.key())
    throw r.bad("the run was trained on another corpus or tokenizer (tokens_key " + std::to_string(key) +
                ", these texts give " + std::to_string(tokens.key()) + "); pass the same --text files");
  // A config that does not match the tensors would allocate a model the file cannot fill.
  std::int64_t have = 0;
  for (const auto& [n, t] : c.model) have += t.numel();
  const double need = static_cast<double>(cfg.vocab_size + cfg.n_positions) * static_cast<double>(cfg.n_embd) +
                      static_cast<double>(cfg.n_layer) * 12.0 * static_cast<double>(cfg.n_embd) * static_cast<double>(cfg.n_embd);
  if (need > static_cast<double>(have) * 1.01 + 1e6)
    throw r.bad("its config describes a model far larger than the tensors it holds");
  check_lm_training_memory(cfg, o);
  auto m = [&] {
    nn::SkipInitGuard skip;  // every parameter is loaded next: no random initialisation
    return std::make_shared<models::GPT2LMHeadModel>(cfg);
  }();
  try {
    m->load_state_dict(c.model);
  } catch (const Error& e) {
    throw r.bad(e.what());
  }
  std::unique_ptr<LMTrainer> t(new LMTrainer(std::move(m), o, tokens, bpe));
  t->loop_->load_state(r);
  return t;
}

std::string LMTrainer::folder_digest(const std::string& dir) {
  std::uint64_t h = 0;
  for (const char* f : {"model.safetensors", "config.json"}) {
    std::string bytes;
    try {
      bytes = io::read_file(dir + "/" + f, "train lm");
    } catch (const IOError&) {
      return "missing " + std::string(f);
    }
    h = io::digest64(bytes.data(), bytes.size(), h);
  }
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

void LMTrainer::save(const std::string& dir, bool keep_other_files) const {
  io::SaveCheckpointArgs a;
  a.model = model_.get();
  a.model_type = kModelType;
  a.config_json = models::gpt2_config_to_json(model_->config());
  loop_->save_state(a);
  a.metadata.emplace("train_config", o_.to_json());
  a.metadata.emplace("tokens_key", std::to_string(tokens_.key()));
  io::StagedFolder f(dir, "train lm", keep_other_files);
  models::save_gpt2(*model_, f.path());
  for (const auto& [name, bytes] : folder_files_) io::write_file_atomic(f.file(name), bytes, "train lm");
  a.metadata.emplace("folder_digest", folder_digest(f.path()));  // the files this state belongs to
  io::save_checkpoint(f.file(kStateFile), a);
  f.commit();  // DIR becomes this save, all of it at once
}

}  // namespace qkv::train
