// Sentence embeddings (see embed.h).
#include "qkv/infer/embed.h"

#include "qkv/tokenize/utf8.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"

namespace qkv::infer {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw FormatError(path + ": not valid JSON: " + e.what());
  }
}

bool flag(const nlohmann::json& j, const std::string& path, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return false;
  if (!j.at(key).is_boolean()) throw FormatError(path + ": '" + key + "' must be true or false, got " + j.at(key).dump());
  return j.at(key).get<bool>();
}

}  // namespace

PoolingConfig read_pooling_config(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string modules_path = (fs::path(dir) / "modules.json").string();
  PoolingConfig pc;
  if (!fs::exists(modules_path)) {
    pc.normalize = false;
    return pc;
  }
  const nlohmann::json mods = read_json(modules_path);
  if (!mods.is_array()) throw FormatError(modules_path + ": expected a JSON array of modules");
  pc.normalize = false;
  bool have_pooling = false;
  for (const auto& m : mods) {
    if (!m.is_object() || !m.contains("type") || !m.at("type").is_string())
      throw FormatError(modules_path + ": every module needs a string 'type', got " + m.dump());
    const std::string type = m.at("type").get<std::string>();
    const std::string path = m.contains("path") && m.at("path").is_string() ? m.at("path").get<std::string>() : "";
    if (type == "sentence_transformers.models.Transformer") continue;
    if (type == "sentence_transformers.models.Normalize") {
      pc.normalize = true;
      continue;
    }
    if (type != "sentence_transformers.models.Pooling")
      throw ValueError(modules_path + ": unsupported module type '" + type + "'");
    const std::string cfg_path = (fs::path(dir) / path / "config.json").string();
    std::error_code ec;  // a path the file system refuses (too long, a loop) is an error, not an exception
    const bool exists = fs::exists(cfg_path, ec);
    if (ec)
      throw IOError("sentence embedder: cannot read " + cfg_path + " (named by " + modules_path + "): " + ec.message());
    if (!exists) throw IOError("sentence embedder: " + cfg_path + " is missing (named by " + modules_path + ")");
    const nlohmann::json p = read_json(cfg_path);
    if (!p.is_object()) throw FormatError(cfg_path + ": expected a JSON object");
    for (const char* unsupported : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens",
                                    "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"})
      if (flag(p, cfg_path, unsupported)) throw ValueError(cfg_path + ": unsupported pooling mode '" + unsupported + "'");
    const bool mean = flag(p, cfg_path, "pooling_mode_mean_tokens"), cls = flag(p, cfg_path, "pooling_mode_cls_token");
    if (mean == cls)
      throw ValueError(cfg_path + ": exactly one of pooling_mode_mean_tokens and pooling_mode_cls_token must be true");
    pc.mode = mean ? Pooling::Mean : Pooling::Cls;
    if (p.contains("word_embedding_dimension")) {
      if (!p.at("word_embedding_dimension").is_number_integer())
        throw FormatError(cfg_path + ": 'word_embedding_dimension' must be an integer");
      pc.dimension = p.at("word_embedding_dimension").get<std::int64_t>();
    }
    have_pooling = true;
  }
  if (!have_pooling) throw ValueError(modules_path + ": no sentence_transformers.models.Pooling module");
  return pc;
}

namespace {

// One sentence's embedding from its token rows hidden [n, C] (contiguous; the real tokens only):
// the mean over the rows in double (0 for no rows: sum / max(count, 1e-9)) or the first row.
void pool_rows(const float* hidden, std::int64_t n, std::int64_t C, Pooling mode, float* out, double* acc) {
  if (mode == Pooling::Cls) {
    for (std::int64_t c = 0; c < C; ++c) out[c] = n > 0 ? hidden[c] : 0.f;
    return;
  }
  std::fill(acc, acc + C, 0.0);
  for (std::int64_t t = 0; t < n; ++t)
    for (std::int64_t c = 0; c < C; ++c) acc[c] += hidden[t * C + c];
  const double denom = std::max(static_cast<double>(n), 1e-9);
  for (std::int64_t c = 0; c < C; ++c) out[c] = static_cast<float>(acc[c] / denom);
}

// x / max(||x||_2, 1e-12) in place, the norm in double.
void l2_normalize_row(float* p, std::int64_t C) {
  double ss = 0;
  for (std::int64_t c = 0; c < C; ++c) ss += static_cast<double>(p[c]) * p[c];
  const double inv = 1.0 / std::max(std::sqrt(ss), 1e-12);
  for (std::int64_t c = 0; c < C; ++c) p[c] = static_cast<float>(p[c] * inv);
}

}  // namespace

Tensor pool(const Tensor& hidden, const Tensor& attention_mask, Pooling mode) {
  if (hidden.dim() != 3 || attention_mask.dim() != 2 || attention_mask.size(0) != hidden.size(0) ||
      attention_mask.size(1) != hidden.size(1))
    throw ShapeError("pool: hidden must be [B, T, C] and attention_mask [B, T], got " + hidden.shape_str() + " and " +
                     attention_mask.shape_str());
  const Tensor h = hidden.to(DType::F32).contiguous();
  const Tensor m = attention_mask.to(DType::I64).contiguous();
  const std::int64_t B = h.size(0), T = h.size(1), C = h.size(2);
  Tensor out = Tensor::zeros({B, C});
  const float* hp = h.data<float>();
  const std::int64_t* mp = m.data<std::int64_t>();
  std::vector<double> acc(static_cast<std::size_t>(C));
  std::vector<float> rows;
  for (std::int64_t b = 0; b < B; ++b) {
    if (mode == Pooling::Cls) {  // the first token, masked or not (sentence-transformers' CLS pooling)
      std::copy(hp + b * T * C, hp + b * T * C + (T > 0 ? C : 0), out.data<float>() + b * C);
      continue;
    }
    rows.clear();  // the real tokens' rows, in order
    for (std::int64_t t = 0; t < T; ++t)
      if (mp[b * T + t] != 0) rows.insert(rows.end(), hp + (b * T + t) * C, hp + (b * T + t + 1) * C);
    pool_rows(rows.data(), static_cast<std::int64_t>(rows.size()) / std::max<std::int64_t>(C, 1), C, mode,
              out.data<float>() + b * C, acc.data());
  }
  return out;
}

Tensor l2_normalize(const Tensor& x) {
  if (x.dim() != 2) throw ShapeError("l2_normalize: x must be [N, C], got " + x.shape_str());
  Tensor out = x.to(DType::F32).contiguous().clone();
  const std::int64_t N = out.size(0), C = out.size(1);
  for (std::int64_t n = 0; n < N; ++n) l2_normalize_row(out.data<float>() + n * C, C);
  return out;
}

SentenceEmbedder::SentenceEmbedder(std::shared_ptr<const tokenize::Tokenizer> tok,
                                   std::shared_ptr<const models::BertModel> model, const PoolingConfig& pooling)
    : tok_(std::move(tok)), model_(std::move(model)), pooling_(pooling) {
  if (!tok_ || !model_) throw ValueError("SentenceEmbedder: tokenizer and model must be non-null");
  runner_ = std::make_shared<const BertRunner>(model_);
  const auto& c = model_->config();
  if (tok_->vocab_size() != c.vocab_size)
    throw ValueError("SentenceEmbedder: the vocabulary has " + std::to_string(tok_->vocab_size()) +
                     " tokens but config.json's vocab_size is " + std::to_string(c.vocab_size));
  if (pooling_.dimension != 0 && pooling_.dimension != c.hidden_size)
    throw ValueError("SentenceEmbedder: the pooling's word_embedding_dimension " + std::to_string(pooling_.dimension) +
                     " differs from config.json's hidden_size " + std::to_string(c.hidden_size));
  if (tok_->max_length().value_or(c.max_position_embeddings) > c.max_position_embeddings)
    throw ValueError("SentenceEmbedder: the tokenizer's max length " + std::to_string(*tok_->max_length()) +
                     " exceeds max_position_embeddings " + std::to_string(c.max_position_embeddings));
}

SentenceEmbedder SentenceEmbedder::from_folder(const std::string& dir) {
  if (!std::filesystem::is_directory(dir)) throw IOError("sentence embedder: model folder " + dir + " does not exist");
  auto tok = tokenize::load_tokenizer(dir);
  const PoolingConfig pc = read_pooling_config(dir);
  std::shared_ptr<const models::BertModel> model = models::BertModel::from_folder(dir);
  return SentenceEmbedder(std::move(tok), std::move(model), pc);
}

Tensor SentenceEmbedder::embed(const std::vector<std::string>& texts, const EmbedOptions& o) const {
  std::vector<std::vector<std::int64_t>> rows;
  rows.reserve(texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    try {
      rows.push_back(tok_->encode_with_specials(texts[i]));
    } catch (const ValueError& e) {
      throw ValueError("text " + std::to_string(i) + ": " + e.what());
    }
  }
  return embed_ids(rows, o);
}

Tensor SentenceEmbedder::embed_ids(const std::vector<std::vector<std::int64_t>>& rows, const EmbedOptions& o) const {
  if (o.batch_size < 1) throw ValueError("embed: batch_size must be >= 1, got " + std::to_string(o.batch_size));
  const auto N = static_cast<std::int64_t>(rows.size());
  const std::int64_t C = dimension();
  Tensor out = Tensor::zeros({N, C});
  // Longest first (stable, so equal lengths keep input order), as sentence-transformers batches.
  // The runner computes no padding, so a sentence's embedding is bitwise the same in any batch.
  std::vector<std::size_t> order(rows.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rows[a].size() > rows[b].size(); });
  BertRunner::Workspace ws;  // sized by the first (longest) batch, reused by the others
  std::vector<double> acc(static_cast<std::size_t>(C));
  float* op = out.data<float>();
  std::vector<const std::vector<std::int64_t>*> batch;
  for (std::int64_t start = 0; start < N; start += o.batch_size) {
    const std::int64_t n = std::min(o.batch_size, N - start);
    batch.clear();
    for (std::int64_t i = 0; i < n; ++i) batch.push_back(&rows[order[static_cast<std::size_t>(start + i)]]);
    const float* hidden = runner_->forward(batch, ws);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto len = static_cast<std::int64_t>(batch[static_cast<std::size_t>(i)]->size());
      float* dst = op + static_cast<std::int64_t>(order[static_cast<std::size_t>(start + i)]) * C;
      pool_rows(hidden, len, C, pooling_.mode, dst, acc.data());
      if (pooling_.normalize) l2_normalize_row(dst, C);
      hidden += len * C;
    }
    if (o.progress) o.progress(start + n, N);
  }
  return out;
}

std::vector<std::string> read_text_lines(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw IOError("cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) throw FormatError(path + ": the file is empty (no lines)");
  std::vector<std::string> lines;
  std::vector<char32_t> scratch;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (const auto bad = tokenize::utf8::find_invalid(line))
      throw FormatError(path + ":" + std::to_string(lines.size() + 1) + ": not valid UTF-8 (byte " +
                        std::to_string(bad->offset + 1) + " of the line)");
    lines.push_back(std::move(line));
    pos = end + 1;
  }
  return lines;
}

Tensor cosine_similarity_matrix(const Tensor& a, const Tensor& b) {
  if (a.dim() != 2 || b.dim() != 2 || a.size(1) != b.size(1))
    throw ShapeError("cosine_similarity_matrix: a [N, C] and b [M, C] needed, got " + a.shape_str() + " and " + b.shape_str());
  const Tensor x = a.to(DType::F64).contiguous(), y = b.to(DType::F64).contiguous();
  const std::int64_t N = x.size(0), M = y.size(0), C = x.size(1);
  Tensor out = Tensor::zeros({N, M}, DType::F64);
  const double *xp = x.data<double>(), *yp = y.data<double>();
  double* op = out.data<double>();
  auto norm = [&](const double* r) {
    double s = 0;
    for (std::int64_t c = 0; c < C; ++c) s += r[c] * r[c];
    return std::max(std::sqrt(s), 1e-12);
  };
  for (std::int64_t i = 0; i < N; ++i)
    for (std::int64_t j = 0; j < M; ++j) {
      double d = 0;
      for (std::int64_t c = 0; c < C; ++c) d += xp[i * C + c] * yp[j * C + c];
      op[i * M + j] = d / (norm(xp + i * C) * norm(yp + j * C));
    }
  return out;
}

}  // namespace qkv::infer
