// qkv worked-example: the second tutorial's d_k = 2 example, computed with
// the library (matmul, scaled_dot_product_attention with need_weights) in
// float64, printed beside the numbers the tutorial prints.
#include "cmd_worked_example.h"

#include <cmath>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.h"
#include "format.h"
#include "qkv/qkv.h"

namespace qkv::tool {
namespace {

using Matrix = std::vector<std::vector<double>>;

// The tutorial's inputs (section 3.3 of the second tutorial).
const Matrix kQ = {{0.1, 0.2}, {0.5, 0.6}, {0.9, 1.0}};
const Matrix kK = {{0.3, 0.4}, {0.7, 0.8}, {1.1, 1.2}};
// What the tutorial prints. It rounds intermediates to 3 decimals (and
// sqrt(2) to 1.414), so some last digits differ from the exact values.
const Matrix kTutorialScores = {{0.11, 0.23, 0.35}, {0.39, 0.83, 1.27}, {0.67, 1.43, 2.19}};
const Matrix kTutorialScaled = {{0.078, 0.163, 0.248}, {0.276, 0.587, 0.898}, {0.474, 1.011, 1.549}};
const Matrix kTutorialWeights = {{0.305, 0.333, 0.362}, {0.237, 0.323, 0.440}, {0.177, 0.303, 0.520}};

Tensor to_tensor(const Matrix& m) {
  std::vector<double> flat;
  for (const auto& r : m) flat.insert(flat.end(), r.begin(), r.end());
  return Tensor::from_vector(flat, {static_cast<std::int64_t>(m.size()), static_cast<std::int64_t>(m[0].size())});
}

Matrix to_matrix(const Tensor& t) {
  const std::int64_t rows = t.size(0), cols = t.size(1);
  std::vector<double> v = t.to_vector<double>();
  Matrix m(rows, std::vector<double>(cols));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < cols; ++j) m[i][j] = v[i * cols + j];
  return m;
}

std::string row_str(const std::vector<double>& r, int precision) {
  std::string s;
  for (std::size_t j = 0; j < r.size(); ++j) {
    if (j) s += "  ";
    s += fixed(r[j], precision);
  }
  return s;
}

// Tutorial row with a '*' after every entry whose 3-decimal text differs from ours.
std::string tutorial_row_str(const std::vector<double>& tut, const std::vector<double>& ours, int* differences) {
  std::string s;
  for (std::size_t j = 0; j < tut.size(); ++j) {
    const bool differs = fixed(tut[j], 3) != fixed(ours[j], 3);
    if (differs) ++*differences;
    if (j) s += ' ';
    s += fixed(tut[j], 3);
    s += differs ? '*' : ' ';
  }
  return s;
}

void print_matrix_pair(std::ostream& out, const std::string& title, const Matrix& ours, const Matrix& tut,
                       int* differences) {
  out << title << '\n';
  Table t({"", "qkv (exact, rounded once)", "tutorial (as printed)"});
  t.align(1, Table::Align::Left).align(2, Table::Align::Left);
  for (std::size_t i = 0; i < ours.size(); ++i)
    t.add_row({"row " + std::to_string(i), row_str(ours[i], 3), tutorial_row_str(tut[i], ours[i], differences)});
  t.print(out);
  out << '\n';
}

}  // namespace

int run_worked_example(const WorkedExampleOptions& opt, std::ostream& out) {
  const Tensor q = to_tensor(kQ), k = to_tensor(kK);
  const double d_k = static_cast<double>(q.size(1));
  const double scale = 1.0 / std::sqrt(d_k);

  // Step by step with the library's ops.
  const Tensor scores = matmul(q, k.transpose(0, 1));      // [3,2] @ [2,3] -> [3,3]
  const Tensor scaled = mul(scores, scale);                // / sqrt(d_k)
  // The attention op itself, asked for its weights; V = I so output == weights.
  const Tensor v = Tensor::from_vector(std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3});
  const AttentionOutput att = scaled_dot_product_attention(q, k, v, Mask(), SdpaOptions{.need_weights = true});
  const double check = max_abs_diff(att.weights, softmax(scaled, -1));

  const Matrix m_scores = to_matrix(scores), m_scaled = to_matrix(scaled), m_weights = to_matrix(att.weights);

  if (opt.json) {
    nlohmann::json j = {
        {"d_k", static_cast<int>(d_k)},
        {"scale", scale},
        {"q", kQ},
        {"k", kK},
        {"scores", m_scores},
        {"scaled_scores", m_scaled},
        {"weights", m_weights},
        {"max_abs_diff_sdpa_vs_softmax", check},
        {"tutorial", {{"scores", kTutorialScores}, {"scaled_scores", kTutorialScaled}, {"weights", kTutorialWeights}}},
    };
    out << j.dump() << '\n';
    return 0;
  }

  out << "Worked example from the second tutorial: d_k = 2, three queries and three keys.\n"
      << "Computed with qkv in float64: matmul for Q K^T, then scaled_dot_product_attention(Q, K, V = I,\n"
      << "need_weights) for the softmax weights.\n\n";
  Table in({"", "Q", "K"});
  in.align(1, Table::Align::Left).align(2, Table::Align::Left);
  for (std::size_t i = 0; i < kQ.size(); ++i)
    in.add_row({"row " + std::to_string(i), row_str(kQ[i], 1), row_str(kK[i], 1)});
  in.print(out);
  out << '\n';

  int differences = 0;
  print_matrix_pair(out, "1) Scores  S = Q K^T   (3, 2) @ (2, 3) -> (3, 3)", m_scores, kTutorialScores, &differences);
  print_matrix_pair(out, "2) Scaled scores  S / sqrt(d_k) = S * " + fixed(scale, 4) + "   (3, 3)", m_scaled,
                    kTutorialScaled, &differences);
  print_matrix_pair(out, "3) Attention weights  softmax over each row   (3, 3)", m_weights, kTutorialWeights,
                    &differences);

  if (differences > 0)
    out << "* The tutorial rounds intermediates to 3 decimals (sqrt(2) as 1.414, then the scores and exponentials),\n"
        << "  so it prints 0.248, 0.440 and 0.520 where the exact values round to 0.247, 0.441 and 0.519.\n";
  out << "Each row of weights sums to 1; max |sdpa weights - softmax(scaled scores)| = " << general(check, 3)
      << ".\n";
  return 0;
}

QKV_TOOL_COMMAND(worked_example, {
    .name = "worked-example",
    .summary = "The second tutorial's d_k = 2 example: Q K^T, scaled scores, softmax weights",
    .order = 41,
    .group = "The tutorials' experiments",
    .setup = [](CLI::App& sub) -> Action {
      sub.footer(
          "Recomputes the second tutorial's d_k = 2 example with the library: Q = [[0.1,0.2],[0.5,0.6],[0.9,1.0]], "
          "K = [[0.3,0.4],[0.7,0.8],[1.1,1.2]]. Prints Q K^T, the scores scaled by 1/sqrt(2) and the softmax "
          "weights to 3 decimals beside the tutorial's printed table (which rounds intermediates).");
      auto opt = std::make_shared<WorkedExampleOptions>();
      sub.add_flag("--json", opt->json, "Print one JSON object (full-precision matrices) instead of tables");
      return [opt] { return run_worked_example(*opt, std::cout); };
    }});

}  // namespace qkv::tool
