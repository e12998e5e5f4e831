#!/usr/bin/env python3
"""Reference fixtures for qkv's chat templates (tests/tokenize/test_chat_template*.cpp).

Run (from any directory):

    /root/qkv-venv/bin/python tests/reference/make_chat_template_fixtures.py

Every output is rendered by transformers' own code path for apply_chat_template(...,
tokenize=False): transformers.utils.chat_template_utils.render_jinja_template (jinja2's
ImmutableSandboxedEnvironment with trim_blocks / lstrip_blocks, transformers' raise_exception,
tojson, strftime_now, namespace and dict). Messages go through transformers'
_normalize_chat_messages first, as apply_chat_template does (keys whose value is None are dropped);
render_jinja_template then copies a message's reasoning ("reasoning_content", "thinking" or
"reasoning", the first not None) under both "thinking" and "reasoning_content", and always passes
tools and documents (None unless given) besides add_generation_prompt, bos_token and eos_token.

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
  Read from models/llama.cpp/templates/ (llama.cpp's models/templates/, from the llama-cpp-python
  0.3.36 sdist `make models` unpacks; each pinned by sha256, checked when read):
    qwen3.jinja        Qwen/Qwen3-0.6B (Qwen-Qwen3-0.6B.jinja, 4116 bytes): Qwen3's template as
                       released, with enable_thinking (an empty <think></think> after the generation
                       prompt when it is false), <think> kept only in assistant turns after the last
                       user query (from reasoning_content, else split out of the content), tools with
                       <tool_call>. A revised Qwen3 template also circulates (`message.content is
                       string` / `reasoning_content is string` checks, used by later Qwen releases); this
                       is the earlier text, as llama.cpp fetched it.
    smollm3-llamacpp.jinja  HuggingFaceTB/SmolLM3-3B as shipped in llama.cpp
                       (HuggingFaceTB-SmolLM3-3B.jinja, 3795 bytes): NOT the model's own template but
                       Unsloth's edit of it (its first lines say so: "Edits made by Unsloth to make it
                       work for most inference engines"). It keeps enable_thinking, the /think and
                       /no_think system-prompt flags and custom_instructions, but drops the original's
                       "/system_override", its "Today Date: " line (strftime_now("%d %B %Y")), its
                       xml_tools / python_tools / tools section and the {% generation %} block around
                       assistant turns, and splits the replace / replace / rstrip chain into three sets.
    phi3.5.jinja       microsoft/Phi-3.5-mini-instruct (microsoft-Phi-3.5-mini-instruct.jinja, 430
                       bytes; eos_token ends the text without add_generation_prompt)
    llama3.1.jinja     meta-llama/Llama-3.1-8B-Instruct (meta-llama-Llama-3.1-8B-Instruct.jinja,
                       4614 bytes): date_string defaults to the fixed "26 Jul 2024" (no strftime_now,
                       unlike Llama 3.2), builtin_tools, custom_tools, tools_in_user_message
  As string literals in this script:
    phi4-mini.jinja    microsoft/Phi-4-mini-instruct, tokenizer_config.json "chat_template" (the same
                       text in several public copies; bos_token = eos_token = <|endoftext|>)
    gemma3.jinja       google/gemma-3-*-it, tokenizer_config.json "chat_template" (its JSON string
                       literal, decoded): system message folded into the first user turn, content
                       as a string or a list of text / image parts, the role-alternation check

Output: tests/fixtures/chat_templates/cases.json
    "templates":  name -> {file, bos_token, eos_token}
    "renders":    each template over several conversations, add_generation_prompt false/true:
                  {template, conversation, messages, add_generation_prompt, extra_vars,
                   output | error + raised}; extra_vars are template variables (date_string,
                  enable_thinking, tools). The new templates' conversations are few and short, so
                  the fixture folder stays small (SmolLM3's default /think prompt alone is 1.2 KB).
    "constructs": small templates for each Jinja construct of the subset, rendered over the
                  messages "construct_messages": {name, template, vars, output | error + raised}
    An "error" with "raised": true is a raise_exception(message) of the template: "error" is
    that message exactly. Other errors (raised: false) are jinja2's; qkv must fail too (its own
    message is checked by the C++ tests).
Re-running writes byte-identical files.
"""
from __future__ import annotations

import hashlib
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


# microsoft/Phi-4-mini-instruct, tokenizer_config.json "chat_template" (the same text in several public copies).
PHI4_MINI = "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"

# google/gemma-3-*-it, tokenizer_config.json "chat_template": the JSON string literal of that file, decoded.
GEMMA3 = json.loads(r'''"{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}\n    {%- else -%}\n        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}\n    {%- endif -%}\n    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif -%}\n    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n        {%- set role = message['role'] -%}\n    {%- endif -%}\n    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}\n    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n    {{ '<end_of_turn>\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\n'}}\n{%- endif -%}\n"''')

# Templates read from llama.cpp's models/templates/ (the llama-cpp-python sdist `make models` unpacks into
# models/llama.cpp/templates/; llama.cpp fetches each with scripts/get_chat_template.py <model id>), pinned by
# sha256. Cross-checks: the SmolLM3 and Phi-3.5 files have the size and sha256 of their Git LFS pointers in a
# llama.cpp fork; the Qwen3 one has the text of another fork's copy (there with CRLF line ends).
LLAMACPP_TEMPLATES = ROOT / "models" / "llama.cpp" / "templates"
LLAMACPP_FILES = {
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5"),
    "smollm3-llamacpp": ("HuggingFaceTB-SmolLM3-3B.jinja",
                         "19eacf64569032f07644ea92c8e2a87af06ee7008147557302c31e474912ca97"),
    "phi3.5": ("microsoft-Phi-3.5-mini-instruct.jinja",
               "78d976a442bcde2f0be15aafbb8e3050e1104f86732266f68403251b89982a90"),
    "llama3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja",
                 "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65"),
    "qwen3.5": ("Qwen3.5-4B.jinja", "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715"),
}


def llamacpp_template(name: str) -> str:
    file, sha256 = LLAMACPP_FILES[name]
    path = LLAMACPP_TEMPLATES / file
    if not path.exists():
        sys.exit(f"{path} is missing: run `make models` first")
    data = path.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        sys.exit(f"{path} has sha256 {got}, expected {sha256}")
    return data.decode("utf-8")


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
    # Later additions (kept small: tests/fixtures/chat_templates stays compact).
    "system_middle": [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello."},
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "Why?"},
    ],
    "system_empty": [
        {"role": "system", "content": ""},
        {"role": "user", "content": "Hi."},
    ],
    # Non-ASCII text, and leading / trailing whitespace that trimming templates remove.
    "unicode_ws": [
        {"role": "system", "content": "  Sé breve. \n"},
        {"role": "user", "content": "\t¿Qué tal? 你好 🚀  "},
        {"role": "assistant", "content": "\n Très bien — merci.\u00a0\n"},
    ],
    # Content as a list of parts (Gemma 3 reads them; its system message is folded into the first user turn).
    "content_parts": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "  What is this? "}]},
        {"role": "assistant", "content": [{"type": "text", "text": " A cat. "}]},
        {"role": "user", "content": [{"type": "text", "text": "Ünd "}, {"type": "text", "text": "the dog?\n"}]},
    ],
    # Reasoning: past assistant turns with <think>...</think> in their content or a separate field.
    "think_history": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nA sum.\n</think>\n\n4."},
        {"role": "user", "content": "3+3?"},
    ],
    "think_after_last_user": [
        {"role": "system", "content": "Think."},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "Hmm."},
        {"role": "assistant", "content": "<think>\n\nAdd\nthem.\n\n</think>\n\n\n6"},
        {"role": "assistant", "content": "\nSo 6."},
    ],
    "reasoning_content": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4", "reasoning_content": "A sum."},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "<think>\nkept\n</think>\n6", "reasoning_content": "\nAdd.\n"},
    ],
    # transformers fills reasoning_content from "reasoning" / "thinking", and drops keys whose value is None.
    "reasoning_aliases": [
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "<think>\nfrom content\n</think>\n\n6", "reasoning_content": None},
        {"role": "user", "content": "4+4?"},
        {"role": "assistant", "content": "8", "reasoning": "Add."},
    ],
    # SmolLM3's /think and /no_think flags in the system prompt (they win over enable_thinking).
    "system_think": [
        {"role": "system", "content": "Réponds en français. /think"},
        {"role": "user", "content": "2+2 ?"},
        {"role": "assistant", "content": "<think>\nSomme.\n</think>\n\n4"},
    ],
    "system_no_think": [
        {"role": "system", "content": "/no_think"},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "\n<think>\nSum.\n</think>\n4"},
    ],
    "system_both_flags": [
        {"role": "system", "content": "Be brief. /think  /no_think  \n"},
        {"role": "user", "content": "Hi!"},
    ],
}

TEMPLATES = {
    # name: (text or a function giving it, bos_token, eos_token, conversations); a conversation is a name of
    # CONVERSATIONS or (name, extra variables); extra_vars() adds the variables every case of a template needs.
    "smollm2": (smollm2_template, "<|im_start|>", "<|im_end|>",
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
    # Qwen/Qwen3-0.6B (tokenizer_config: bos_token null, eos_token <|im_end|>).
    "qwen3": (lambda: llamacpp_template("qwen3"), None, "<|im_end|>",
              ["single_user", ("single_user", {"enable_thinking": True}), ("single_user", {"enable_thinking": False}),
               "system_user", "unicode_ws", "system_middle", "think_history",
               ("think_history", {"enable_thinking": False}), ("think_after_last_user", {"enable_thinking": True}),
               "reasoning_content", "reasoning_aliases"]),
    # HuggingFaceTB/SmolLM3-3B as shipped in llama.cpp: Unsloth's edit of it (see the docstring). Without custom
    # instructions and in /think mode it prints a 1.2 KB default system prompt: one conversation shows it.
    "smollm3-llamacpp": (lambda: llamacpp_template("smollm3-llamacpp"), "<|begin_of_text|>", "<|im_end|>",
                         ["single_user", ("single_user", {"enable_thinking": False}),
                          ("system_user", {"enable_thinking": True}), "unicode_ws",
                          ("system_think", {"enable_thinking": False}), ("system_no_think", {"enable_thinking": True}),
                          "system_both_flags"]),
    # microsoft/Phi-3.5-mini-instruct (tokenizer_config: bos_token <s>, eos_token <|endoftext|>).
    "phi3.5": (lambda: llamacpp_template("phi3.5"), "<s>", "<|endoftext|>",
               ["single_user", "system_user", "system_empty", "unicode_ws", "system_middle"]),
    "phi4-mini": (PHI4_MINI, "<|endoftext|>", "<|endoftext|>",
                  ["single_user", "system_user", "unicode_ws", "system_middle"]),
    "gemma3": (GEMMA3, "<bos>", "<eos>",
               ["single_user", "system_user", "unicode_ws", "content_parts", "system_middle", "two_users"]),
    # meta-llama/Llama-3.1-8B-Instruct (tokenizer_config: bos_token <|begin_of_text|>, eos_token <|eot_id|>). Its
    # template has no strftime_now: without date_string it prints its fixed default, 26 Jul 2024.
    "llama3.1": (lambda: llamacpp_template("llama3.1"), "<|begin_of_text|>", "<|eot_id|>",
                 ["single_user", ("system_user", {"date_string": "07 Dec 2025"}), "unicode_ws", "system_middle"]),
    # Qwen/Qwen3.5-4B (tokenizer_config: bos_token null, eos_token <|im_end|>): thinking on unless
    # enable_thinking is false, tools in its XML-parameter format, images counted (vision ids off).
    "qwen3.5": (lambda: llamacpp_template("qwen3.5"), None, "<|im_end|>",
                ["single_user", ("single_user", {"enable_thinking": False}), "system_user", "multi_turn",
                 "think_history", ("think_history", {"enable_thinking": False}), "reasoning_content", "tool_use",
                 "content_parts", "unicode_ws"]),
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
    # constructs of the Qwen3, SmolLM3, Phi-3.5 / Phi-4-mini, Gemma 3 and Llama 3.1 templates
    ("not_call_paren", "{{ not(true and false) }}|{{ not('<a>'.startswith('<a') and '<a>'.endswith('>')) }}|{{ not(0) }}", {}),
    ("not_binds_looser_than_is", "{{ not missing is defined }}|{{ not none is none }}|{{ not [1, 2]|length == 1 }}|{{ not 'x' in 'xy' }}|{{ not missing is defined and true }}", {}),
    ("filter_binds_tighter_than_plus", "{{ 'a' + '  b  '|trim + 'c' }}|{{ 'T: ' + ['x', 'y', 'z']|reject('equalto', 'y')|join(', ') + '!' }}|{{ messages|length - 1 }}|{{ '<' + messages[0]['content']|upper + '>' }}", {}),
    ("string_literal_raw_newline", "{{'<|user|>\n' + 'x' + '<|end|>\n'}}{% if true %}{{ \"a\r\nb\" }}{% endif %}\nend", {}),
    ("set_if_not_defined", "{%- if flag is not defined -%}{%- set flag = true -%}{%- endif -%}\n{%- if not date is defined %}\n    {%- set date = '26 Jul 2024' %}\n{%- endif %}\n[{{ flag }}][{{ date }}]", {}),
    ("set_if_not_defined_passed", "{%- if flag is not defined -%}{%- set flag = true -%}{%- endif -%}\n{%- if not date is defined %}\n    {%- set date = '26 Jul 2024' %}\n{%- endif %}\n[{{ flag }}][{{ date }}]", {"flag": False, "date": "07 Dec 2025"}),
    ("if_undefined", "{% if missing %}t{% else %}f{% endif %}|{% if not missing %}n{% endif %}|{{ 'y' if missing else 'n' }}|{% if messages[0].nope %}t{% elif messages[0].role %}r{% endif %}|{% if messages[0].role == 'system' %}{% set ci = messages[0].content %}{% endif %}{% if ci %}{{ ci }}{% endif %}{% if ci2 %}x{% endif %}", {}),
    ("is_false_strict", "{{ false is false }} {{ 0 is false }} {{ none is false }} {{ '' is false }} {{ 1 is true }}|{% if flag is defined and flag is false %}off{% endif %}", {"flag": False}),
    ("set_context_var", "{% set messages = messages[1:] %}{{ messages|length }}{% for m in messages %}{{ m.role }}{% endfor %}|{% set loop_messages = messages[1:] %}{{ loop_messages[0].content }}", {}),
    ("set_loop_variable", "{% for t in calls %}{% if t.function %}{% set t = t.function %}{% endif %}{{ t.name }}{{ t.function is defined }};{% endfor %}", {"calls": [{"function": {"name": "a"}}, {"name": "b"}]}),
    ("namespace_expr_kwargs", "{% set ns = namespace(flag=true, last=messages|length - 1, s='x' ~ 1) %}{% for m in messages[::-1] %}{% set index = (messages|length - 1) - loop.index0 %}{% if ns.flag and m.role == 'user' and not(m.content.startswith('<r>') and m.content.endswith('</r>')) %}{% set ns.flag = false %}{% set ns.last = index %}{% endif %}{% endfor %}{{ ns.last }} {{ ns.flag }} {{ ns.s }}", {}),
    ("content_dispatch", "{% for c in contents %}{% if c is string %}s:{{ c|trim }}{% elif c is iterable %}i:{% for p in c %}{% if p['type'] == 'image' %}<img>{% elif p['type'] == 'text' %}{{ p['text']|trim }}{% endif %}{% endfor %}{% else %}o:{{ c }}{% endif %};{% endfor %}{{ 5 is iterable }} {{ {'a': 1} is iterable }} {{ {'a': 1} is mapping }} {{ [] is mapping }} {{ 'a' is mapping }}", {"contents": [" s ", [{"type": "image"}, {"type": "text", "text": " t "}], {"type": "text"}, 5, None]}),
    ("inline_if_in_concat", "{% for m in messages %}{{ '<' + m.role + '>' + (m.content if loop.first else \"\") + ('!' if loop.last else '') }}{% endfor %}", {}),
    ("for_unpack_items_filter", "{% for k, v in d|items %}{{ k + '=\"' + v + '\"' }}{% if not loop.last %}{{ ', ' }}{% endif %}{% endfor %}|{{ 'b' in names }} {{ 'z' in names }}", {"d": {"city": "Paris", "unit": "c"}, "names": ["a", "b"]}),
    ("str_replace_chain", "{{ s.replace('/no_think', '').replace('/think', '').rstrip() }}|{{ '/no_think' in s }} {{ '/think' in s }}|{{ s.replace('/x', '') == s }}", {"s": "Be brief. /think  /no_think  \n"}),
    ("strip_chars_newline", "[{{ '\\n\\nr\\n\\n'.strip('\\n') }}][{{ '\\n x\\n'.lstrip('\\n') }}][{{ 'ab\\n \\n'.rstrip('\\n') }}][{{ 'xyzyx'.strip('xy') }}][{{ ''.strip('\\n') }}]", {}),
    ("comment_unicode_ws", "{# ───── defaults ───── #}\n{%- if true -%}\n    {%- set x = 1 -%}\n{%- endif -%}\n{# ───── header ───── #}\n{{- 'h' -}}\n{#- dash -#}\n  {{ 'v' ~ x }}\n{# end #}\n!", {}),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    texts = {}
    for name, (text, bos, eos, _) in TEMPLATES.items():
        texts[name] = text() if callable(text) else text
        (OUT / f"{name}.jinja").write_text(texts[name], encoding="utf-8", newline="")
    cases = {"templates": {}, "renders": [], "construct_messages": MSGS, "constructs": []}
    for name, (_, bos, eos, convs) in TEMPLATES.items():
        cases["templates"][name] = {"file": f"{name}.jinja", "bos_token": bos, "eos_token": eos}
        for conv in convs:
            conv, conv_vars = conv if isinstance(conv, tuple) else (conv, {})
            for agp in (False, True):
                variables = {**extra_vars(name, conv), **conv_vars}
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
