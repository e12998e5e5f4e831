#!/usr/bin/env python3
"""Reference fixtures for qkv's chat templates (tests/tokenize/test_chat_template*.cpp).

Run (from any directory):

    /root/qkv-venv/bin/python tests/reference/make_chat_template_fixtures.py

Every output is rendered by transformers' own code path for apply_chat_template(...,
tokenize=False): transformers.utils.chat_template_utils.render_jinja_template (jinja2's
ImmutableSandboxedEnvironment with trim_blocks / lstrip_blocks, transformers' raise_exception,
tojson, strftime_now, namespace and dict). Messages go through transformers'
_normalize_chat_messages first, as apply_chat_template does.

Templates (tests/fixtures/chat_templates/*.jinja, written by this script):
    smollm2.jinja      SmolLM2-135M-Instruct, read from models/SmolLM2-135M-Instruct.Q4_1.gguf's
                       `tokenizer.chat_template` with gguf-py (run `make models` first)
    qwen2.5.jinja      Qwen/Qwen2.5-7B-Instruct (ChatML with tools); its text as configured for
                       llama.cpp in a public NixOS configuration, cross-checked against the C++
                       string literal of an OpenVINO GenAI tokenizer source (identical)
    llama3.jinja       meta-llama/Meta-Llama-3-8B-Instruct (the text in ollama's template tests
                       as the GGUF template of llama3:8b, and in many public training scripts)
    llama3.2.jinja     meta-llama/Llama-3.2-3B-Instruct (llama.cpp
                       models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja; 3827 bytes, the
                       size of that file's Git LFS pointer in another llama.cpp fork)
    mistral.jinja      mistralai/Mistral-7B-Instruct-v0.2 (llama.cpp tests/test-chat-template.cpp),
                       with its raise_exception role-alternation check
    gemma2.jinja       google/gemma-2-2b-it (llama.cpp models/templates/google-gemma-2-2b-it.jinja;
                       591 bytes, the size of its LFS pointer elsewhere)

Output: tests/fixtures/chat_templates/cases.json
    "templates":  name -> {file, bos_token, eos_token}
    "renders":    each template over several conversations, add_generation_prompt false/true:
                  {template, conversation, messages, add_generation_prompt, extra_vars,
                   output | error + raised}
    "constructs": small templates for each Jinja construct of the subset, rendered over the
                  messages "construct_messages": {name, template, vars, output | error + raised}
    An "error" with "raised": true is a raise_exception(message) of the template: "error" is
    that message exactly. Other errors (raised: false) are jinja2's; qkv must fail too (its own
    message is checked by the C++ tests).
Re-running writes byte-identical files.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "chat_templates"

# Template texts, as JSON / Python string literals copied from their public sources.

# meta-llama/Meta-Llama-3-8B-Instruct, tokenizer_config.json "chat_template" (the same text appears in
# ollama's template tests as the GGUF template of llama3:8b, and in many training scripts).
LLAMA3 = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"

# mistralai/Mistral-7B-Instruct-v0.2 (llama.cpp tests/test-chat-template.cpp, ggerganov/llama.cpp).
MISTRAL = "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"

# google/gemma-2-2b-it (llama.cpp models/templates/google-gemma-2-2b-it.jinja).
GEMMA2 = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"

# Qwen/Qwen2.5-7B-Instruct (ChatML with tools), as configured for llama.cpp in a public NixOS
# configuration (randoneering) and as embedded in an OpenVINO GenAI tokenizer source; both agree.
QWEN25 = "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n"

# The same template as the C++ string literal of the OpenVINO source (a cross-check of QWEN25).
QWEN25_CPP_LITERAL = "{%- if tools %}\\n    {{- '<|im_start|>system\\\\n' }}\\n    {%- if messages[0]['role'] == 'system' %}\\n        {{- messages[0]['content'] }}\\n    {%- else %}\\n        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\\n    {%- endif %}\\n    {{- \\\"\\\\n\\\\n# Tools\\\\n\\\\nYou may call one or more functions to assist with the user query.\\\\n\\\\nYou are provided with function signatures within <tools></tools> XML tags:\\\\n<tools>\\\" }}\\n    {%- for tool in tools %}\\n        {{- \\\"\\\\n\\\" }}\\n        {{- tool | tojson }}\\n    {%- endfor %}\\n    {{- \\\"\\\\n</tools>\\\\n\\\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\\\n<tool_call>\\\\n{\\\\\\\"name\\\\\\\": <function-name>, \\\\\\\"arguments\\\\\\\": <args-json-object>}\\\\n</tool_call><|im_end|>\\\\n\\\" }}\\n{%- else %}\\n    {%- if messages[0]['role'] == 'system' %}\\n        {{- '<|im_start|>system\\\\n' + messages[0]['content'] + '<|im_end|>\\\\n' }}\\n    {%- else %}\\n        {{- '<|im_start|>system\\\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\\\n' }}\\n    {%- endif %}\\n{%- endif %}\\n{%- for message in messages %}\\n    {%- if (message.role == \\\"user\\\") or (message.role == \\\"system\\\" and not loop.first) or (message.role == \\\"assistant\\\" and not message.tool_calls) %}\\n        {{- '<|im_start|>' + message.role + '\\\\n' + message.content + '<|im_end|>' + '\\\\n' }}\\n    {%- elif message.role == \\\"assistant\\\" %}\\n        {{- '<|im_start|>' + message.role }}\\n        {%- if message.content %}\\n            {{- '\\\\n' + message.content }}\\n        {%- endif %}\\n        {%- for tool_call in message.tool_calls %}\\n            {%- if tool_call.function is defined %}\\n                {%- set tool_call = tool_call.function %}\\n            {%- endif %}\\n            {{- '\\\\n<tool_call>\\\\n{\\\"name\\\": \\\"' }}\\n            {{- tool_call.name }}\\n            {{- '\\\", \\\"arguments\\\": ' }}\\n            {{- tool_call.arguments | tojson }}\\n            {{- '}\\\\n</tool_call>' }}\\n        {%- endfor %}\\n        {{- '<|im_end|>\\\\n' }}\\n    {%- elif message.role == \\\"tool\\\" %}\\n        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \\\"tool\\\") %}\\n            {{- '<|im_start|>user' }}\\n        {%- endif %}\\n        {{- '\\\\n<tool_response>\\\\n' }}\\n        {{- message.content }}\\n        {{- '\\\\n</tool_response>' }}\\n        {%- if loop.last or (messages[loop.index0 + 1].role != \\\"tool\\\") %}\\n            {{- '<|im_end|>\\\\n' }}\\n        {%- endif %}\\n    {%- endif %}\\n{%- endfor %}\\n{%- if add_generation_prompt %}\\n    {{- '<|im_start|>assistant\\\\n' }}\\n{%- endif %}\\n"

# meta-llama/Llama-3.2-3B-Instruct (llama.cpp models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja).
LLAMA32 = "{{- bos_token }}\n{%- if custom_tools is defined %}\n    {%- set tools = custom_tools %}\n{%- endif %}\n{%- if not tools_in_user_message is defined %}\n    {%- set tools_in_user_message = true %}\n{%- endif %}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n\n{#- This block extracts the system message, so we can slot it into the right place. #}\n{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content']|trim %}\n    {%- set messages = messages[1:] %}\n{%- else %}\n    {%- set system_message = \"\" %}\n{%- endif %}\n\n{#- System message #}\n{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n{%- if tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n{%- if tools is not none and not tools_in_user_message %}\n    {{- \"You have access to the following functions. To call a function, please respond with JSON for a function call.\" }}\n    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n{%- endif %}\n{{- system_message }}\n{{- \"<|eot_id|>\" }}\n\n{#- Custom tools are passed in a user message with some extra guidance #}\n{%- if tools_in_user_message and not tools is none %}\n    {#- Extract the first user message so we can plug it in here #}\n    {%- if messages | length != 0 %}\n        {%- set first_user_message = messages[0]['content']|trim %}\n        {%- set messages = messages[1:] %}\n    {%- else %}\n        {{- raise_exception(\"Cannot put tools in the first user message when there's no first user message!\") }}\n{%- endif %}\n    {{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}\n    {{- \"Given the following functions, please respond with a JSON for a function call \" }}\n    {{- \"with its proper arguments that best answers the given prompt.\\n\\n\" }}\n    {{- 'Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}\n    {{- \"Do not use variables.\\n\\n\" }}\n    {%- for t in tools %}\n        {{- t | tojson(indent=4) }}\n        {{- \"\\n\\n\" }}\n    {%- endfor %}\n    {{- first_user_message + \"<|eot_id|>\"}}\n{%- endif %}\n\n{%- for message in messages %}\n    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}\n        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}\n    {%- elif 'tool_calls' in message %}\n        {%- if not message.tool_calls|length == 1 %}\n            {{- raise_exception(\"This model only supports single tool-calls at once!\") }}\n        {%- endif %}\n        {%- set tool_call = message.tool_calls[0].function %}\n        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}\n        {{- '{\"name\": \"' + tool_call.name + '\", ' }}\n        {{- '\"parameters\": ' }}\n        {{- tool_call.arguments | tojson }}\n        {{- \"}\" }}\n        {{- \"<|eot_id|>\" }}\n    {%- elif message.role == \"tool\" or message.role == \"ipython\" %}\n        {{- \"<|start_header_id|>ipython<|end_header_id|>\\n\\n\" }}\n        {%- if message.content is mapping or message.content is iterable %}\n            {{- message.content | tojson }}\n        {%- else %}\n            {{- message.content }}\n        {%- endif %}\n        {{- \"<|eot_id|>\" }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n{%- endif %}\n"


def smollm2_template() -> str:
    import gguf

    path = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        sys.exit(f"{path} is missing: run `make models` first")
    reader = gguf.GGUFReader(str(path))
    return reader.fields["tokenizer.chat_template"].contents()


def render(template: str, messages: list, add_generation_prompt: bool, variables: dict) -> dict:
    import jinja2
    from transformers.utils.chat_template_utils import _normalize_chat_messages, render_jinja_template

    try:
        rendered, _ = render_jinja_template(
            conversations=[_normalize_chat_messages(json.loads(json.dumps(messages)))],
            chat_template=template,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
        return {"output": rendered[0]}
    except Exception as e:  # noqa: BLE001 - every failure is a fixture
        raised = type(e) is jinja2.exceptions.TemplateError  # raise_exception's exact class
        return {"error": str(e) if raised else f"{type(e).__name__}: {e}", "raised": raised}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "The city, e.g. \"Paris\""},
                               "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                "required": ["city"],
            },
        },
    }
]

CONVERSATIONS = {
    "empty": [],
    "single_user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "user", "content": "Hi, who are you?"},
        {"role": "assistant", "content": "I am an assistant. How can I help?"},
        {"role": "user", "content": "Tell me a \"joke\" about 'quotes'."},
    ],
    "system_multi_turn": [
        {"role": "system", "content": "  Answer briefly.\n"},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one?"},
        {"role": "assistant", "content": "   Green.   "},
    ],
    "unicode_and_escapes": [
        {"role": "user", "content": "Grüße! 你好 🚀 — a\ttab, a\nnewline, a \\backslash, {{ not jinja }} {% raw %}"},
        {"role": "assistant", "content": "\n\n  Ça va — très bien.\u00a0\n"},
        {"role": "user", "content": "</s><|im_end|> [INST] <start_of_turn>"},
    ],
    "tool_use": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]},
        {"role": "tool", "name": "get_weather", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
        {"role": "user", "content": "Thanks!"},
    ],
    # Error cases: roles that do not alternate, a system message where none is supported.
    "two_users": [
        {"role": "user", "content": "One."},
        {"role": "user", "content": "Two."},
    ],
}

TEMPLATES = {
    # name: (text, bos_token, eos_token, conversations, extra variables per conversation)
    "smollm2": (None, "<|im_start|>", "<|im_end|>",
                ["empty", "single_user", "system_user", "multi_turn", "system_multi_turn", "unicode_and_escapes"]),
    "qwen2.5": (QWEN25, None, "<|im_end|>",
                ["single_user", "system_user", "multi_turn", "system_multi_turn", "unicode_and_escapes", "tool_use"]),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|eot_id|>",
               ["single_user", "system_user", "multi_turn", "system_multi_turn", "unicode_and_escapes"]),
    "llama3.2": (LLAMA32, "<|begin_of_text|>", "<|eot_id|>",
                 ["single_user", "system_user", "multi_turn", "system_multi_turn", "unicode_and_escapes", "tool_use",
                  "empty"]),
    "mistral": (MISTRAL, "<s>", "</s>",
                ["single_user", "multi_turn", "unicode_and_escapes", "system_user", "two_users"]),
    "gemma2": (GEMMA2, "<bos>", "<eos>",
               ["single_user", "multi_turn", "unicode_and_escapes", "system_user", "two_users"]),
}


def extra_vars(template: str, conversation: str) -> dict:
    v = {}
    if template == "llama3.2":
        v["date_string"] = "26 Jul 2024"  # else strftime_now: today's date
    if conversation == "tool_use":
        v["tools"] = TOOLS
    return v


# Small templates, one Jinja construct each (name, template, variables). Messages: MSGS.
MSGS = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Hi \"there\""},
    {"role": "assistant", "content": "Hello!"},
]
CONSTRUCTS = [
    # literals and printing
    ("print_literals", "{{ 'a' }}|{{ \"b\" }}|{{ 1 }}|{{ -2 }}|{{ 1.5 }}|{{ 1e3 }}|{{ 0x1F }}|{{ 0o17 }}|{{ 0b101 }}|{{ 1_000 }}|{{ true }}|{{ False }}|{{ none }}|{{ None }}", {}),
    ("print_containers", "{{ [1, 'a', none, true, 1.5, [2], {'k': 'v'}] }}|{{ (1, 2) }}|{{ (1,) }}|{{ () }}|{{ {} }}|{{ [] }}", {}),
    ("string_escapes", "{{ 'a\\tb\\x41\\u00e9\\U0001F600\\101\\q\\\\' }}|{{ \"it's\" }}|{{ 'say \"hi\"' }}|{{ 'x' 'y' }}", {}),
    ("repr_strings", "{{ ['it\\'s', 'say \"hi\"', 'both \\' \"', 'nl\\n', 'tab\\t', 'nbsp\\u00a0', 'e\\u0301', 'bs\\\\'] }}", {}),
    ("floats", "{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1e15 }}|{{ 0.0001 }}|{{ 0.00001 }}|{{ 2.5e-7 }}|{{ 1/3 }}|{{ 10/2 }}|{{ -0.0 }}|{{ 123456789012345678.0 }}|{{ 1.5e300 * 1e300 }}", {}),
    # arithmetic
    ("arithmetic", "{{ 7 + 2 }} {{ 7 - 2 }} {{ 7 * 2 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 2 ** 10 }} {{ 2 ** 3 ** 2 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ true + 1 }}", {}),
    ("precedence_concat_binds_tighter", "{{ 1 + 2 ~ 3 }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }}  {{ 'a' ~ (1 + 2) }} {{ 1 ~ 2 * 3 }} {{ 'a' ~ 'b' ~ 'c' }} {{ -2 ** 2 }} {{ not 1 == 2 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ - 3|abs }}", {}),
    ("string_ops", "{{ 'ab' + 'cd' }} {{ 'ab' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] * 3 }} {{ [1] + [2] }} {{ 'x' * 0 }}|{{ 'x' * -1 }}|", {}),
    ("comparisons", "{{ 1 == 1.0 }} {{ 1 != 2 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }} {{ 2 <= 1 }} {{ none == none }} {{ 'a' == 1 }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ {'a': 1} == {'a': 1} }} {{ true == 1 }}", {}),
    ("in_operator", "{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'v' in {'k': 'v'} }} {{ 'sys' in messages[0]['content'] }} {{ 'tool_calls' in messages[0] }} {{ 'role' in messages[0] }}", {}),
    ("logic", "{{ true and 'x' }}|{{ 0 and 'x' }}|{{ '' or 'y' }}|{{ 'a' or 'b' }}|{{ none or 0 }}|{{ not '' }}|{{ not [] }}|{{ not {} }}|{{ not 'a' }}|{{ [] or [1] }}", {}),
    ("conditional_expr", "{{ 'yes' if 1 else 'no' }}|{{ 'yes' if 0 else 'no' }}|{{ 'only' if false }}|{{ 'a' if false else 'b' if true else 'c' }}|{{ ('x' if false) is defined }}", {}),
    # variables, undefined
    ("undefined", "[{{ missing }}]{{ missing is defined }}{{ missing is undefined }}{{ missing|length }}{% for x in missing %}x{% endfor %}{{ missing ~ 'k' }}{{ 'x' in missing }}{{ missing == missing }}{{ missing is none }}{{ missing|default('dflt') }}{{ missing is iterable }}", {}),
    ("undefined_attr", "{{ messages[0].nope }}|{{ messages[0].nope is defined }}|{{ messages[9] is defined }}|{{ messages[0]['nope'] is defined }}|{{ {'a': 1}.b }}|{{ 'str'.nope is defined }}", {}),
    ("undefined_attr_of_undefined", "{{ missing.attr }}", {}),
    ("undefined_plus", "{{ missing + 1 }}", {}),
    ("undefined_concat_plus", "{{ 'a' + missing }}", {}),
    ("undefined_tojson", "{{ missing|tojson }}", {}),
    ("undefined_call", "{{ missing() }}", {}),
    ("variables", "{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}{{ tools }}{{ documents }}{{ custom_flag }}{{ custom_list[1] }}{{ custom_map.k }}", {"bos_token": "<s>", "eos_token": "</s>", "custom_flag": True, "custom_list": [1, "two"], "custom_map": {"k": "v"}}),
    # attribute and item access, slices
    ("access", "{{ messages[0]['role'] }} {{ messages[0].role }} {{ messages[-1].content }} {{ messages|length }} {{ messages[1]['content'] }} {{ custom.a.b }} {{ custom['a']['b'] }} {{ custom.l.0 }} {{ custom.l[-1] }} {{ 'abc'[1] }} {{ 'héllo'[1] }}", {"custom": {"a": {"b": "deep"}, "l": [10, 20, 30]}}),
    ("slices", "{{ messages[1:]|length }} {{ messages[:1][0].role }} {{ [1, 2, 3, 4, 5][::2] }} {{ [1, 2, 3][::-1] }} {{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'héllo'[1:3] }} {{ [1, 2, 3][-2:] }} {{ [1, 2, 3][5:] }} {{ 'abc'[:-1] }} {{ [1, 2, 3, 4][3:0:-1] }} {{ [1, 2, 3][none:2] }}", {}),
    ("dict_methods", "{{ d.items()|list }} {{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }} {{ d['items'] is defined }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", {"d": {"a": 1, "b": [2, 3]}}),
    # string methods
    ("str_methods", "{{ '  pad  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '  l'.lstrip() }}|{{ 'r  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}|{{ 'hello'.startswith('he') }}|{{ 'hello'.endswith('lo') }}|{{ 'hello'.startswith(('x', 'h')) }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'MiX'.upper() }}{{ 'MiX'.lower() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'abc'.replace('', '-') }}|{{ 'hello'.find('l') }}|{{ 'hello'.count('l') }}|{{ ', '.join(['a', 'b']) }}|{{ ' '.isspace() }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a1'.isalnum() }}{{ 'ab'.islower() }}{{ 'AB'.isupper() }}", {}),
    ("str_methods_unicode", "{{ 'ß'.upper() }}|{{ 'ÉCOLE'.lower() }}|{{ 'élan vital'.title() }}|{{ '\\u00a0\\u2003 x \\u3000'.strip() }}|{{ 'a\\u2003b'.split() }}|{{ 'они'.upper() }}|{{ \"they're bill's\".title() }}", {}),
    ("split_think", "{{ content.split('</think>')[-1].lstrip('\\n') }}|{{ content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}", {"content": "<think>\nreasoning\n</think>\n\nanswer"}),
    # filters
    ("filter_trim_length", "[{{ '  a b  '|trim }}][{{ 'xxaxx'|trim('x') }}][{{ messages|length }}][{{ 'héllo'|length }}][{{ {'a': 1}|count }}][{{ 42|string|length }}]", {}),
    ("filter_title_pieces", "{{ text|title }}|{{ text.title() }}", {"text": "hi \"you\" (x-y) [zA] <w> {v} o'neil ßa"}),
    ("filter_case", "{{ 'MiXed'|upper }} {{ 'MiXed'|lower }} {{ 'hello world'|title }} {{ 'hELLO wORLD'|capitalize }} {{ 12|upper }}", {}),
    ("filter_default", "{{ missing|default('d') }} {{ ''|default('d') }} {{ ''|default('d', true) }} {{ none|default('d') }} {{ none|default('d', boolean=true) }} {{ 0|d('zero', true) }} {{ missing|d }}|", {}),
    ("filter_first_last", "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ {'a': 1, 'b': 2}|first }} {{ []|first }}|{{ (messages|first).role }}|{{ (messages|last)['role'] }}", {}),
    ("filter_join", "{{ [1, 2, 3]|join }} {{ [1, 2, 3]|join(', ') }} {{ ['a', 'b']|join('-') }} {{ messages|join(', ', attribute='role') }} {{ 'abc'|join('.') }}", {}),
    ("filter_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'hello'|replace('l', '') }} {{ 123|replace('2', 'x') }}", {}),
    ("filter_string_int_float", "{{ 1|string ~ 2 }} {{ none|string }} {{ [1]|string }} {{ '3'|int + 1 }} {{ '3.7'|int }} {{ 'x'|int }} {{ 'x'|int(5) }} {{ 3.9|int }} {{ '0x1A'|int(0, 16) }} {{ ' 42 '|int }} {{ '1_000'|int }} {{ '2.5'|float }} {{ 'x'|float }} {{ 3|float }} {{ true|int }}", {}),
    ("filter_list_items", "{{ 'ab'|list }} {{ {'a': 1}|list }} {{ {'a': 1, 'b': 2}|items|list }} {{ missing|items|list }} {{ (1, 2)|list }}", {}),
    ("filter_reverse_sort_unique", "{{ [3, 1, 2]|sort }} {{ ['b', 'A', 'c']|sort }} {{ ['b', 'A', 'c']|sort(case_sensitive=true) }} {{ [3, 1, 2]|sort(reverse=true) }} {{ [1, 2]|reverse|list }} {{ 'abc'|reverse }} {{ ['a', 'A', 'b', 'a']|unique|list }} {{ messages|sort(attribute='role')|map(attribute='role')|join(',') }}", {}),
    ("filter_map_select", "{{ messages|map(attribute='role')|list }} {{ ['a', 'b']|map('upper')|list }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'a']|select|list }} {{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='content')|join('/') }} {{ [1, 5, 10]|select('gt', 3)|list }} {{ messages|map(attribute='nope', default='?')|join }}", {}),
    ("filter_tojson", "{{ {'b': 1, 'a': [1, 2.5, none, true, 'é\"\\n']}|tojson }}|{{ 'x'|tojson }}|{{ [1, 2]|tojson(indent=2) }}|{{ {'a': {'b': []}, 'c': {}}|tojson(indent=2) }}|{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}|{{ 'é🚀'|tojson(ensure_ascii=true) }}|{{ [1, {'a': 2}]|tojson(separators=(',', ':')) }}|{{ (1, 2)|tojson }}|{{ {1: 'int key', none: 'none key'}|tojson }}", {}),
    ("filter_tojson_vars", "{{ tools|tojson }}\n{{ tools[0]|tojson(indent=4) }}", {"tools": TOOLS}),
    ("filter_abs_safe_indent", "{{ -3|abs }} {{ -2.5|abs }} {{ '<b>'|safe }}|{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}", {}),
    # tests
    ("tests", "{{ none is none }} {{ 1 is number }} {{ true is number }} {{ true is integer }} {{ 1.0 is float }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ none is iterable }} {{ [] is sequence }} {{ true is boolean }} {{ false is false }} {{ true is true }} {{ 1 is true }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 1 is in [1, 2] }}  {{ 2 is eq 2 }} {{ 2 is equalto 2 }} {{ 2 is ne 3 }} {{ 3 is gt 2 }} {{ 3 is greaterthan 4 }} {{ 2 is ge 2 }} {{ 1 is lt 2 }} {{ 1 is lessthan 0 }} {{ 2 is le 1 }} {{ 1 is not none }} {{ raise_exception is callable }} {{ none is sameas none }}", {}),
    # statements
    ("for_loop_vars", "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/{{ loop.previtem.role if loop.previtem is defined else '-' }}/{{ loop.nextitem.role if loop.nextitem is defined else '-' }}/{{ loop.cycle('odd', 'even') }}/{{ loop.depth }};{% endfor %}", {}),
    ("for_filter_else", "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}/{{ loop.length }} {% else %}none{% endfor %}|{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] if false %}x{% else %}filtered{% endfor %}", {}),
    ("for_unpack_nested", "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% for c in 'xy' %}{{ c }}{{ loop.index }}{% endfor %}.{% endfor %}|{% for k, v in {'a': 1}.items() %}{{ k }}{{ v }}{% endfor %}", {}),
    ("for_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("for_string_dict", "{% for ch in 'héy' %}[{{ ch }}]{% endfor %}{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}", {}),
    ("if_elif_else", "{% for n in [1, 2, 3, 4] %}{% if n == 1 %}one{% elif n == 2 %}two{% elif n == 3 %}three{% else %}many{% endif %} {% endfor %}", {}),
    ("set_scoping", "{% set x = 0 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}|{% set y = 5 %}{% for i in [1, 2] %}{{ y }}{% set y = i %}{{ y }}{% endfor %}{{ y }}|{% if true %}{% set z = 3 %}{% endif %}{{ z }}|{% for i in [1, 2] %}{% if i == 1 %}{% set w = 'a' %}{% endif %}{{ w }}.{% endfor %}", {}),
    ("set_tuple_and_block", "{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, 2 %}{{ t }}|{% set blk %}in {{ a }} block{% endset %}{{ blk }}|{{ blk|length }}", {}),
    ("scope_assigned_later", "{{ s }}{% for i in [1] %}[{{ s }}]{% endfor %}{% macro m() %}<{{ s }}|{{ t }}>{% endmacro %}{{ m() }}{% set t = 't' %}{{ m() }}{% for i in [1] %}{% for j in [1] %}({{ u }}){% endfor %}{% set u = 'u' %}{% endfor %}{% if false %}{% set v = 'v' %}{% endif %}{% for i in [1] %}{{ v }}{% endfor %}{% set b %}{{ s }}{% set s = 'in' %}{{ s }}{% endset %}{{ b }}{{ s }}", {"s": "ctx", "t": "ctx_t", "u": "ctx_u", "v": "ctx_v"}),
    ("scope_assigned_later_root", "{% for m in messages %}{{ s }}{% endfor %}{% set s = 'late' %}{{ s }}", {"s": "ctx"}),
    ("namespace", "{% set ns = namespace(found=false, count=0, last='') %}{% for m in messages %}{% if m.role == 'user' %}{% set ns.found = true %}{% endif %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.role %}{% endfor %}{{ ns.found }} {{ ns.count }} {{ ns.last }} {{ ns.missing is defined }} {{ ns }}", {}),
    ("namespace_dict_global", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}|{% set d = dict(x=1, y='z') %}{{ d }}|{{ dict([('k', 'v')]) }}", {}),
    ("reverse_iteration", "{% set ns = namespace(last_user=-1) %}{% for m in messages[::-1] %}{% set idx = (messages|length - 1) - loop.index0 %}{% if ns.last_user == -1 and m.role == 'user' %}{% set ns.last_user = idx %}{% endif %}{% endfor %}{{ ns.last_user }}", {}),
    ("macro", "{% macro fmt(m, prefix='> ', suffix='') %}{{ prefix }}{{ m.role }}: {{ m.content }}{{ suffix }}{% endmacro %}{% for m in messages %}{{ fmt(m) }}|{{ fmt(m, '# ') }}|{{ fmt(m, suffix='!') }}\n{% endfor %}{{ fmt }}", {}),
    ("macro_recursive", "{% macro count(n) %}{% if n > 0 %}{{ n }}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(5) }}", {}),
    ("with_block", "{% with a = 1, b = 'x' %}{{ a }}{{ b }}{% endwith %}[{{ a }}]", {}),
    ("range", "{{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ range(5)|length }}", {}),
    ("raise_exception", "before{{ raise_exception('Roles must alternate! ' ~ messages|length) }}after", {}),
    ("raise_in_loop", "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant at ' ~ loop.index0) }}{% endif %}{{ m.role }}{% endfor %}", {}),
    ("generation_block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}", {}),
    ("strftime_defined", "{{ strftime_now is defined }} {{ strftime_now('%Y')|length }}", {}),
    # whitespace control: trim_blocks, lstrip_blocks, - and +
    ("ws_trim_lstrip", "{% for m in messages %}\n    {% if m.role == 'user' %}\n        U: {{ m.content }}\n    {% endif %}\n{% endfor %}\nend\n", {}),
    ("ws_minus", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c\n  {{- ' d ' -}}  \n  e  {#- comment -#}  f", {}),
    ("ws_plus", "a\n    {%+ if true +%}\nb\n    {%+ endif %}\nc", {}),
    ("ws_comments", "x\n  {# a comment #}\ny {# inline #} z\n{#- stripped -#}\n  w\n{# multi\nline #}\nv", {}),
    ("ws_variables_not_lstripped", "a\n    {{ 'b' }}\n    {% if true %}c{% endif %}\n  {{- 'd' }}", {}),
    ("ws_crlf", "line1\r\n{% if true %}\r\nline2\r\n{% endif %}\r\nline3\r\n", {}),
    ("ws_trailing_newline", "text\n", {}),
    ("ws_raw", "{% raw %}{{ not rendered }} {% if %}{% endraw %}|\n  {% raw -%}  a  {%- endraw %}\nb", {}),
    ("ws_lstrip_unicode_space", "a\n\u00a0\u2003{% if true %}b{% endif %}\n\u3000{# c #}d", {}),
    ("ws_tab_indent_block_end", "{%- for i in [1, 2] -%}\n\t{{ i }}\n\t{%- if i == 1 %}\n\t\tone\n\t{%- endif %}\n{% endfor -%}\n!", {}),
    # errors jinja2 reports (qkv must fail too; its own messages are tested in C++)
    ("error_int_plus_str", "{{ 1 + 'a' }}", {}),
    ("error_str_plus_int", "{{ 'a' + 1 }}", {}),
    ("error_order_mixed", "{{ 1 < 'a' }}", {}),
    ("error_divide_zero", "{{ 1 / 0 }}", {}),
    ("error_iterate_int", "{% for x in 5 %}{% endfor %}", {}),
    ("error_list_append", "{% set l = [] %}{{ l.append(1) }}", {}),
    ("error_unknown_filter", "{{ 'a'|frobnicate }}", {}),
    ("error_unknown_tag", "{% include 'x.html' %}", {}),
    ("error_syntax", "{% if %}", {}),
    ("error_unclosed", "{% if true %}no end", {}),
    ("error_namespace_underscore", "{% set ns = namespace(_x=1) %}", {}),
    ("error_set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", {}),
    ("error_range_too_big", "{{ range(1000000)|length }}", {}),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    texts = {}
    for name, (text, bos, eos, _) in TEMPLATES.items():
        texts[name] = smollm2_template() if name == "smollm2" else text
        (OUT / f"{name}.jinja").write_text(texts[name], encoding="utf-8", newline="")
    cases = {"templates": {}, "renders": [], "construct_messages": MSGS, "constructs": []}
    for name, (_, bos, eos, convs) in TEMPLATES.items():
        cases["templates"][name] = {"file": f"{name}.jinja", "bos_token": bos, "eos_token": eos}
        for conv in convs:
            for agp in (False, True):
                variables = dict(extra_vars(name, conv))
                specials = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
                case = {"template": name, "conversation": conv, "messages": CONVERSATIONS[conv],
                        "add_generation_prompt": agp, "extra_vars": variables}
                case.update(render(texts[name], CONVERSATIONS[conv], agp, {**specials, **variables}))
                cases["renders"].append(case)
    for name, template, variables in CONSTRUCTS:
        case = {"name": name, "template": template, "vars": variables}
        result = render(template, MSGS, False, variables)
        if name == "strftime_defined" and "output" in result:
            assert result["output"] == "True 4", result
        case.update(result)
        cases["constructs"].append(case)
    text = json.dumps(cases, indent=1, ensure_ascii=False) + "\n"
    (OUT / "cases.json").write_text(text, encoding="utf-8")
    n_err = sum("error" in c for c in cases["renders"] + cases["constructs"])
    print(f"{len(cases['renders'])} renders of {len(TEMPLATES)} templates, {len(cases['constructs'])} constructs "
          f"({n_err} errors), {len(text)} bytes -> {OUT}")


if __name__ == "__main__":
    main()
