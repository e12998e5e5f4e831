// Prometheus metrics (see metrics.h).
#include "qkv/serve/metrics.h"

#include <cstdio>

namespace qkv::serve {
namespace {

const std::vector<double> kLatencyBuckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
const std::vector<double> kTokenBuckets = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

Histogram& get(std::map<std::string, Histogram>& m, const std::string& key, const std::vector<double>& bounds) {
  auto it = m.find(key);
  if (it == m.end()) it = m.emplace(key, Histogram(bounds)).first;
  return it->second;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

std::string prometheus_escape(const std::string& v) {
  std::string o;
  for (const char c : v) {
    if (c == '\\') o += "\\\\";
    else if (c == '"') o += "\\\"";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  std::uint64_t cum = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + sep + "le=\"" + le + "\"} " + std::to_string(cum) + "\n";
  }
  const std::string l = labels.empty() ? "" : "{" + labels + "}";
  out += name + "_sum" + l + " " + num(sum_) + "\n";
  out += name + "_count" + l + " " + std::to_string(n_) + "\n";
}

void Metrics::count_request(const std::string& endpoint, int status, double seconds) {
  std::lock_guard lk(mu_);
  ++requests_[{endpoint, status}];
  get(duration_, endpoint, kLatencyBuckets).observe(seconds);
}

void Metrics::add_tokens(const std::string& model, std::int64_t prompt, std::int64_t completion) {
  std::lock_guard lk(mu_);
  auto& t = tokens_[model];
  t.first += static_cast<std::uint64_t>(prompt);
  t.second += static_cast<std::uint64_t>(completion);
}

void Metrics::observe_ttft(const std::string& model, double seconds) {
  std::lock_guard lk(mu_);
  get(ttft_, model, kLatencyBuckets).observe(seconds);
}

void Metrics::observe_inter_token(const std::string& model, double seconds) {
  std::lock_guard lk(mu_);
  get(itl_, model, kTokenBuckets).observe(seconds);
}

std::string Metrics::render(const std::vector<ModelGauges>& gauges) const {
  std::lock_guard lk(mu_);
  std::string o;
  header(o, "qkv_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [k, n] : requests_)
    o += "qkv_requests_total{endpoint=\"" + prometheus_escape(k.first) + "\",status=\"" + std::to_string(k.second) +
         "\"} " + std::to_string(n) + "\n";
  header(o, "qkv_request_duration_seconds", "histogram", "Time from a request's arrival to the end of its response.");
  for (const auto& [e, h] : duration_) h.render(o, "qkv_request_duration_seconds", "endpoint=\"" + prometheus_escape(e) + "\"");
  header(o, "qkv_prompt_tokens_total", "counter", "Prompt tokens of the requests served.");
  for (const auto& [m, t] : tokens_)
    o += "qkv_prompt_tokens_total{model=\"" + prometheus_escape(m) + "\"} " + std::to_string(t.first) + "\n";
  header(o, "qkv_completion_tokens_total", "counter", "Tokens generated.");
  for (const auto& [m, t] : tokens_)
    o += "qkv_completion_tokens_total{model=\"" + prometheus_escape(m) + "\"} " + std::to_string(t.second) + "\n";
  header(o, "qkv_queue_depth", "gauge", "Requests waiting for a slot.");
  for (const auto& g : gauges) o += "qkv_queue_depth{model=\"" + prometheus_escape(g.model) + "\"} " + std::to_string(g.queued) + "\n";
  header(o, "qkv_slots_busy", "gauge", "KV-cache slots holding a sequence.");
  for (const auto& g : gauges) o += "qkv_slots_busy{model=\"" + prometheus_escape(g.model) + "\"} " + std::to_string(g.busy) + "\n";
  header(o, "qkv_slots", "gauge", "KV-cache slots (--parallel).");
  for (const auto& g : gauges) o += "qkv_slots{model=\"" + prometheus_escape(g.model) + "\"} " + std::to_string(g.slots) + "\n";
  header(o, "qkv_time_to_first_token_seconds", "histogram", "Time from a generation request's arrival to its first token.");
  for (const auto& [m, h] : ttft_) h.render(o, "qkv_time_to_first_token_seconds", "model=\"" + prometheus_escape(m) + "\"");
  header(o, "qkv_inter_token_latency_seconds", "histogram", "Time between consecutive tokens of a response.");
  for (const auto& [m, h] : itl_) h.render(o, "qkv_inter_token_latency_seconds", "model=\"" + prometheus_escape(m) + "\"");
  return o;
}

}  // namespace qkv::serve
