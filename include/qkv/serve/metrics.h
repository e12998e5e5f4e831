// The server's Prometheus metrics (text exposition format 0.0.4), served at GET /metrics:
//   qkv_requests_total{endpoint, status}             counter
//   qkv_prompt_tokens_total{model}                    counter
//   qkv_completion_tokens_total{model}                counter
//   qkv_queue_depth{model}, qkv_slots_busy{model}, qkv_slots{model}   gauges (read at scrape time)
//   qkv_time_to_first_token_seconds{model}            histogram
//   qkv_inter_token_latency_seconds{model}            histogram
//   qkv_request_duration_seconds{endpoint}            histogram
// Label values come from a fixed set (the routes, "other") or from the loaded model ids, so a
// client cannot grow the label space.
//
// Thread safety: every method may be called from any threads at once.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace qkv::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  // The _bucket, _sum and _count lines of `name` with `labels` ("k=\"v\"" pairs, may be empty).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bound, not cumulative; the last is +Inf
  double sum_ = 0;
  std::uint64_t n_ = 0;
};

struct ModelGauges {
  std::string model;
  std::int64_t slots = 0, busy = 0, queued = 0;
};

class Metrics {
 public:
  void count_request(const std::string& endpoint, int status, double seconds);
  void add_tokens(const std::string& model, std::int64_t prompt, std::int64_t completion);
  void observe_ttft(const std::string& model, double seconds);
  void observe_inter_token(const std::string& model, double seconds);
  std::string render(const std::vector<ModelGauges>& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::map<std::string, Histogram> duration_;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> tokens_;  // model -> prompt, completion
  std::map<std::string, Histogram> ttft_, itl_;
};

// A Prometheus label value with \, " and newline escaped.
std::string prometheus_escape(const std::string& v);

}  // namespace qkv::serve
