// Saved log-probabilities (see logprob_file.h): a safetensors file streamed row by row, and its
// strict reader.
#include "qkv/infer/logprob_file.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "qkv/core/error.h"
#include "qkv/infer/score.h"

namespace qkv::infer {
namespace {

using i64 = std::int64_t;

void check_plan(const LogprobPlan& p, const std::string& path) {
  const i64 T = static_cast<i64>(p.tokens.size());
  if (T < 2) throw ValueError(fmt::format("{}: a log-probabilities file needs at least 2 tokens, got {}", path, T));
  if (p.positions.empty()) throw ValueError(path + ": a log-probabilities file needs at least one scored position");
  if (p.vocab < 1) throw ValueError(fmt::format("{}: vocabulary size must be >= 1, got {}", path, p.vocab));
  i64 prev = 0;
  for (i64 q : p.positions) {
    if (q <= prev || q >= T)
      throw ValueError(fmt::format("{}: scored positions must ascend within [1, {}), got {} after {}", path, T, q, prev));
    prev = q;
  }
}

std::vector<io::StTensorView> views(const LogprobPlan& p) {
  const i64 T = static_cast<i64>(p.tokens.size()), M = static_cast<i64>(p.positions.size());
  return {{.name = "tokens", .dtype = io::StDType::I64, .shape = {T}},
          {.name = "positions", .dtype = io::StDType::I64, .shape = {M}},
          {.name = "logprobs", .dtype = io::StDType::F32, .shape = {M, p.vocab}}};
}

std::map<std::string, std::string> metadata(const LogprobPlan& p) {
  return {{"format", kLogprobFormat},           {"version", kLogprobVersion},
          {"vocab", std::to_string(p.vocab)},   {"context", std::to_string(p.context)},
          {"stride", std::to_string(p.stride)}, {"model", p.model}};
}

}  // namespace

LogprobWriter::LogprobWriter(const std::string& path, LogprobPlan plan) : plan_(std::move(plan)) {
  check_plan(plan_, path);
  out_ = std::make_unique<io::SafetensorsStreamWriter>(path, views(plan_), metadata(plan_));
  out_->write(plan_.tokens.data(), plan_.tokens.size() * sizeof(i64));
  out_->write(plan_.positions.data(), plan_.positions.size() * sizeof(i64));
  row_.resize(static_cast<std::size_t>(plan_.vocab));
}

LogprobWriter::~LogprobWriter() = default;

void LogprobWriter::add_logits(const float* logits) {
  const double lse = log_sum_exp(logits, plan_.vocab);
  for (i64 v = 0; v < plan_.vocab; ++v)
    row_[static_cast<std::size_t>(v)] = std::isnan(logits[v]) ? -std::numeric_limits<float>::infinity()
                                                              : static_cast<float>(static_cast<double>(logits[v]) - lse);
  add_logprobs(row_.data());
}

void LogprobWriter::add_logprobs(const float* logprobs) {
  if (rows_ >= static_cast<i64>(plan_.positions.size()))
    throw ValueError(fmt::format("log-probabilities file: all {} rows were already written", plan_.positions.size()));
  out_->write(logprobs, static_cast<std::uint64_t>(plan_.vocab) * sizeof(float));
  ++rows_;
}

void LogprobWriter::commit() {
  if (rows_ != static_cast<i64>(plan_.positions.size()))
    throw IOError(fmt::format("log-probabilities file: {} of its {} rows were written; not saved", rows_,
                              plan_.positions.size()));
  out_->commit();
}

ReferenceLogprobs ReferenceLogprobs::open(const std::string& path) {
  ReferenceLogprobs r;
  r.path_ = path;
  auto file = std::make_shared<io::SafetensorsFile>(io::SafetensorsFile::open(path));
  const std::string not_ours = path + ": not a log-probabilities file of qkv perplexity --save-logits";
  const auto& meta = file->metadata();
  auto get = [&](const char* key) -> const std::string& {
    const auto it = meta.find(key);
    if (it == meta.end()) throw FormatError(fmt::format("{} (its metadata has no '{}')", not_ours, key));
    return it->second;
  };
  if (get("format") != kLogprobFormat)
    throw FormatError(fmt::format("{} (its metadata format is '{}', expected '{}')", not_ours, get("format"), kLogprobFormat));
  if (get("version") != kLogprobVersion)
    throw FormatError(fmt::format("{}: log-probabilities file version '{}' (this qkv reads version {})", path,
                                  get("version"), kLogprobVersion));
  auto number = [&](const char* key) {
    const std::string& s = get(key);
    i64 v = 0;
    std::size_t used = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (s.empty() || used != s.size() || v < 0 || s[0] == '+' || s[0] == ' ')
      throw FormatError(fmt::format("{}: metadata '{}' is '{}', expected a non-negative integer", path, key, s));
    return v;
  };
  LogprobPlan& p = r.plan_;
  p.vocab = number("vocab");
  p.context = number("context");
  p.stride = number("stride");
  if (const auto it = meta.find("model"); it != meta.end()) p.model = it->second;
  auto tensor = [&](const char* name, io::StDType dt, std::size_t rank) -> const io::StTensorInfo& {
    const io::StTensorInfo& t = file->at(name);
    if (t.dtype != dt || t.shape.size() != rank)
      throw FormatError(fmt::format("{}: tensor '{}' is {} {}, expected {} of rank {}", path, name, io::st_dtype_name(t.dtype),
                                    shape_str(t.shape), io::st_dtype_name(dt), rank));
    return t;
  };
  const io::StTensorInfo& tok = tensor("tokens", io::StDType::I64, 1);
  const io::StTensorInfo& pos = tensor("positions", io::StDType::I64, 1);
  const io::StTensorInfo& lp = tensor("logprobs", io::StDType::F32, 2);
  const i64 T = tok.shape[0], M = pos.shape[0];
  if (lp.shape[0] != M || lp.shape[1] != p.vocab)
    throw FormatError(fmt::format("{}: logprobs is {}, expected [{}, {}] (positions by the metadata's vocab)", path,
                                  shape_str(lp.shape), M, p.vocab));
  p.tokens.resize(static_cast<std::size_t>(T));
  p.positions.resize(static_cast<std::size_t>(M));
  std::memcpy(p.tokens.data(), file->data(tok), tok.nbytes());
  std::memcpy(p.positions.data(), file->data(pos), pos.nbytes());
  for (i64 t = 0; t < T; ++t)
    if (p.tokens[static_cast<std::size_t>(t)] < 0)
      throw FormatError(fmt::format("{}: token {} has id {} (ids are >= 0)", path, t, p.tokens[static_cast<std::size_t>(t)]));
  try {
    check_plan(p, path);
  } catch (const ValueError& e) {
    throw FormatError(e.what());
  }
  r.rows_ = file->data(lp);
  r.file_ = std::move(file);
  return r;
}

const float* ReferenceLogprobs::row(std::int64_t m) const {
  const std::uint8_t* at = rows_ + static_cast<std::size_t>(m) * static_cast<std::size_t>(plan_.vocab) * sizeof(float);
  if (reinterpret_cast<std::uintptr_t>(at) % alignof(float) == 0) return reinterpret_cast<const float*>(at);
  thread_local std::vector<float> copy;
  copy.resize(static_cast<std::size_t>(plan_.vocab));
  std::memcpy(copy.data(), at, copy.size() * sizeof(float));
  return copy.data();
}

void ReferenceLogprobs::check_matches(const std::vector<std::int64_t>& tokens, std::int64_t vocab, std::int64_t context,
                                      std::int64_t stride, const std::string& what) const {
  const LogprobPlan& p = plan_;
  const std::string f = what + " '" + path_ + "'";
  if (p.vocab != vocab)
    throw ValueError(fmt::format("{} was made with a vocabulary of {} tokens; this model's has {}", f, p.vocab, vocab));
  if (p.tokens.size() != tokens.size())
    throw ValueError(fmt::format("{} holds {} tokens; this text gives {} (it was made from another text or tokenizer)", f,
                                 p.tokens.size(), tokens.size()));
  for (std::size_t t = 0; t < tokens.size(); ++t)
    if (p.tokens[t] != tokens[t])
      throw ValueError(fmt::format("{} was made from other tokens: position {} holds id {} there and {} here", f, t,
                                   p.tokens[t], tokens[t]));
  if (p.context != context || p.stride != stride)
    throw ValueError(fmt::format("{} was made with context {} and stride {}; this run uses context {} and stride {} "
                                 "(the scored positions and their context must be the same)",
                                 f, p.context, p.stride, context, stride));
  if (p.positions != scored_positions(score_windows(static_cast<i64>(tokens.size()), context, stride)))
    throw ValueError(f + "'s scored positions are not those of its context and stride");
}

}  // namespace qkv::infer
