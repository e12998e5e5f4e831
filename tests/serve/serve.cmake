# serve/: the OpenAI-compatible HTTP server in the test process on port 0 of 127.0.0.1 (the tiny
# GPT-2 of the fixtures with a ChatML template; the MiniLM embedder of `make models`), clients in
# C++ with cpp-httplib's client and raw sockets: request parsing, every endpoint and field, SSE
# framing, errors and limits, slow clients, 16 concurrent clients each equal to alone, a client
# that disconnects mid-stream; every eos id ending a reply, chat template failures answered 400.
qkv_add_test(test_serve
  SOURCES serve/test_serve_units.cpp serve/test_server_api.cpp serve/test_server_errors.cpp serve/test_server_load.cpp
          serve/test_server_lm.cpp
  LIBS qkv_serve PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
# `qkv serve` as a process: the hostile-request corpus (RSS before and after), SIGTERM with
# requests in flight, start-up errors.
if(TARGET qkv_tool)
  qkv_add_test(test_serve_cli SOURCES serve/test_serve_cli.cpp LIBS qkv_serve PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
  target_compile_definitions(test_serve_cli PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>")
  add_dependencies(test_serve_cli qkv_tool)
  # `qkv serve` on SmolLM2-135M-Instruct Q4_1 (make models): chat equal to `qkv generate --chat`
  # token for token, streamed or not, and with many clients at once.
  qkv_add_test(test_serve_gguf SOURCES serve/test_serve_gguf.cpp LIBS qkv_serve PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
  target_compile_definitions(test_serve_gguf PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>")
  add_dependencies(test_serve_gguf qkv_tool)
  # Two `qkv serve` replicas behind HAProxy (Debian package haproxy, from scripts/setup.sh) with
  # examples/serving/haproxy.cfg as docs/serving.md shows it: requests reach both and survive one
  # replica killed. A missing haproxy fails the test (named), never skips it.
  find_program(QKV_HAPROXY_PROGRAM haproxy PATHS /usr/sbin /sbin)
  if(NOT QKV_HAPROXY_PROGRAM)
    set(QKV_HAPROXY_PROGRAM /usr/sbin/haproxy)
  endif()
  qkv_add_test(test_serve_replicas SOURCES serve/test_serve_replicas.cpp LIBS qkv_serve PkgConfig::HTTPLIB nlohmann_json::nlohmann_json)
  target_compile_definitions(test_serve_replicas PRIVATE QKV_BIN="$<TARGET_FILE:qkv_tool>" QKV_HAPROXY="${QKV_HAPROXY_PROGRAM}")
  add_dependencies(test_serve_replicas qkv_tool)
endif()
