"""Random-weight benchmark models with the real shapes of Qwen3-0.6B, Gemma-3-1B, Qwen3-30B-A3B, OLMoE-1B-7B
and gpt-oss-20b.

Models (--models, comma-separated keys; default qwen3,gemma3):
  qwen3     qwen3-0.6b            Qwen/Qwen3-0.6B's config (dense, 28 layers).
  gemma3    gemma3-1b             google/gemma-3-1b-it's config (dense, 26 layers).
  qwen3moe  qwen3moe-30b-a3b-4l   Qwen/Qwen3-30B-A3B's config (qwen3_moe: 128 experts, 8 per token,
                                  expert FFN 768, norm_topk_prob true, GQA 32/4, untied) with
                                  num_hidden_layers 48 -> 4.
  olmoe     olmoe-1b-7b-4l        allenai/OLMoE-1B-7B-0924's config (olmoe: 64 experts, 8 per token,
                                  expert FFN 1024, norm_topk_prob false, MHA 16/16, q/k norm over the
                                  whole projection, untied) with num_hidden_layers 16 -> 4.
  qwen35    qwen3.5-0.8b          Qwen/Qwen3.5-0.8B's text config (qwen3_5_text: Gated DeltaNet on 18 of 24
                                  layers, gated attention on the others; tied 248320 x 1024 embedding).
  gptoss    gpt-oss-20b-4l        openai/gpt-oss-20b's config (gpt_oss: 32 experts, 4 per token, expert
                                  FFN 2880, hidden 2880, GQA 64/8 heads of 64, attention sinks, biases,
                                  sliding window 128 on every other layer, YaRN x32 over 4096, vocab
                                  201088, untied) with num_hidden_layers 24 -> 4 (layer_types: sliding,
                                  full, sliding, full); quantized with llama-quantize MXFP4_MOE (the
                                  experts MXFP4, as OpenAI publishes them, every other matrix Q8_0)
                                  instead of Q4_K_M.
Why 4 layers for the mixture-of-experts models: every tensor keeps its real shape (expert
matrices, router, attention, embedding and output), so the per-layer work of a token (router,
8 experts' gate/up/down, attention) is the real one and a run measures it; but the full models do
not fit the machine (Qwen3-30B-A3B is 30.5 B parameters, 61 GB in bf16; OLMoE is 6.9 B, 13.8 GB,
plus the converter's and llama-quantize's copies on 24 GB of RAM and 2 cores). At 4 layers they are
3.1 B and 1.9 B parameters (6.2 GB and 3.8 GB in bf16); gpt-oss-20b (20.9 B, 42 GB in bf16) is
4.45 B (8.9 GB), of which the embedding and the output head (201088 x 2880 each) are 1.16 B.
Per-token cost of the real model ~ embedding + output head + layers x (per-layer cost); with 4
layers the output head (vocab x hidden) is a larger share of a token's time than in the real
models, so compare per-layer costs, not whole-model speed.
The MoE routers (mlp.gate; gpt-oss's mlp.router, whose bias keeps transformers' normal draw) get
explicitly seeded normal(0, 0.02) weights (transformers creates them as zeros and relies on
_init_weights; a zero router routes every token to the same experts), and the build checks that
the sample tokens pick many distinct experts.

For each model this script
  1. writes a Hugging Face folder (<out>/<name>-hf/): the Hub's config.json (num_hidden_layers cut
     for the MoE models), bf16 random weights from transformers' own init (seeded, built directly
     in bf16), and a small trained tokenizer the llama.cpp converter accepts;
  2. converts it with llama.cpp's convert_hf_to_gguf.py to <name>-bf16.gguf
     (source for quantization) and, for the dense models only, <name>-q8_0.gguf (skipped for the
     MoE models to save time and disk);
  3. quantizes the bf16 GGUF with llama-quantize to <name>-q4_k_m.gguf (gpt-oss: <name>-mxfp4_moe.gguf);
  4. runs `llama-bench -t 1 -p 16 -n 4 -r 1` on the Q8_0 (dense only) and quantized files;
  5. writes <out>/REPORT.md (sizes, tensor types per file, key and expert metadata, bench output,
     per-step wall time, lock wait and peak RSS); the sections of models not made in this run are
     kept from the previous REPORT.md. Converter / llama-quantize / llama-bench output goes to
     <out>/logs/.
All outputs are kept (HF folder, bf16 GGUF, quantized GGUFs).

The weights are random: the files are for speed only, their output is noise.

Tokenizers:
  * Qwen3: a byte-level BPE (Qwen2's pre-tokenizer regex, NFC) trained on the
    Python standard library's sources, ~8k entries, with Qwen3's 26 added tokens
    at their real ids (151643 <|endoftext|> ... 151668 </think>); the converter
    fills the ids in between with [PAD<i>] up to vocab_size 151936. The converter
    identifies BPE pre-tokenizers by hashing the ids of a test string, which a
    new vocabulary cannot match, so TextModel.get_vocab_base_pre is patched
    in-process to return "qwen2" (what the real Qwen3 GGUFs carry). qwen3moe uses the same
    tokenizer (same training, same files).
  * OLMoE: the same byte-level BPE approach in GPT-NeoX form (OLMoE's tokenizer is GPT-NeoX-20B's,
    extended): NFC + ByteLevel with GPT-2's regex, OLMoE's special ids |||IP_ADDRESS||| 0,
    <|padding|> 1 (pad), |||EMAIL_ADDRESS||| 50277, |||PHONE_NUMBER||| 50278, <|endoftext|> 50279
    (eos; no bos), ~8k trained entries; the converter pads with [PAD<i>] up to vocab_size 50304.
    The pre-tokenizer is patched to "olmo" (what the real OLMoE GGUFs carry: GPT-2's regex).
  * gpt-oss: its o200k_harmony tokenizer is tiktoken's o200k_base plus the harmony tokens, which
    is not available offline; in its place the same byte-level BPE approach with o200k's
    pre-tokenizer regex (llama.cpp's "gpt-4o", patched in as for Qwen3), ~8k trained entries and
    the harmony special tokens at their real ids (<|startoftext|> 199998, <|endoftext|> 199999
    (pad), <|return|> 200002 (eos), <|constrain|> 200003, <|channel|> 200005, <|start|> 200006,
    <|end|> 200007, <|message|> 200008, <|call|> 200012, <|endofprompt|> 200018); the converter pads
    with [PAD<i>] up to vocab_size 201088, so the embedding and output head keep their real shape.
    A short harmony-style chat template (the real one's roles and separators, none of its tools).
  * Gemma 3: a SentencePiece BPE model (byte_fallback, no dummy prefix, digits
    split, identity normalization) with Gemma's special ids: <pad> 0, <eos> 1,
    <bos> 2, <unk> 3, <mask> 4, [@BOS@] 5, <unused0..98> 6..104,
    <start_of_turn> 105, <end_of_turn> 106; the converter pads the vocabulary up
    to vocab_size 262144 with [PAD<i>] tokens (and keeps all 262144 embedding rows).
    tokenizer.json (transformers' conversion of tokenizer.model, checked to encode the
    same) is written too: without it the converter's SpecialVocab sets no eos id,
    since config.json's eos_token_id is a list ([1, 106]).

CPU: every heavy step holds an exclusive flock on /tmp/qkv-cpu.lock (subprocesses
run under `flock /tmp/qkv-cpu.lock ...`, in-process work takes the same lock with
fcntl.flock), so do NOT run this script itself under `flock` on that file (it
would wait on itself). torch runs single-threaded.

Steps skip outputs that already exist; --force redoes them.

Usage:
  python bench/make_bench_models.py [--out DIR (models/bench)] [--models qwen3,gemma3,qwen3moe,olmoe,gptoss]
      [--llama-src DIR] [--llama-bin DIR] [--force] [--no-bench]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

LOCK = "/tmp/qkv-cpu.lock"
# models/ is ignored by git; llama.cpp's source (for convert_hf_to_gguf.py) and its built tools
# (llama-quantize, llama-bench) come from the environment (BENCHMARKS.md says how they were built).
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "models" / "bench"
DEFAULT_LLAMA_SRC = Path(os.environ.get("LLAMA_CPP_SRC", "/root/peers/llama_cpp_python-0.3.36/vendor/llama.cpp"))
DEFAULT_LLAMA_BIN = Path(os.environ.get("LLAMA_CPP_BIN", "/root/peers/llama.cpp-build/bin"))
SEED = 1234
TOKENIZER_VOCAB = 8000  # size of the small trained tokenizers (before padding)

# config.json as on the Hub (Qwen/Qwen3-0.6B, google/gemma-3-1b-it).
QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

GEMMA3_CONFIG = {
    "architectures": ["Gemma3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": None,
    "bos_token_id": 2,
    "cache_implementation": "hybrid",
    "eos_token_id": [1, 106],
    "final_logit_softcapping": None,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "initializer_range": 0.02,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "model_type": "gemma3_text",
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "pad_token_id": 0,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.50.0.dev0",
    "use_cache": True,
    "vocab_size": 262144,
}

# Qwen/Qwen3-30B-A3B's config.json, num_hidden_layers 48 -> 4 (see the docstring).
QWEN3MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "decoder_sparse_step": 1,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 6144,
    "max_position_embeddings": 40960,
    "max_window_layers": 48,
    "mlp_only_layers": [],
    "model_type": "qwen3_moe",
    "moe_intermediate_size": 768,
    "norm_topk_prob": True,
    "num_attention_heads": 32,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 4,
    "num_key_value_heads": 4,
    "output_router_logits": False,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.001,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# allenai/OLMoE-1B-7B-0924's config.json, num_hidden_layers 16 -> 4 (see the docstring).
OLMOE_CONFIG = {
    "architectures": ["OlmoeForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": None,
    "clip_qkv": None,
    "eos_token_id": 50279,
    "hidden_act": "silu",
    "hidden_size": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 1024,
    "max_position_embeddings": 4096,
    "model_type": "olmoe",
    "norm_topk_prob": False,
    "num_attention_heads": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 4,
    "num_key_value_heads": 16,
    "output_router_logits": False,
    "pad_token_id": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 10000.0,
    "router_aux_loss_coef": 0.01,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.0.dev0",
    "use_cache": True,
    "vocab_size": 50304,
}

# openai/gpt-oss-20b's config.json without its quantization_config (the weights here are bf16),
# num_hidden_layers 24 -> 4 and layer_types cut to match (see the docstring).
GPTOSS_CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "attention_bias": True,
    "attention_dropout": 0.0,
    "eos_token_id": 200002,
    "experts_per_token": 4,
    "head_dim": 64,
    "hidden_act": "silu",
    "hidden_size": 2880,
    "initial_context_length": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
    "max_position_embeddings": 131072,
    "model_type": "gpt_oss",
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "output_router_logits": False,
    "pad_token_id": 199999,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000,
    "router_aux_loss_coef": 0.9,
    "sliding_window": 128,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.55.0.dev0",
    "use_cache": True,
    "vocab_size": 201088,
}

# Qwen3's added tokens: (id, content, special)
QWEN3_ADDED = [
    (151643, "<|endoftext|>", True), (151644, "<|im_start|>", True), (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True), (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True), (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True), (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True), (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True), (151655, "<|image_pad|>", True), (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False), (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", True), (151660, "<|fim_middle|>", True), (151661, "<|fim_suffix|>", True),
    (151662, "<|fim_pad|>", True), (151663, "<|repo_name|>", True), (151664, "<|file_sep|>", True),
    (151665, "<tool_response>", False), (151666, "</tool_response>", False),
    (151667, "<think>", False), (151668, "</think>", False),
]
QWEN2_PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN3_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{'<|im_start|>assistant\\n'}}{% endif %}"
)
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

# OLMoE's special tokens (GPT-NeoX-20B's tokenizer as extended by OLMo): (id, content, special)
OLMOE_FRONT = [(0, "|||IP_ADDRESS|||", False), (1, "<|padding|>", True)]
OLMOE_ADDED = [(50277, "|||EMAIL_ADDRESS|||", False), (50278, "|||PHONE_NUMBER|||", False),
               (50279, "<|endoftext|>", True)]

# o200k_base's pre-tokenizer regex (tiktoken's, as gpt-oss's tokenizer.json has it).
O200K_PRETOKENIZE_REGEX = "|".join([
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
    r"""\p{N}{1,3}""",
    r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
    r"""\s*[\r\n]+""",
    r"""\s+(?!\S)""",
    r"""\s+""",
])
# gpt-oss's named harmony tokens (o200k_harmony): (id, content); all special.
GPTOSS_ADDED = [(199998, "<|startoftext|>"), (199999, "<|endoftext|>"), (200002, "<|return|>"),
                (200003, "<|constrain|>"), (200005, "<|channel|>"), (200006, "<|start|>"), (200007, "<|end|>"),
                (200008, "<|message|>"), (200012, "<|call|>"), (200018, "<|endofprompt|>")]
GPTOSS_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>'}}"
    "{% endfor %}{% if add_generation_prompt %}{{'<|start|>assistant'}}{% endif %}"
)

# Qwen/Qwen3.5-0.8B's text_config as a text-only Qwen3_5ForCausalLM (model_type qwen3_5_text): 24 layers,
# three Gated DeltaNet layers (16 key and 16 value heads of 128, convolution of 4) to one gated full
# attention (8 heads on 2 of 256, a quarter of them rotated), tied embeddings of 248320. The special
# ids are the stand-in Qwen3 tokenizer's (the real vocabulary is not available offline).
QWEN35_CONFIG = {
    "architectures": ["Qwen3_5ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "attn_output_gate": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3584,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 16,
    "linear_value_head_dim": 128,
    "max_position_embeddings": 262144,
    "model_type": "qwen3_5_text",
    "num_attention_heads": 8,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "pad_token_id": 151643,
    "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25,
                        "mrope_interleaved": True, "mrope_section": [11, 11, 10]},
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 248320,
}

# hub: where the config comes from; tokenizer: which maker; pre: the converter's BPE pre-tokenizer
# name to patch in (None: SentencePiece, nothing to patch); q8: also make a Q8_0 GGUF; quant: the
# llama-quantize type of the quantized file (default Q4_K_M).
MODELS = {
    "qwen3": dict(name="qwen3-0.6b", config=QWEN3_CONFIG, hub="Qwen/Qwen3-0.6B", tokenizer="qwen3",
                  pre="qwen2", q8=True),
    "gemma3": dict(name="gemma3-1b", config=GEMMA3_CONFIG, hub="google/gemma-3-1b-it", tokenizer="gemma3",
                   pre=None, q8=True),
    "qwen3moe": dict(name="qwen3moe-30b-a3b-4l", config=QWEN3MOE_CONFIG, hub="Qwen/Qwen3-30B-A3B",
                     tokenizer="qwen3", pre="qwen2", q8=False),
    "olmoe": dict(name="olmoe-1b-7b-4l", config=OLMOE_CONFIG, hub="allenai/OLMoE-1B-7B-0924", tokenizer="olmoe",
                  pre="olmo", q8=False),
    "gptoss": dict(name="gpt-oss-20b-4l", config=GPTOSS_CONFIG, hub="openai/gpt-oss-20b", tokenizer="gptoss",
                   pre="gpt-4o", q8=False, quant="MXFP4_MOE"),
    # (--no-mtp: the converter otherwise wants the published checkpoints' multi-token-prediction layers)
    "qwen35": dict(name="qwen3.5-0.8b", config=QWEN35_CONFIG, hub="Qwen/Qwen3.5-0.8B", tokenizer="qwen3",
                   pre="qwen2", q8=True, convert_args=["--no-mtp"]),
}


def is_moe(cfg: dict) -> bool:
    return "num_experts" in cfg or "num_local_experts" in cfg


def quant_file(key: str) -> Path:
    """The quantized GGUF of a model: <name>-q4_k_m.gguf, or <name>-<its quant type>.gguf."""
    spec = MODELS[key]
    return ARGS.out / f"{spec['name']}-{spec.get('quant', 'Q4_K_M').lower()}.gguf"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


@contextlib.contextmanager
def cpu_lock():
    fd = os.open(LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


# (model name, step, wall seconds holding the lock, seconds waiting for it, peak RSS in MiB, end time) of this run
STEPS: list[tuple[str, str, float, float, float, float]] = []


def note_step(model: str, step: str, wall: float, wait: float, rss_mib: float) -> None:
    STEPS.append((model, step, wall, wait, rss_mib, time.time()))
    log(f"{model}: {step} took {wall:.1f} s (+{wait:.1f} s waiting for the lock), peak RSS {rss_mib:.0f} MiB")


def run_heavy(cmd: list[str], env: dict | None = None, logfile: Path | None = None,
              step: tuple[str, str] | None = None) -> str:
    """Run under the CPU lock; output captured (and written to logfile if given), shown on failure.

    The locked shell prints the time it got the lock, so the wall time of the command itself and the
    wait are told apart. The peak RSS comes from GNU time (%M), which forks the command from a small
    process: the ru_maxrss of a child forked from this (possibly large) Python process would count the
    parent's pages as of the fork."""
    cmd = [str(c) for c in cmd]
    shown = ["flock", LOCK] + cmd
    timer = ["/usr/bin/time", "-f", "@@maxrss %M"] if os.access("/usr/bin/time", os.X_OK) else []
    full = ["flock", LOCK, "sh", "-c", 'echo "@@locked $(date +%s.%N)"; exec "$@"', "sh"] + timer + cmd
    log("$ " + " ".join(shown).replace("\n", " "))
    t0 = time.time()
    r = subprocess.run(full, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t2 = time.time()
    t1, rss_kib, lines = t0, 0.0, []
    for line in r.stdout.splitlines(keepends=True):
        if line.startswith("@@locked "):
            t1 = float(line.split()[1])
        elif line.startswith("@@maxrss "):
            rss_kib = float(line.split()[1])
        else:
            lines.append(line)
    text = "".join(lines)
    if logfile is not None:
        logfile.write_text(text)
    if r.returncode != 0:
        print(text[-20000:], file=sys.stderr)
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(shown)}")
    if step is not None:
        note_step(step[0], step[1], t2 - t1, t1 - t0, rss_kib / 1024)
    return text


def corpus_lines(max_bytes: int = 6_000_000) -> list[str]:
    """Deterministic training text: the Python standard library's sources (sorted), plus a few non-ASCII lines."""
    import sysconfig
    lib = Path(sysconfig.get_paths()["stdlib"])
    lines: list[str] = []
    total = 0
    for p in sorted(lib.rglob("*.py")):
        if "test" in p.parts or "site-packages" in p.parts:
            continue
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for line in text.splitlines():
            if line.strip():
                lines.append(line)
                total += len(line) + 1
        if total >= max_bytes:
            break
    extra = [
        "Größe, naïve café, résumé, Ærøskøbing, Śląsk, İstanbul.",
        "Привет, как дела? Это тестовая строка на русском языке.",
        "这是一个用于训练分词器的中文句子。我想在苹果工作。",
        "これは日本語のテスト文です。東京は大きい都市です。",
        "한국어 문장도 조금 넣습니다. 안녕하세요.",
        "Emoji 🚀 😶‍🌫️ ✅ 🦙 and numbers 3 33 333 3.14159 1e-6",
    ]
    lines.extend(extra * 50)
    return lines


# ---------------------------------------------------------------- tokenizers

def trained_split_bpe(pattern: str, nfc: bool) -> dict:
    """A byte-level BPE of TOKENIZER_VOCAB tokens trained on the corpus, its text split by `pattern` (isolated
    matches) before the bytes (NFC-normalised first when `nfc`): the tokenizer.json as a dict."""
    from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    return json.loads(tok.to_str())


def make_qwen3_tokenizer(folder: Path) -> None:
    j = trained_split_bpe(QWEN2_PRETOKENIZE_REGEX, nfc=True)
    vocab = j["model"]["vocab"]
    assert max(vocab.values()) < QWEN3_ADDED[0][0]
    # The added tokens sit at their real ids, in the model vocab too (a gap of unused ids before
    # them), so that they keep those ids when loaded; llama.cpp gets [PAD<i>] for the gap.
    added = []
    for tid, content, special in QWEN3_ADDED:
        vocab[content] = tid
        added.append(dict(id=tid, content=content, single_word=False, lstrip=False, rstrip=False,
                          normalized=False, special=special))
    j["added_tokens"] = added
    (folder / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False, indent=1), encoding="utf-8")
    tcfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t): dict(content=c, lstrip=False, normalized=False, rstrip=False,
                                              single_word=False, special=s) for t, c, s in QWEN3_ADDED},
        "bos_token": None,
        "chat_template": QWEN3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg, ensure_ascii=False, indent=1), encoding="utf-8")
    # check: ids as intended through transformers (what the converter uses)
    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(folder)
    ids = t.encode("hello<|im_start|>user\nworld<|im_end|></think>", add_special_tokens=False)
    assert 151644 in ids and 151645 in ids and 151668 in ids, ids
    assert max(t.get_vocab().values()) == 151668
    log(f"qwen3 tokenizer: {len(vocab)} entries (max id 151668), sample ids {ids}")


def make_olmoe_tokenizer(folder: Path) -> None:
    """Byte-level BPE in GPT-NeoX form (NFC, ByteLevel with GPT-2's regex), OLMoE's special ids."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # the trainer puts its special tokens first: |||IP_ADDRESS||| 0, <|padding|> 1, as in OLMoE
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[c for _, c, _ in OLMOE_FRONT], show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for tid, content, _ in OLMOE_FRONT:
        assert vocab[content] == tid, (content, vocab[content])
    assert max(vocab.values()) < OLMOE_ADDED[0][0]
    added = []
    for tid, content, special in OLMOE_FRONT + OLMOE_ADDED:
        vocab[content] = tid
        added.append(dict(id=tid, content=content, single_word=False, lstrip=False, rstrip=False,
                          normalized=False, special=special))
    j["added_tokens"] = added
    (folder / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False, indent=1), encoding="utf-8")
    tcfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {str(t): dict(content=c, lstrip=False, normalized=False, rstrip=False,
                                              single_word=False, special=sp)
                                 for t, c, sp in OLMOE_FRONT + OLMOE_ADDED},
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|endoftext|>",
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<|padding|>",
        "tokenizer_class": "GPTNeoXTokenizer",
        "unk_token": None,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg, ensure_ascii=False, indent=1), encoding="utf-8")
    # check: transformers (what the converter uses) gives the ids the raw tokenizer gives, specials at their ids
    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(folder)
    tk = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for text in ["Hello world 123 🚀", "def foo(x):\n    return x  +  1\n", "  two\tspaces", "Größe 这是 it's"]:
        assert t.encode(text, add_special_tokens=False) == tk.encode(text, add_special_tokens=False).ids, text
    ids = t.encode("hello<|endoftext|> world<|padding|>", add_special_tokens=False)
    assert 50279 in ids and 1 in ids, ids
    assert max(t.get_vocab().values()) == 50279
    log(f"olmoe tokenizer: {len(vocab)} entries (max id 50279), sample ids {ids}")


def make_gptoss_tokenizer(folder: Path) -> None:
    """Byte-level BPE with o200k's pre-tokenizer regex and the harmony special tokens at their real ids."""
    j = trained_split_bpe(O200K_PRETOKENIZE_REGEX, nfc=False)
    vocab = j["model"]["vocab"]
    assert max(vocab.values()) < GPTOSS_ADDED[0][0]
    added = []
    for tid, content in GPTOSS_ADDED:
        vocab[content] = tid
        added.append(dict(id=tid, content=content, single_word=False, lstrip=False, rstrip=False,
                          normalized=False, special=True))
    j["added_tokens"] = added
    (folder / "tokenizer.json").write_text(json.dumps(j, ensure_ascii=False, indent=1), encoding="utf-8")
    tcfg = {
        "added_tokens_decoder": {str(t): dict(content=c, lstrip=False, normalized=False, rstrip=False,
                                              single_word=False, special=True) for t, c in GPTOSS_ADDED},
        "bos_token": "<|startoftext|>",
        "chat_template": GPTOSS_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|return|>",
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<|endoftext|>",
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg, ensure_ascii=False, indent=1), encoding="utf-8")
    from transformers import AutoTokenizer
    t = AutoTokenizer.from_pretrained(folder)
    ids = t.encode("hello<|start|>user<|message|>world<|end|><|return|>", add_special_tokens=False)
    assert 200006 in ids and 200008 in ids and 200007 in ids and 200002 in ids, ids
    assert max(t.get_vocab().values()) == 200018
    log(f"gptoss tokenizer: {len(vocab)} entries (max id 200018), sample ids {ids}")


def make_gemma3_tokenizer(folder: Path) -> None:
    import sentencepiece as spm

    user_defined = ["<mask>", "[@BOS@]"] + [f"<unused{i}>" for i in range(99)] + ["<start_of_turn>", "<end_of_turn>"]
    prefix = folder / "tokenizer"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_lines()),
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=TOKENIZER_VOCAB,
        byte_fallback=True,
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        split_digits=True,
        allow_whitespace_only_pieces=True,
        character_coverage=0.9995,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3,
        pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>",
        user_defined_symbols=user_defined,
        max_sentence_length=16384,
        num_threads=1,
        minloglevel=2,
    )
    (folder / "tokenizer.vocab").unlink(missing_ok=True)
    sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    assert sp.piece_to_id("<start_of_turn>") == 105 and sp.piece_to_id("<end_of_turn>") == 106
    assert sp.bos_id() == 2 and sp.eos_id() == 1 and sp.pad_id() == 0 and sp.unk_id() == 3
    specials = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 5: "[@BOS@]",
                105: "<start_of_turn>", 106: "<end_of_turn>"}
    tcfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "added_tokens_decoder": {str(i): dict(content=c, lstrip=False, normalized=False, rstrip=False,
                                              single_word=False, special=True) for i, c in specials.items()},
        "bos_token": "<bos>",
        "chat_template": GEMMA3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<eos>",
        "model_max_length": 1000000000000000019884624838656,
        "pad_token": "<pad>",
        "spaces_between_special_tokens": False,
        "tokenizer_class": "GemmaTokenizer",
        "unk_token": "<unk>",
        "use_default_system_prompt": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg, ensure_ascii=False, indent=1), encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>"}, indent=1))
    # tokenizer.json too, as the real folder has: transformers' conversion of tokenizer.model. The
    # llama.cpp converter still reads the vocabulary from tokenizer.model, but without tokenizer.json
    # its SpecialVocab finds no eos id (config.json's eos_token_id is a list, [1, 106], which it skips).
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    tmp = folder / "_hf_tokenizer"
    shutil.rmtree(tmp, ignore_errors=True)
    AutoTokenizer.from_pretrained(folder).save_pretrained(tmp)
    shutil.copy(tmp / "tokenizer.json", folder / "tokenizer.json")
    shutil.rmtree(tmp)
    tk = Tokenizer.from_file(str(folder / "tokenizer.json"))
    for text in ["Hello world 123 🚀", "def foo(x):\n    return x  +  1\n", "  two\tspaces",
                 "Größe 这是 <start_of_turn>user\nhi<end_of_turn>"]:
        assert tk.encode(text, add_special_tokens=False).ids == sp.encode(text), text
    log(f"gemma3 tokenizer: {sp.get_piece_size()} pieces, sample {sp.encode('Hello world 123 🚀')}")


# ---------------------------------------------------------------- weights

def make_hf_folder(key: str, folder: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.set_num_threads(1)
    spec = MODELS[key]
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    hub_cfg = spec["config"]
    (tmp / "config.json").write_text(json.dumps(hub_cfg, indent=2) + "\n")
    cfg = AutoConfig.from_pretrained(tmp)
    log(f"{key}: building {cfg.architectures[0]} (seed {SEED}) ...")
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model.eval()
    moe = is_moe(hub_cfg)
    if moe:
        # Routers: seeded normal(0, initializer_range), whatever transformers' init did (their
        # parameters are created as zeros; a zero router sends every token to the same experts).
        gen = torch.Generator().manual_seed(SEED + 1)
        routers = [(n, m) for n, m in model.named_modules() if n.endswith(("mlp.gate", "mlp.router"))]
        assert len(routers) == hub_cfg["num_hidden_layers"], [n for n, _ in routers]
        with torch.no_grad():
            for _, m in routers:
                m.weight.normal_(0.0, hub_cfg["initializer_range"], generator=gen)
        log(f"{key}: {len(routers)} routers {tuple(routers[0][1].weight.shape)} re-drawn, "
            f"std {routers[0][1].weight.float().std().item():.4f}")
    n = sum(p.numel() for p in model.parameters())
    log(f"{key}: {n / 1e6:.1f} M parameters ({next(model.parameters()).dtype}); saving bf16 safetensors")
    model.save_pretrained(tmp, safe_serialization=True)
    # put the Hub's config.json back (save_pretrained writes the transformers-5 form)
    (tmp / "config.json").write_text(json.dumps(hub_cfg, indent=2) + "\n")
    gen_cfg = {k: hub_cfg[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if hub_cfg.get(k) is not None}
    (tmp / "generation_config.json").write_text(json.dumps(gen_cfg, indent=2) + "\n")
    cut = f" (num_hidden_layers cut to {hub_cfg['num_hidden_layers']})" if moe else ""
    (tmp / "README.md").write_text(
        f"Random weights (transformers init, torch seed {SEED}) with the config of {spec['hub']}{cut}; "
        "small trained tokenizer. For speed benchmarks only; made by make_bench_models.py.\n")
    {"qwen3": make_qwen3_tokenizer, "gemma3": make_gemma3_tokenizer, "olmoe": make_olmoe_tokenizer,
     "gptoss": make_gptoss_tokenizer}[spec["tokenizer"]](tmp)
    # sanity: a short forward pass stays finite (and, for MoE, routes to many experts)
    with torch.no_grad():
        ids = torch.tensor([[2, 100, 200, 300, 400, 500, 600, 700]])
        kw = dict(output_router_logits=True) if moe else {}
        out = model(ids, output_hidden_states=True, **kw)
        logits = out.logits.float()
        hs = [h.float().std().item() for h in out.hidden_states]
    assert torch.isfinite(logits).all(), "non-finite logits"
    log(f"{key}: forward ok; hidden-state std per layer {hs[0]:.3g} .. {hs[-1]:.3g}, "
        f"logits std {logits.std().item():.3g}")
    if moe:
        k = hub_cfg["num_experts_per_tok"]
        picked = [sorted(set(rl.float().topk(k, dim=-1).indices.flatten().tolist())) for rl in out.router_logits]
        counts = [len(p) for p in picked]
        log(f"{key}: distinct experts picked by the {ids.shape[1]} tokens (top-{k}) per layer: {counts}")
        assert min(counts) > k, "routing looks degenerate"
    del model, out
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


# ---------------------------------------------------------------- conversion

# argv: llama.cpp source dir, BPE pre-tokenizer name to report, converter arguments...
CONVERT_WRAPPER = r"""
import runpy, sys
src, pre = sys.argv[1], sys.argv[2]
sys.path.insert(0, src)
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [src + "/convert_hf_to_gguf.py"] + sys.argv[3:]
runpy.run_path(src + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def convert(key: str, folder: Path, outfile: Path, outtype: str, llama_src: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(llama_src / "gguf-py"))
    tmp = outfile.with_name(outfile.name + ".tmp")
    args = [str(folder), "--outtype", outtype, "--outfile", str(tmp)] + MODELS[key].get("convert_args", [])
    pre = MODELS[key]["pre"]
    if pre is not None:  # BPE: the pre-tokenizer hash cannot match a new vocabulary
        cmd = [sys.executable, "-c", CONVERT_WRAPPER, str(llama_src), pre] + args
    else:
        cmd = [sys.executable, str(llama_src / "convert_hf_to_gguf.py")] + args
    run_heavy(cmd, env=env, logfile=logdir() / (outfile.stem + ".convert.log"),
              step=(MODELS[key]["name"], f"convert -> {outtype}"))
    tmp.rename(outfile)


def quantize(src: Path, dst: Path, qtype: str, llama_bin: Path, model: str) -> str:
    tmp = dst.with_name(dst.name + ".tmp")
    out = run_heavy([llama_bin / "llama-quantize", src, tmp, qtype], logfile=logdir() / (dst.stem + ".quantize.log"),
                    step=(model, f"llama-quantize {qtype}"))
    tmp.rename(dst)
    return out


def logdir() -> Path:
    d = ARGS.out / "logs"
    d.mkdir(parents=True, exist_ok=True)
    return d


def gguf_reader(path: Path):
    if str(ARGS.llama_src / "gguf-py") not in sys.path:
        sys.path.insert(0, str(ARGS.llama_src / "gguf-py"))
    import gguf
    return gguf.GGUFReader(str(path))


KEY_FIELDS = ["context_length", "embedding_length", "feed_forward_length", "block_count", "attention.head_count",
              "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.freq_base",
              "rope.freq_base_swa", "attention.sliding_window", "attention.layer_norm_rms_epsilon",
              "tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
              "tokenizer.ggml.eos_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token",
              "tokenizer.ggml.add_space_prefix"]
# printed (or "(absent)") when the file has <arch>.expert_count; any other <arch>.expert* key is printed too
EXPERT_FIELDS = ["expert_count", "expert_used_count", "expert_feed_forward_length",
                 "expert_shared_feed_forward_length", "expert_shared_count", "expert_weights_norm",
                 "expert_weights_scale", "expert_gating_func"]


def metadata_lines(path: Path) -> list[str]:
    r = gguf_reader(path)
    arch = r.fields["general.architecture"].contents()
    out = [f"general.architecture = {arch}",
           f"tokenizer.ggml.tokens: {len(r.fields['tokenizer.ggml.tokens'].data)} entries"]
    for k in KEY_FIELDS:
        name = k if k.startswith("tokenizer.") else f"{arch}.{k}"
        if name in r.fields:
            out.append(f"{name} = {r.fields[name].contents()}")
        else:
            out.append(f"{name}: (absent)")
    if f"{arch}.expert_count" in r.fields:
        names = [f"{arch}.{k}" for k in EXPERT_FIELDS]
        names += sorted(k for k in r.fields if k.startswith(f"{arch}.expert") and k not in names)
        for name in names:
            out.append(f"{name} = {r.fields[name].contents()}" if name in r.fields else f"{name}: (absent)")
    return out


def tensor_types(path: Path) -> dict:
    r = gguf_reader(path)
    counts: dict[str, int] = {}
    per: list[tuple[str, str, list[int]]] = []
    for t in r.tensors:
        ty = t.tensor_type.name
        counts[ty] = counts.get(ty, 0) + 1
        per.append((t.name, ty, [int(x) for x in t.shape]))
    return dict(counts=counts, tensors=per)


def summarize_types(info: dict) -> list[str]:
    """Group tensors by role (name without the block number) and type."""
    groups: dict[tuple[str, str, tuple], list[int]] = {}
    roles_types: dict[str, set] = {}
    for name, ty, shape in info["tensors"]:
        m = re.match(r"^blk\.(\d+)\.", name)
        role = re.sub(r"^blk\.\d+\.", "blk.*.", name)
        groups.setdefault((role, ty, tuple(shape)), []).append(int(m.group(1)) if m else -1)
        roles_types.setdefault(role, set()).add(ty)
    lines = []
    for (role, ty, shape), blks in sorted(groups.items()):
        where = ""
        if len(roles_types[role]) > 1:  # mixed types for one role: say which blocks
            where = " blocks " + ",".join(str(b) for b in sorted(blks))
        lines.append(f"  {role:32s} {ty:6s} x{len(blks):<3d} ne={list(shape)}{where}")
    return lines


def reset_peak_rss() -> None:
    """Reset this process's VmHWM (Linux: 5 > /proc/self/clear_refs), so that each build's peak is its own."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_mib() -> float:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def old_sections(path: Path) -> dict[str, list[str]]:
    """The '## <name>' sections of an existing REPORT.md, by name."""
    secs: dict[str, list[str]] = {}
    cur = None
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("## "):
                cur = line[3:].strip()
                secs[cur] = []
            if cur is not None:
                secs[cur].append(line)
    for lines in secs.values():
        while lines and not lines[-1].strip():
            lines.pop()
    return secs


def model_section(key: str) -> list[str]:
    spec = MODELS[key]
    name = spec["name"]
    out: Path = ARGS.out
    f_bf16, f_q8, f_q4 = out / f"{name}-bf16.gguf", out / f"{name}-q8_0.gguf", quant_file(key)
    quants = [f_q8, f_q4] if spec["q8"] else [f_q4]
    cut = f", num_hidden_layers {spec['config']['num_hidden_layers']}" if is_moe(spec["config"]) else ""
    report = [f"## {name}", "", f"{spec['hub']}'s config{cut}; section written {time.strftime('%Y-%m-%d %H:%M:%S')}.", ""]
    for f in [f_bf16] + quants:
        report.append(f"- `{f}`: {f.stat().st_size:,} bytes ({f.stat().st_size / 2**20:.1f} MiB)")
    if not spec["q8"]:
        report.append("- (no Q8_0 for this model: skipped to save time and disk)")
    report.append("")
    for f in (quants if spec["q8"] else [f_bf16] + quants):  # no Q8_0: show the converter's types
        info = tensor_types(f)
        report.append(f"### tensor types in {f.name}: " +
                      ", ".join(f"{k} {v}" for k, v in sorted(info["counts"].items())))
        report += ["```"] + summarize_types(info) + ["```", ""]
        if f == f_q4 and spec.get("quant", "Q4_K_M") == "Q4_K_M":
            notk = sorted({(re.sub(r"^blk\.\d+\.", "blk.*.", n), ty) for n, ty, _ in info["tensors"]
                           if ty not in ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "F32")})
            report.append("Quantized tensors that are not K-quants: " +
                          (", ".join(f"{n} ({ty})" for n, ty in notk) or "none"))
            qlog = logdir() / (f.stem + ".quantize.log")
            if qlog.exists():
                fb = [l for l in qlog.read_text().splitlines() if "fallback" in l and "WARNING" in l]
                report += [f"llama-quantize: {fb[0].split(': ', 1)[-1].strip()}" if fb else
                           "llama-quantize: no fallbacks"]
            report.append("")
    report += [f"### metadata ({f_q4.name})", "```"] + metadata_lines(f_q4) + ["```", ""]
    for f in quants:
        blog = logdir() / (f.stem + ".bench.log")
        if not ARGS.no_bench:
            txt = run_heavy([ARGS.llama_bin / "llama-bench", "-m", f, "-t", "1", "-p", "16", "-n", "4", "-r", "1"],
                            logfile=blog, step=(name, f"llama-bench {f.name}"))
            when = ""
        elif blog.exists():  # --no-bench: keep the last run's table
            txt = blog.read_text()
            when = f", from {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(blog.stat().st_mtime))}"
        else:
            continue
        table = [l for l in txt.splitlines() if l.startswith("|")]
        print("\n".join(table), flush=True)
        report += [f"### llama-bench {f.name} (-t 1 -p 16 -n 4 -r 1{when})", "```"] + table + ["```", ""]
    # step timings: this run's, merged into those kept from earlier runs (logs/<name>.steps.json)
    sfile = logdir() / f"{name}.steps.json"
    steps = json.loads(sfile.read_text()) if sfile.exists() else {}
    for _, st, wall, wait, rss, end in (s for s in STEPS if s[0] == name):
        steps[st] = dict(wall_s=round(wall, 1), lock_wait_s=round(wait, 1), peak_rss_mib=round(rss),
                         date=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(end)))
    if steps:
        sfile.write_text(json.dumps(steps, indent=1) + "\n")
        report += ["### steps (wall time holding the CPU lock, wait for the lock, peak RSS of the step, when)", "```"]
        report += [f"  {st:44s} {v['wall_s']:8.1f} s  (+{v['lock_wait_s']:.1f} s wait)  "
                   f"peak RSS {v['peak_rss_mib']:>6,} MiB  {v['date']}" for st, v in steps.items()]
        report += ["```", ""]
    while report and not report[-1].strip():
        report.pop()
    return report


def main() -> None:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--models", default="qwen3,gemma3", help="comma-separated, of: " + ",".join(MODELS))
    ap.add_argument("--llama-src", type=Path, default=DEFAULT_LLAMA_SRC)
    ap.add_argument("--llama-bin", type=Path, default=DEFAULT_LLAMA_BIN)
    ap.add_argument("--force", action="store_true", help="redo steps whose outputs exist")
    ap.add_argument("--no-bench", action="store_true", help="skip the llama-bench smoke runs")
    ARGS = ap.parse_args()
    out: Path = ARGS.out
    out.mkdir(parents=True, exist_ok=True)
    keys = [k.strip() for k in ARGS.models.split(",") if k.strip()]
    for key in keys:
        if key not in MODELS:
            raise SystemExit(f"unknown model {key!r}; known: {', '.join(MODELS)}")
    sections = old_sections(out / "REPORT.md")

    for key in keys:
        spec = MODELS[key]
        name = spec["name"]
        folder = out / f"{name}-hf"
        f_bf16 = out / f"{name}-bf16.gguf"
        f_q8 = out / f"{name}-q8_0.gguf"
        f_q4 = quant_file(key)

        have_weights = (folder / "model.safetensors").exists() or (folder / "model.safetensors.index.json").exists()
        if ARGS.force or not have_weights:
            t0 = time.time()
            with cpu_lock():
                t1 = time.time()
                reset_peak_rss()
                make_hf_folder(key, folder)
                note_step(name, "HF folder (init, save, tokenizer, forward)", time.time() - t1, t1 - t0,
                          peak_rss_mib())
        if ARGS.force or not f_bf16.exists():
            convert(key, folder, f_bf16, "bf16", ARGS.llama_src)
        if spec["q8"] and (ARGS.force or not f_q8.exists()):
            convert(key, folder, f_q8, "q8_0", ARGS.llama_src)
        if ARGS.force or not f_q4.exists():
            quantize(f_bf16, f_q4, spec.get("quant", "Q4_K_M"), ARGS.llama_bin, name)
        sections[name] = model_section(key)

    report = ["# Benchmark models (random weights, real shapes)", "",
              f"Made by make_bench_models.py; last updated {time.strftime('%Y-%m-%d %H:%M:%S')} "
              f"(models {', '.join(MODELS[k]['name'] for k in keys)}); each model's section is rewritten by "
              f"the run that makes it. llama.cpp source {ARGS.llama_src}, tools {ARGS.llama_bin}.", ""]
    order = [MODELS[k]["name"] for k in MODELS] + [n for n in sections if n not in [m["name"] for m in MODELS.values()]]
    for n in order:
        if n in sections:
            report += sections[n] + [""]
    (out / "REPORT.md").write_text("\n".join(report).rstrip("\n") + "\n")
    log(f"wrote {out / 'REPORT.md'}")


ARGS: argparse.Namespace
if __name__ == "__main__":
    main()
