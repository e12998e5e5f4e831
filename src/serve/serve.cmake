# The HTTP server (serve/; paths relative to src/): routes, JSON <-> requests, SSE, auth, limits.
set(QKV_SERVE_SOURCES
  serve/http_server.cpp
  serve/server.cpp
  serve/generation.cpp
  serve/embeddings.cpp
  serve/openai_request.cpp
  serve/metrics.cpp
)
