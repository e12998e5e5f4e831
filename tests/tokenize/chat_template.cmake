# Chat templates (Jinja2 subset) against transformers' apply_chat_template (fixtures from
# tests/reference/make_chat_template_fixtures.py), unsupported constructs, errors, hostile templates.
qkv_add_test(test_chat_template
  SOURCES tokenize/test_chat_template_fixtures.cpp
  LIBS qkv nlohmann_json::nlohmann_json)
