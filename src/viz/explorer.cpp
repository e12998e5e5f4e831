// The attention explorer: one self-contained HTML page (inline CSS, JS and
// the weights as inline JSON) with bertviz's head view and a matrix view.
// The page itself is explorer_page.inc (HTML with @TITLE@, @DATA@ and
// @VIRIDIS@ placeholders); this file fills them in.
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "qkv/core/error.h"
#include "qkv/viz/heatmap.h"
#include "qkv/io/files.h"

namespace qkv::viz {

namespace {

constexpr const char* kPage =
#include "explorer_page.inc"
    ;

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// JSON that is safe inside <script type="application/json">: no '<' at all
// (so no "</script>" or "<!--"), non-ASCII escaped.
std::string script_safe_json(const nlohmann::json& j) {
  const std::string raw = j.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(raw.size());
  for (char c : raw) {
    if (c == '<') out += "\\u003c";
    else out += c;
  }
  return out;
}

std::string first_component(const std::string& name) { return name.substr(0, name.find('.')); }

// Replaces every @KEY@ of `vars` in one pass (inserted text is never rescanned).
std::string fill(const std::string& tmpl, const std::map<std::string, std::string>& vars) {
  std::string out;
  out.reserve(tmpl.size());
  for (std::size_t i = 0; i < tmpl.size();) {
    bool hit = false;
    if (tmpl[i] == '@') {
      for (const auto& [key, value] : vars) {
        if (tmpl.compare(i, key.size(), key) == 0) {
          out += value;
          i += key.size();
          hit = true;
          break;
        }
      }
    }
    if (!hit) out += tmpl[i++];
  }
  return out;
}

std::vector<std::string> tokens_or_indices(const std::vector<std::string>& t, std::int64_t n) {
  if (!t.empty()) return t;
  std::vector<std::string> out;
  for (std::int64_t i = 0; i < n; ++i) out.push_back(std::to_string(i));
  return out;
}

}  // namespace

void write_explorer_html(const std::string& path, const std::vector<models::AttentionMap>& maps,
                         const std::string& title) {
  // maps[i].weights [H, Lq, Lk]; query_tokens Lq (or none), key_tokens Lk (or none)
  if (maps.empty()) throw ValueError("write_explorer_html: no attention maps to show (" + path + ")");

  // A map's group is its kind, qualified by the module ("encoder self-attention")
  // when maps of that kind come from more than one module.
  std::map<std::string, std::set<std::string>> modules_of_kind;
  for (const auto& m : maps) modules_of_kind[m.kind].insert(first_component(m.name));

  nlohmann::json jmaps = nlohmann::json::array();
  for (const auto& m : maps) {
    if (!m.weights.defined() || m.weights.dim() != 3)
      throw ShapeError("write_explorer_html: map '" + m.name + "' weights must be [H, Lq, Lk], got " +
                       (m.weights.defined() ? m.weights.shape_str() : std::string("an undefined tensor")));
    const std::int64_t H = m.weights.size(0), lq = m.weights.size(1), lk = m.weights.size(2);
    if ((!m.query_tokens.empty() && static_cast<std::int64_t>(m.query_tokens.size()) != lq) ||
        (!m.key_tokens.empty() && static_cast<std::int64_t>(m.key_tokens.size()) != lk))
      throw ValueError("write_explorer_html: map '" + m.name + "' has weights " + m.weights.shape_str() + " but " +
                       std::to_string(m.query_tokens.size()) + " query and " + std::to_string(m.key_tokens.size()) +
                       " key tokens");
    const std::vector<double> w = m.weights.to_vector<double>();
    nlohmann::json heads = nlohmann::json::array();
    for (std::int64_t h = 0; h < H; ++h) {
      nlohmann::json rows = nlohmann::json::array();
      for (std::int64_t i = 0; i < lq; ++i) {
        nlohmann::json row = nlohmann::json::array();
        for (std::int64_t j = 0; j < lk; ++j) {
          const double v = w[static_cast<std::size_t>((h * lq + i) * lk + j)];
          if (!std::isfinite(v))
            throw ValueError("write_explorer_html: map '" + m.name + "' has a non-finite weight");
          row.push_back(std::round(v * 1e4) / 1e4);  // 4 decimals keep the page small
        }
        rows.push_back(std::move(row));
      }
      heads.push_back(std::move(rows));
    }
    if (!m.head_ids.empty() && static_cast<std::int64_t>(m.head_ids.size()) != H)
      throw ValueError("write_explorer_html: map '" + m.name + "' has " + std::to_string(H) + " heads but " +
                       std::to_string(m.head_ids.size()) + " head numbers");
    nlohmann::json head_numbers = nlohmann::json::array();
    for (std::int64_t h = 0; h < H; ++h) head_numbers.push_back(m.head_id(h));
    std::string group = m.kind + "-attention";
    if (modules_of_kind[m.kind].size() > 1) group = first_component(m.name) + " " + group;
    jmaps.push_back({{"name", m.name},
                     {"kind", m.kind},
                     {"group", group},
                     {"layer", m.layer},
                     {"q", tokens_or_indices(m.query_tokens, lq)},
                     {"k", tokens_or_indices(m.key_tokens, lk)},
                     {"hn", std::move(head_numbers)},
                     {"w", std::move(heads)}});
  }
  const nlohmann::json data = {{"title", title}, {"maps", std::move(jmaps)}};

  std::string hex;
  hex.reserve(256 * 6);
  for (const Rgb& c : kViridis) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "%02x%02x%02x", c.r, c.g, c.b);
    hex += buf;
  }

  const std::string page =
      fill(kPage, {{"@TITLE@", html_escape(title)}, {"@VIRIDIS@", hex}, {"@DATA@", script_safe_json(data)}});
  io::write_file_atomic(path, page, "write_explorer_html");
}

}  // namespace qkv::viz
