// POST /v1/embeddings: texts -> the model's EmbedBatcher -> OpenAI's embedding list (see server.h).
#include <charconv>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "server_impl.h"

namespace qkv::serve {
namespace {

using json = nlohmann::json;

// Standard base64 (RFC 4648, with padding) of n bytes.
std::string base64(const unsigned char* p, std::size_t n) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  o.reserve((n + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 2 < n; i += 3) {
    const unsigned v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    o += abc[v >> 18];
    o += abc[(v >> 12) & 63];
    o += abc[(v >> 6) & 63];
    o += abc[v & 63];
  }
  if (i < n) {
    const unsigned v = (p[i] << 16) | (i + 1 < n ? p[i + 1] << 8 : 0);
    o += abc[v >> 18];
    o += abc[(v >> 12) & 63];
    o += i + 1 < n ? abc[(v >> 6) & 63] : '=';
    o += '=';
  }
  return o;
}

}  // namespace

void handle_embeddings(Server::Impl& s, const httplib::Request& req, httplib::Response& res) {
  const EmbeddingParams p = parse_embedding_request(req.body);
  const EmbeddingModel& m = s.embedding_model(p.model);
  request_record().model = m.id;
  infer::EmbedResult r;
  try {
    r = p.input_is_ids ? m.batcher->embed_ids(p.input_ids) : m.batcher->embed(p.input);
  } catch (const IndexError& e) {
    throw ApiError(400, std::string("Invalid 'input': ") + e.what(), "input", "invalid_value");
  } catch (const infer::QueueFullError&) {
    throw ApiError(429, "The server is busy (its queue is full); retry shortly.", "", "queue_full", "server_busy");
  } catch (const infer::ShutdownError&) {
    throw ApiError(503, "The server is shutting down; retry on another replica.", "", "shutting_down", "server_error");
  } catch (const ValueError& e) {
    throw ApiError(400, std::string("Invalid 'input': ") + e.what(), "input", "invalid_value");
  }
  const std::int64_t N = r.embeddings.shape()[0], C = r.embeddings.shape()[1];
  const float* e = r.embeddings.data<float>();
  // Written by hand: float32 values in their shortest round-trip form (std::to_chars), not as the
  // 17 digits of the double a JSON library would print.
  std::string body = "{\"object\":\"list\",\"data\":[";
  char num[32];
  for (std::int64_t i = 0; i < N; ++i) {
    const float* row = e + i * C;
    body += (i ? ",{" : "{");
    body += "\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
    if (p.base64) {
      // Little-endian float32, as OpenAI's base64 encoding (and numpy.frombuffer) reads it.
      body += "\"" + base64(reinterpret_cast<const unsigned char*>(row), static_cast<std::size_t>(C) * sizeof(float)) + "\"";
    } else {
      body += "[";
      for (std::int64_t c = 0; c < C; ++c) {
        if (c) body += ",";
        if (!std::isfinite(row[c])) {
          body += "null";  // JSON has no NaN; a finite model never gives one
          continue;
        }
        const auto [end, ec] = std::to_chars(num, num + sizeof(num), row[c]);
        body.append(num, ec == std::errc() ? end : num);
      }
      body += "]";
    }
    body += "}";
  }
  request_record().prompt_tokens = r.tokens;
  s.metrics.add_tokens(m.id, r.tokens, 0);
  body += "],\"model\":" + json(m.id).dump(-1, ' ', false, json::error_handler_t::replace) +
          ",\"usage\":{\"prompt_tokens\":" + std::to_string(r.tokens) + ",\"total_tokens\":" + std::to_string(r.tokens) + "}}";
  res.set_content(body, "application/json");
}

}  // namespace qkv::serve
