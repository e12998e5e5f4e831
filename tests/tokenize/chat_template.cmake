# Chat templates (Jinja2 subset) against transformers' apply_chat_template (fixtures from
# tests/reference/make_chat_template_fixtures.py), unsupported constructs and other errors with
# their line and column, hostile templates (bounded nesting, output, work, loops, recursion),
# the messages JSON reader, and one template rendering from many threads.
qkv_add_test(test_chat_template
  SOURCES tokenize/test_chat_template_fixtures.cpp tokenize/test_chat_template_errors.cpp
          tokenize/test_chat_template_hostile.cpp
  LIBS qkv nlohmann_json::nlohmann_json)
