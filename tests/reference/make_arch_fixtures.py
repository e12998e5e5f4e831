#!/usr/bin/env python3
"""Fixtures for the newer decoder architectures (Qwen3, Gemma 2, Gemma 3, Phi-3 / Phi-4-mini, SmolLM3,
Llama-2 with a SentencePiece vocabulary), made by transformers, sentencepiece, tokenizers and llama.cpp's converter.

Run (from any directory; ~2-3 minutes on one thread; needs the venv of tests/reference/requirements.txt plus
sentencepiece and protobuf, and the llama.cpp source of the llama-cpp-python 0.3.36 sdist from PyPI, unpacked at
/root/peers/llama_cpp_python-0.3.36 or named by QKV_LLAMA_CPP=<dir of its vendor/llama.cpp>):

    /root/qkv-venv/bin/python tests/reference/make_arch_fixtures.py

Inputs: tests/fixtures/text/kjv_genesis.txt (the training text of every tokenizer and model); from the llama.cpp
source: convert_hf_to_gguf.py + conversion/ + gguf-py/ (run in a subprocess with its own gguf-py first on the path),
models/templates/*.jinja and tests/test-chat-template.cpp (chat templates).

Outputs (tests/fixtures/arch/, ~840 KB of files, rewritten from scratch on every run):
  qwen3/    Qwen3ForCausalLM, bfloat16. 2 layers, hidden 32, 4 heads on 2 key/value heads, head_dim 16 (not
            hidden/heads = 8), q_norm/k_norm, intermediate 32, rope_theta 1e6, tied embeddings, vocab 301.
            Byte-level BPE (NFC + Qwen2's Split regex + ByteLevel), specials after the vocabulary:
            <|endoftext|> <|im_start|> <|im_end|> (special) and <tool_call> </tool_call> <tool_response>
            </tool_response> <think> </think> (not special, as in Qwen3). Template: Qwen-Qwen3-0.6B.jinja.
  gemma2/   Gemma2ForCausalLM, bfloat16. 2 layers (sliding_attention, full_attention), hidden 32, 4 heads on 2,
            head_dim 16, query_pre_attn_scalar 8 (= hidden/heads, the 27B rule; not head_dim), attn_logit_softcapping
            5.0, final_logit_softcapping 3.0, sliding_window 8, gelu_pytorch_tanh, intermediate 32, tied, vocab 336.
            SentencePiece BPE (below). Template: google-gemma-2-2b-it.jinja.
  gemma3/   Gemma3ForCausalLM (model_type gemma3_text), float16. 2 layers, explicit layer_types [sliding_attention,
            full_attention] (instead of the real five-to-one pattern), hidden 32, 2 heads on 1,
            head_dim 16, q_norm/k_norm, query_pre_attn_scalar 16, sliding_window 8, rope_parameters per layer type
            (sliding: default, theta 1e4; full: linear factor 8, theta 1e6, as Gemma 3 4B+), no softcapping,
            intermediate 32, tied. The gemma2 tokenizer files. Template: google-gemma-2-2b-it.jinja (the real Gemma 3
            template is not in the llama.cpp sources used here).
  phi3/     Phi3ForCausalLM, bfloat16. 2 layers, hidden 32, 2 heads on 1 (head_dim 16), fused qkv_proj and
            gate_up_proj, partial_rotary_factor 0.75 (12 rotary dims), longrope with 6 short / 6 long factors,
            original_max_position_embeddings 32 and max_position_embeddings 128 (so attention factor
            sqrt(1 + ln 4 / ln 32)), sliding_window 16, intermediate 32, tied like Phi-4-mini, vocab 300.
            Byte-level BPE with the GPT-4o / o200k Split regex of Phi-4-mini (tokenizer_class GPT2Tokenizer, which
            transformers 5 replaces by TokenizersBackend for model_type phi3, so the regex is honoured), specials
            <|endoftext|> <|system|> <|user|> <|assistant|> <|end|>. Template: microsoft-Phi-3.5-mini-instruct.jinja.
  smollm3/  SmolLM3ForCausalLM, bfloat16. 4 layers with no_rope_layers [1, 1, 1, 0] (the last layer has no RoPE: the
            real every-4th rule, the only one a GGUF can express), hidden 32, 4 heads on 2, rope_theta 5e6,
            intermediate 32, tied, vocab 300. Byte-level BPE with Llama 3's Split regex (ignore_merges), specials
            <|begin_of_text|> <|end_of_text|> <|im_start|> <|im_end|> <think> </think>; no BOS is added.
            Template: HuggingFaceTB-SmolLM3-3B.jinja (Unsloth's edit of it, as shipped in llama.cpp).
  llama2/   LlamaForCausalLM, float16, sharded (model.safetensors.index.json + 2 files). 2 layers, hidden 32, 4 heads
            (no GQA), default RoPE theta 1e4, rms_norm_eps 1e-5, untied lm_head, intermediate 32, vocab 336.
            SentencePiece BPE with add_dummy_prefix true; <unk>=0 <s>=1 </s>=2; BOS added. Template:
            mistralai/Mistral-7B-Instruct-v0.2's [INST] template (read from llama.cpp's tests/test-chat-template.cpp;
            identical to tests/fixtures/chat_templates/mistral.jinja).
  <arch>.gguf  each folder (its bf16 / f16 weights) converted by llama.cpp's convert_hf_to_gguf.py, every one
            with --outtype q8_0 (norms and rope factor tensors stay F32). Converter patches, applied in the
            subprocess (CONVERT_BOOTSTRAP): the BPE pre-tokenizer is named instead of being recognised by its
            hash of sample ids (a tiny trained vocabulary matches no known hash): qwen3 "qwen2", smollm3 "llama-bpe",
            phi3 "gpt-4o" (get_vocab_base_pre); Gemma3Model writes no sliding-window pattern (llama.cpp then assumes
            five sliding + one full layer), so gemma3.attention.sliding_window_pattern = [true, false] (one entry per
            layer, from layer_types) is added in the bool-array form llama.cpp's load_swa_pattern reads.
            general.name is "qkv-fixture-<arch>", except phi3's "qkv-fixture-phi4-mini": llama.cpp applies a Phi-3
            vocabulary rule (RSTRIP on special tokens and a lookup of "</s>", which this vocabulary lacks, so loading
            fails) to any general.name containing "phi3".
  reference.json  per variant (<arch> = the folder, <arch>_gguf = the GGUF): texts and prompts (token ids; a short
            and a longer Genesis excerpt through the tokenizer with its default special tokens, and a one-message
            chat rendered by apply_chat_template(add_generation_prompt=True), enable_thinking=False for qwen3 and
            smollm3, tokenized with add_special_tokens=False); the greedy continuation of each (generate(
            do_sample=False), 40 new tokens, min_new_tokens 40, eos_token_id None, KV cache, one prompt at a time),
            the top-2 logit margin of every step, the float32 error of the last-position logits (lp_err), the route
            of the reference and the training seed. Every prompt of every variant is longer than each sliding window;
            phi3's short prompt + 40 tokens crosses original_max_position_embeddings (32) and its long prompt starts
            beyond it.
  logits.safetensors  per variant and prompt: the float64 logits of the last prompt position, rounded to float32
            for the size (<name>.p<i>.logits [V]; the rounding, <= 1e-6 here, is far below the tests' 1e-5 floor), and
            max |float32 - float64| over the float64 ones (<name>.p<i>.err, scalar float64).
  tokenizer_cases.json  per tokenizer (qwen3, gemma = gemma2 + gemma3, phi3, smollm3, llama2): 44 texts (spaces,
            tabs, \n, \r\n, \n\n, digits, punctuation, NFC / NFD accents, emoji with ZWJ, CJK and other scripts
            through byte fallback, special tokens inside text, "" and " ") with AutoTokenizer's ids
            (add_special_tokens=False), tokenizer.decode(ids, skip_special_tokens=False), the ids of
            sentencepiece.SentencePieceProcessor on tokenizer.model for the SentencePiece ones (ids_sentencepiece),
            the ids of tokenizers.Tokenizer.from_file(tokenizer.json) where they differ from AutoTokenizer's
            (ids_tokenizer_json), and the list of disagreements. Known ones: SentencePiece does not split control
            tokens written in text (<s>, </s>, <bos>) and, for llama2, HF's Metaspace(prepend_scheme "first",
            legacy=False) adds no dummy prefix before text that already starts with a space (" " -> "\u2581" where
            SentencePiece gives "\u2581\u2581").

Tokenizers. Byte-level BPEs: Hugging Face BpeTrainer (min frequency 2, the 256-byte alphabet, ~40 merges) on the
text lines, the family's Split regex + ByteLevel(use_regex=False), specials appended after the vocabulary.
SentencePiece (gemma2/gemma3, llama2): sentencepiece's BPE trainer (byte_fallback true, split_digits,
identity normalization, no whitespace trimming, character_coverage 0.995 so rare letters go through byte fallback,
one thread); Gemma style: add_dummy_prefix false, <pad>=0 <eos>=1 <bos>=2 <unk>=3, user-defined <mask>=4
<start_of_turn>=5 <end_of_turn>=6; Llama style: add_dummy_prefix true, <unk>=0 <s>=1 </s>=2. tokenizer.json is
transformers' conversion of tokenizer.model (GemmaTokenizer / LlamaTokenizer(legacy=False), i.e. its SpmConverter).
Every tokenizer_config.json carries the family's real chat template (chat_template key) and is compact JSON, as is
tokenizer.json.

Models. transformers' own classes and configs, trained 300 AdamW steps (lr 5e-3 cosine to 5e-4, batch 16 x 64
tokens, a BOS first where the family adds one) on the tokenized text, one thread, seeded; saved with
save_pretrained in the folder's dtype (generation_config.json removed). If any greedy step of the folder or GGUF
variant has a top-2 margin <= 1e-3, the architecture is retrained with the next seed (seed + 100); the seed used is
recorded.

References. Folder: AutoModelForCausalLM.from_pretrained(folder, dtype=float32, attn_implementation="eager"), i.e.
the weights as saved (bf16 / f16 rounded). GGUF: transformers' GGUF loader is tried first and kept only when its
logits equal the file's (llama2_gguf); otherwise ("gguf-py dequantize + transformers class", recorded with the
loader's failure: qwen3 (head_dim not read), gemma2 / gemma3 / phi3 (softcaps, query_pre_attn_scalar, layer types,
rope scaling, partial rotary and longrope factors not read), smollm3 (architecture unsupported)) every tensor is
dequantized with gguf-py, the converter's changes are undone (attn_q / attn_k row permutation for llama2 and smollm3,
Gemma norms stored as 1 + w) and loaded into the transformers class with the config the GGUF metadata describes,
which the script checks against the folder's. Where the metadata has no value, llama.cpp's implicit rule is used:
gemma2's query_pre_attn_scalar is not in the file and llama.cpp scales by 1/sqrt(head_dim) (except for the 46-layer
27B), so gemma2_gguf uses query_pre_attn_scalar = head_dim = 16, unlike the folder's 8 (recorded in "notes");
gemma2's rope theta is not written (llama.cpp default 10000); smollm3's NoPE layers are llama.cpp's every 4th layer.
Semantics worth knowing: transformers' longrope picks the factor set per forward pass from the current sequence
length (long when the sequence is longer than original_max_position_embeddings) and Phi3ForCausalLM drops the KV
cache when generation crosses that length, so every logit comes from a pass over the whole sequence with one factor
set; llama.cpp instead picks by the context size and currently disables Phi-3's sliding window.

float64. transformers computes RMSNorm, the RoPE tables and the eager softmax in float32 on purpose, and builds
Gemma's sqrt(hidden) embedding scale as a float32 buffer, so model.double() alone is not a float64 model. The
reference float64 model is the same class rebuilt with float64 as the default dtype under a TorchFunctionMode that
turns every request for float32 / float16 / bfloat16 into float64 (F64Mode), loaded with the float32 weights, and
run under a TorchDispatchMode that fails if any op produces a non-float64 floating tensor.

Not written: the optional qwen3_q4_k_m.gguf. K-quants need every matrix row length to be a multiple of 256 (hidden,
heads x head_dim and intermediate of 256), and the smallest such qwen3 (1 layer, a 300-token vocabulary) is ~470k
parameters, ~300 KB as Q4_K_M (token_embd / attn_v / ffn_down in Q6_K), over the ~250 KB allowed.

Deterministic: re-running gives byte-identical files (fixed seeds, one thread, deterministic algorithms, sorted
safetensors keys, sorted JSON keys where the script writes the JSON) with the same torch / transformers /
tokenizers / sentencepiece builds and llama.cpp source (versions in reference.json's _meta).
"""
from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, processors, trainers  # noqa: E402
from tokenizers import models as tok_models  # noqa: E402
from tokenizers import pre_tokenizers as P  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, Gemma2Config, Gemma2ForCausalLM,  # noqa: E402
                          Gemma3ForCausalLM, Gemma3TextConfig, GemmaTokenizer, LlamaConfig, LlamaForCausalLM,
                          LlamaTokenizer, Phi3Config, Phi3ForCausalLM, Qwen3Config, Qwen3ForCausalLM, SmolLM3Config,
                          SmolLM3ForCausalLM)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "fixtures" / "arch"
TEXT = ROOT / "tests" / "fixtures" / "text" / "kjv_genesis.txt"
LLAMA_CPP = Path(os.environ.get("QKV_LLAMA_CPP", "/root/peers/llama_cpp_python-0.3.36/vendor/llama.cpp"))
TEMPLATES = LLAMA_CPP / "models" / "templates"
NEW = 40                 # greedy tokens per prompt
MIN_MARGIN = 1e-3        # every greedy step's top-1 / top-2 logit gap must exceed this
MAX_TRIES = 8            # training seeds tried per architecture before giving up

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
transformers.logging.set_verbosity_error()

# Pre-tokenizer regexes, as written in the families' tokenizer.json files (llama.cpp's llama-vocab.cpp quotes
# the Qwen2 and GPT-4o ones as "original regex from tokenizer.json").
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def sdist_template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


def mistral_v02_template() -> str:
    """mistralai/Mistral-7B-Instruct-v0.2's [INST] template as quoted in llama.cpp's tests/test-chat-template.cpp
    (the same text as tests/fixtures/chat_templates/mistral.jinja)."""
    src = (LLAMA_CPP / "tests" / "test-chat-template.cpp").read_text(encoding="utf-8")
    m = re.search(r'\.name= \*/ "mistralai/Mistral-7B-Instruct-v0\.2 \(NOTE: Old pre-v1 without a system prompt\)",\s*'
                  r'/\* \.template_str= \*/ "((?:[^"\\]|\\.)*)"', src)
    assert m, "Mistral v0.2 template not found in test-chat-template.cpp"
    text = json.loads('"' + m.group(1) + '"')
    repo_copy = ROOT / "tests" / "fixtures" / "chat_templates" / "mistral.jinja"
    if repo_copy.exists():
        assert repo_copy.read_text(encoding="utf-8") == text, "mistral.jinja differs from llama.cpp's copy"
    return text


# ------------------------------------------------------------------------------------------------ tokenizers

def corpus_text() -> str:
    return TEXT.read_text(encoding="utf-8")


def corpus_lines() -> list[str]:
    return corpus_text().splitlines(keepends=True)


# name -> tokenizer description. "added": (content, special) in id order after the trained vocabulary.
TOKENIZERS = {
    "qwen3": dict(kind="bpe", regex=QWEN2, nfc=True, merges=36, ignore_merges=False, gguf_pre="qwen2",
                  added=[("<|endoftext|>", True), ("<|im_start|>", True), ("<|im_end|>", True),
                         ("<tool_call>", False), ("</tool_call>", False), ("<tool_response>", False),
                         ("</tool_response>", False), ("<think>", False), ("</think>", False)],
                  config=dict(tokenizer_class="Qwen2Tokenizer", bos_token=None, eos_token="<|im_end|>",
                              pad_token="<|endoftext|>", unk_token=None, add_bos_token=False),
                  template=("sdist", "Qwen-Qwen3-0.6B.jinja")),
    "smollm3": dict(kind="bpe", regex=LLAMA3, nfc=False, merges=38, ignore_merges=True, gguf_pre="llama-bpe",
                    added=[("<|begin_of_text|>", True), ("<|end_of_text|>", True), ("<|im_start|>", True),
                           ("<|im_end|>", True), ("<think>", False), ("</think>", False)],
                    config=dict(tokenizer_class="PreTrainedTokenizerFast", bos_token="<|begin_of_text|>",
                                eos_token="<|im_end|>", pad_token="<|im_end|>", unk_token=None, add_bos_token=False),
                    template=("sdist", "HuggingFaceTB-SmolLM3-3B.jinja")),
    "phi3": dict(kind="bpe", regex=O200K, nfc=False, merges=39, ignore_merges=False, gguf_pre="gpt-4o",
                 added=[("<|endoftext|>", True), ("<|system|>", True), ("<|user|>", True), ("<|assistant|>", True),
                        ("<|end|>", True)],
                 config=dict(tokenizer_class="GPT2Tokenizer", bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                             pad_token="<|endoftext|>", unk_token="<|endoftext|>", add_bos_token=False),
                 template=("sdist", "microsoft-Phi-3.5-mini-instruct.jinja")),
    "gemma": dict(kind="spm", vocab=336, dummy_prefix=False, user_defined=["<mask>", "<start_of_turn>", "<end_of_turn>"],
                  ids=dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3),
                  pieces=dict(pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>"),
                  config=dict(tokenizer_class="GemmaTokenizer", bos_token="<bos>", eos_token="<eos>",
                              pad_token="<pad>", unk_token="<unk>", mask_token="<mask>", add_bos_token=True,
                              add_eos_token=False),
                  special_extra=["<start_of_turn>", "<end_of_turn>"],
                  template=("sdist", "google-gemma-2-2b-it.jinja")),
    "llama2": dict(kind="spm", vocab=336, dummy_prefix=True, user_defined=[],
                   ids=dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1),
                   pieces=dict(unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>"),
                   config=dict(tokenizer_class="LlamaTokenizer", bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                               pad_token=None, add_bos_token=True, add_eos_token=False, legacy=False),
                   special_extra=[],
                   template=("mistral", None)),
}


def chat_template(desc) -> str:
    kind, name = desc["template"]
    return sdist_template(name) if kind == "sdist" else mistral_v02_template()


def train_bpe(desc) -> Tokenizer:
    """Byte-level BPE with the family's Split regex, trained with Hugging Face tokenizers (no specials in the
    trainer: the family's special tokens come after the vocabulary, as in the real files)."""
    tok = Tokenizer(tok_models.BPE(ignore_merges=desc["ignore_merges"]))
    if desc["nfc"]:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = P.Sequence([P.Split(Regex(desc["regex"]), behavior="isolated", invert=False),
                                    P.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=256 + desc["merges"], min_frequency=2, show_progress=False,
                                  initial_alphabet=P.ByteLevel.alphabet(), special_tokens=[])
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    for content, special in desc["added"]:
        t = AddedToken(content, normalized=False, special=special)
        (tok.add_special_tokens if special else tok.add_tokens)([t])
    return tok


def train_spm(desc) -> bytes:
    """SentencePiece BPE with byte fallback, trained by the sentencepiece library on the corpus lines."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus_text().splitlines()), model_writer=buf, model_type="bpe",
        vocab_size=desc["vocab"], byte_fallback=True, add_dummy_prefix=desc["dummy_prefix"],
        remove_extra_whitespaces=False, split_digits=True, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", character_coverage=0.995, num_threads=1, input_sentence_size=0,
        shuffle_input_sentence=False, minloglevel=2, user_defined_symbols=desc["user_defined"],
        **desc["ids"], **desc["pieces"])
    return buf.getvalue()


def added_tokens_decoder(tok: Tokenizer) -> dict:
    j = json.loads(tok.to_str())
    return {str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for a in j["added_tokens"]}


def write_tokenizer(name: str, folder: Path) -> None:
    """tokenizer.json (+ tokenizer.model) and tokenizer_config.json with the family's chat template."""
    desc = TOKENIZERS[name]
    cfg = dict(desc["config"])
    if desc["kind"] == "bpe":
        tok = train_bpe(desc)
    else:
        model = train_spm(desc)
        (folder / "tokenizer.model").write_bytes(model)
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "tokenizer.model").write_bytes(model)
            # transformers converts the SentencePiece model (its SpmConverter: GemmaTokenizer / LlamaTokenizer
            # with legacy=False) into the tokenizer.json pipeline.
            if desc["config"]["tokenizer_class"] == "GemmaTokenizer":
                hf = GemmaTokenizer.from_pretrained(tmp, add_bos_token=True, mask_token="<mask>")
            else:
                hf = LlamaTokenizer.from_pretrained(tmp, legacy=False, add_bos_token=True)
            tok = Tokenizer.from_str(hf.backend_tokenizer.to_str())
        if desc["special_extra"]:
            cfg["extra_special_tokens"] = list(desc["special_extra"])
    (folder / "tokenizer.json").write_text(tok.to_str(), encoding="utf-8")
    cfg["added_tokens_decoder"] = added_tokens_decoder(tok)
    cfg["chat_template"] = chat_template(desc)
    cfg["clean_up_tokenization_spaces"] = False
    cfg["model_max_length"] = 4096
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
                                                  + "\n", encoding="utf-8")


# ------------------------------------------------------------------------------------------------ models

GEMMA_TOK = "gemma"
ARCHS = {
    # name: tokenizer, model class, folder dtype, shard size, GGUF outtype, first training seed
    "qwen3": dict(tok="qwen3", cls=Qwen3ForCausalLM, dtype=torch.bfloat16, shard=None, outtype="q8_0", seed=11),
    "gemma2": dict(tok=GEMMA_TOK, cls=Gemma2ForCausalLM, dtype=torch.bfloat16, shard=None, outtype="q8_0", seed=21),
    "gemma3": dict(tok=GEMMA_TOK, cls=Gemma3ForCausalLM, dtype=torch.float16, shard=None, outtype="q8_0", seed=31),
    "phi3": dict(tok="phi3", cls=Phi3ForCausalLM, dtype=torch.bfloat16, shard=None, outtype="q8_0", seed=41),
    "smollm3": dict(tok="smollm3", cls=SmolLM3ForCausalLM, dtype=torch.bfloat16, shard=None, outtype="q8_0", seed=51),
    "llama2": dict(tok="llama2", cls=LlamaForCausalLM, dtype=torch.float16, shard="40KB", outtype="q8_0", seed=61),
}

# longrope factors (rotary dims 12 -> 6 each), distinct values, Phi-4-mini style (short ~1, long growing).
PHI3_SHORT = [1.0, 1.02, 1.05, 1.1, 1.2, 1.35]
PHI3_LONG = [1.0, 1.25, 1.75, 2.5, 4.0, 6.5]


def make_config(arch: str, tok) -> transformers.PretrainedConfig:
    V = len(tok)
    tid = tok.convert_tokens_to_ids
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=32, max_position_embeddings=256)
    if arch == "qwen3":
        return Qwen3Config(**common, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                           rms_norm_eps=1e-6, tie_word_embeddings=True,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
                           bos_token_id=tid("<|endoftext|>"), eos_token_id=tid("<|im_end|>"),
                           pad_token_id=tid("<|endoftext|>"))
    if arch == "gemma2":
        return Gemma2Config(**common, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                            query_pre_attn_scalar=8, attn_logit_softcapping=5.0, final_logit_softcapping=3.0,
                            sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                            hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, tie_word_embeddings=True,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                            pad_token_id=0, eos_token_id=1, bos_token_id=2)
    if arch == "gemma3":
        return Gemma3TextConfig(**common, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
                                layer_types=["sliding_attention", "full_attention"],
                                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                                 "full_attention": {"rope_type": "linear", "factor": 8.0,
                                                                    "rope_theta": 1000000.0}},
                                final_logit_softcapping=None, attn_logit_softcapping=None,
                                hidden_activation="gelu_pytorch_tanh", rms_norm_eps=1e-6, tie_word_embeddings=True,
                                pad_token_id=0, eos_token_id=1, bos_token_id=2)
    if arch == "phi3":
        return Phi3Config(**{**common, "max_position_embeddings": 128}, num_hidden_layers=2, num_attention_heads=2,
                          num_key_value_heads=1, original_max_position_embeddings=32, sliding_window=16,
                          rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
                                           "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG,
                                           "original_max_position_embeddings": 32},
                          rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=tid("<|endoftext|>"),
                          eos_token_id=tid("<|endoftext|>"), pad_token_id=tid("<|endoftext|>"))
    if arch == "smollm3":
        return SmolLM3Config(**common, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                             no_rope_layers=[1, 1, 1, 0], use_sliding_window=False, rms_norm_eps=1e-6,
                             tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0},
                             bos_token_id=tid("<|begin_of_text|>"), eos_token_id=tid("<|im_end|>"),
                             pad_token_id=tid("<|im_end|>"))
    if arch == "llama2":
        return LlamaConfig(**common, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                           rms_norm_eps=1e-5, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                           bos_token_id=1, eos_token_id=2)
    raise KeyError(arch)


def train_model(model, ids: list[int], bos: int | None, seed: int, steps=300, seq=64, batch=16, lr=5e-3):
    """AdamW on random windows of the tokenized corpus (a BOS first where the family adds one)."""
    g = torch.Generator().manual_seed(seed)
    data = torch.tensor(ids)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * s / steps)))
    model.train()
    body = seq - (bos is not None)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - body, (batch,), generator=g).tolist()
        x = torch.stack([data[s:s + body] for s in starts])
        if bos is not None:
            x = torch.cat([torch.full((batch, 1), bos), x], dim=1)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    model.eval()
    return loss.item()


# ------------------------------------------------------------------------------------------------ float64

LOW = (torch.float32, torch.float16, torch.bfloat16)


class F64Mode(TorchFunctionMode):
    """Turns every request for a lower float type into float64 (transformers computes RMSNorm, RoPE tables and the
    eager softmax in float32 on purpose; under this mode the float64 model is float64 throughout)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if kwargs.get("dtype") in LOW:
            kwargs["dtype"] = torch.float64
        if func in (torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16):
            return args[0].to(torch.float64)
        if func in (torch.Tensor.to, torch.Tensor.type):
            args = tuple(torch.float64 if a in LOW else a for a in args)
        return func(*args, **kwargs)


class LowPrecisionCheck(TorchDispatchMode):
    """Records every aten op that produced a floating tensor other than float64."""

    def __init__(self):
        super().__init__()
        self.bad = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                self.bad.add(f"{func}:{t.dtype}")
        return out


def f64_copy(m32):
    """The same module class and weights in float64; built under F64Mode with float64 as the default dtype, so
    constants made at construction (RoPE inverse frequencies, Gemma's sqrt(hidden) embedding scale buffer) are
    float64 values, not float32 values cast up."""
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with F64Mode():
            m64 = type(m32)(copy.deepcopy(m32.config))
    finally:
        torch.set_default_dtype(prev)
    missing, unexpected = m64.load_state_dict({k: v.double() for k, v in m32.state_dict().items()}, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    m64.eval()
    for n, t in list(m64.named_parameters()) + list(m64.named_buffers()):
        assert not t.is_floating_point() or t.dtype == torch.float64, n
    return m64


def last_logits64(m64, ids: list[int]) -> torch.Tensor:
    check = LowPrecisionCheck()
    with torch.no_grad(), F64Mode(), check:
        out = m64(torch.tensor([ids])).logits[0, -1]
    assert out.dtype == torch.float64 and not check.bad, sorted(check.bad)
    return out


def plain_copy(m):
    """An ordinary float32 module of the same class and weights (models from transformers' GGUF loader are marked
    quantized and refuse .double())."""
    p = type(m)(copy.deepcopy(m.config))
    missing, unexpected = p.load_state_dict(m.state_dict(), strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    return p.float().eval()


def greedy(m32, ids: list[int]):
    t = torch.tensor([ids])
    with torch.no_grad():
        g = m32.generate(t, attention_mask=torch.ones_like(t), do_sample=False, max_new_tokens=NEW,
                         min_new_tokens=NEW, output_scores=True, return_dict_in_generate=True, use_cache=True,
                         pad_token_id=0, eos_token_id=None)
    new = g.sequences[0, len(ids):].tolist()
    margins = []
    for s in g.scores:
        top = torch.topk(s[0].double(), 2).values
        margins.append(float(top[0] - top[1]))
    return new, margins


def run_variant(m32, prompts: list[list[int]]):
    """Greedy continuations and margins (float32, KV cache, one prompt at a time) and last-position logits in
    float64 with the float32 error."""
    m32 = m32.float().eval()
    gens, margins, logits, errs = [], [], [], []
    for p in prompts:
        new, mg = greedy(m32, p)
        gens.append(new)
        margins.append(mg)
    m64 = f64_copy(m32)
    for p in prompts:
        l64 = last_logits64(m64, p)
        with torch.no_grad():
            l32 = m32(torch.tensor([p])).logits[0, -1].double()
        logits.append(l64.contiguous())
        errs.append(float((l32 - l64).abs().max()))
    return gens, margins, logits, errs


# ------------------------------------------------------------------------------------------------ GGUF

CONVERT_BOOTSTRAP = r"""
import sys
llama_cpp, pre, swa = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path[0:0] = [llama_cpp + "/gguf-py", llama_cpp]
from conversion import base, gemma
if pre:
    # The BPE pre-tokenizer is identified by a hash of sample ids, which a tiny trained vocabulary cannot match:
    # name it instead.
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
if swa == "1":
    # Gemma3Model writes no sliding-window pattern (llama.cpp then assumes 5 sliding + 1 full); write the
    # per-layer pattern of layer_types, in the bool-array form llama.cpp's load_swa_pattern reads.
    _orig = gemma.Gemma3Model.set_gguf_parameters
    def _set(self):
        _orig(self)
        self.gguf_writer.add_sliding_window_pattern([t == "sliding_attention" for t in self.hparams["layer_types"]])
    gemma.Gemma3Model.set_gguf_parameters = _set
import gguf
assert gguf.__file__.startswith(llama_cpp), gguf.__file__
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[4:]
convert_hf_to_gguf.main()
"""


# general.name of each GGUF. llama.cpp's vocabulary loader applies a Phi-3 rule (RSTRIP on every special token, and a
# lookup of "</s>", "<unk>" and "<s>", which this vocabulary lacks) to any model whose general.name contains "phi3" or
# "phi-3", so the phi3 file is named after Phi-4-mini, whose vocabulary style it has.
GGUF_NAMES_GENERAL = {"qwen3": "qkv-fixture-qwen3", "gemma2": "qkv-fixture-gemma2", "gemma3": "qkv-fixture-gemma3",
                      "phi3": "qkv-fixture-phi4-mini", "smollm3": "qkv-fixture-smollm3", "llama2": "qkv-fixture-llama2"}


def convert(arch: str, folder: Path, path: Path, outtype: str | None = None, tok: str | None = None,
            model_name: str | None = None, extra_args: tuple[str, ...] = ()) -> None:
    """convert_hf_to_gguf.py on folder, in a subprocess with the patches of CONVERT_BOOTSTRAP. tok (a TOKENIZERS key)
    and model_name (general.name) default to ARCHS[arch]'s and GGUF_NAMES_GENERAL[arch] (other scripts, e.g.
    make_moe_fixtures.py, pass them for folders that are not in ARCHS); extra_args go to the converter as they are."""
    desc = TOKENIZERS[tok or ARCHS[arch]["tok"]]
    pre = desc.get("gguf_pre", "") if desc["kind"] == "bpe" else ""
    env = dict(os.environ, PYTHONPATH=f"{LLAMA_CPP / 'gguf-py'}:{LLAMA_CPP}", NO_LOCAL_GGUF="1")
    cmd = [sys.executable, "-c", CONVERT_BOOTSTRAP, str(LLAMA_CPP), pre, "1" if arch == "gemma3" else "0",
           str(folder), "--outfile", str(path), "--outtype", outtype or ARCHS[arch]["outtype"],
           "--model-name", model_name or GGUF_NAMES_GENERAL[arch], *extra_args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout[-4000:] + r.stderr[-8000:])
        raise RuntimeError(f"convert_hf_to_gguf failed for {arch}")


def gguf_fields(reader: gguf.GGUFReader) -> dict:
    out = {}
    for f in reader.fields.values():
        if f.name.startswith("GGUF."):
            continue
        v = f.contents()
        out[f.name] = v
    return out


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of convert_hf_to_gguf's LlamaModel.permute (rows of attn_q / attn_k)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
              "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_qkv": "self_attn.qkv_proj",
              "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj",
              "ffn_down": "mlp.down_proj", "ffn_up": "mlp.up_proj"}


def gguf_reference(arch: str, path: Path, folder_cfg):
    """The reference model of a GGUF, built from the file alone as llama.cpp reads it: every tensor dequantized by
    gguf-py, the converter's changes undone (Q/K row permutation of llama-style archs, Gemma's 1 + w norms), loaded
    into the transformers class with the config the metadata describes. Returns (model, notes)."""
    r = gguf.GGUFReader(str(path))
    kv = gguf_fields(r)
    a = kv["general.architecture"]
    cfg = copy.deepcopy(folder_cfg)
    notes = []

    def same(key, value, gkey, default=None):
        """The GGUF value (or llama.cpp's default when the converter wrote none) equals the folder's."""
        assert gkey in kv or default is not None, f"{path.name}: {gkey} missing"
        got = kv.get(gkey, default)
        if gkey not in kv:
            notes.append(f"{gkey} not written; llama.cpp default {default}")
        want = value
        assert (abs(got - want) <= 1e-6 * abs(want) if isinstance(want, float) else got == want), (gkey, got, want)

    same("n_layer", cfg.num_hidden_layers, f"{a}.block_count")
    same("hidden", cfg.hidden_size, f"{a}.embedding_length")
    same("ffn", cfg.intermediate_size, f"{a}.feed_forward_length")
    same("heads", cfg.num_attention_heads, f"{a}.attention.head_count")
    same("kv", cfg.num_key_value_heads, f"{a}.attention.head_count_kv")
    same("eps", cfg.rms_norm_eps, f"{a}.attention.layer_norm_rms_epsilon")
    same("ctx", cfg.max_position_embeddings, f"{a}.context_length")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if f"{a}.attention.key_length" in kv:
        same("head_dim", head_dim, f"{a}.attention.key_length")
    rp = cfg.rope_parameters
    if arch == "gemma3":
        same("theta", rp["full_attention"]["rope_theta"], f"{a}.rope.freq_base")
        same("theta_swa", rp["sliding_attention"]["rope_theta"], f"{a}.rope.freq_base_swa")
        same("scale", rp["full_attention"]["factor"], f"{a}.rope.scaling.factor")
        assert kv[f"{a}.rope.scaling.type"] == "linear"
        pattern = kv[f"{a}.attention.sliding_window_pattern"]
        assert list(pattern) == [t == "sliding_attention" for t in cfg.layer_types], pattern
        same("window", cfg.sliding_window, f"{a}.attention.sliding_window")
    else:
        same("theta", rp["rope_theta"], f"{a}.rope.freq_base", default=10000.0)
    if arch == "gemma2":
        same("attn_cap", cfg.attn_logit_softcapping, f"{a}.attn_logit_softcapping")
        same("final_cap", cfg.final_logit_softcapping, f"{a}.final_logit_softcapping")
        same("window", cfg.sliding_window, f"{a}.attention.sliding_window")
        # No key carries query_pre_attn_scalar: llama.cpp scales by 1/sqrt(head_dim) (1/sqrt(hidden/heads) only
        # for the 46-layer 27B).
        if cfg.query_pre_attn_scalar != head_dim:
            notes.append(f"query_pre_attn_scalar {cfg.query_pre_attn_scalar} -> {head_dim} (not in GGUF; "
                         f"llama.cpp uses 1/sqrt(head_dim))")
            cfg.query_pre_attn_scalar = head_dim
    if arch == "phi3":
        same("orig_ctx", rp["original_max_position_embeddings"], f"{a}.rope.scaling.original_context_length")
        same("window", cfg.sliding_window, f"{a}.attention.sliding_window")
        same("rot", int(head_dim * rp["partial_rotary_factor"]), f"{a}.rope.dimension_count")
        assert kv[f"{a}.rope.scaling.type"] == "longrope" if f"{a}.rope.scaling.type" in kv else True
        notes.append("sliding_window 16 applied as written (llama.cpp's phi3 currently disables Phi SWA)")
        notes.append("longrope factors chosen per pass by sequence length > 32, as transformers does (llama.cpp "
                     "chooses by context size)")
    if arch == "smollm3":
        # llama.cpp's smollm3: no RoPE on every 4th layer (n_no_rope_layer_step = 4); no GGUF key.
        derived = [int((i + 1) % 4 != 0) for i in range(cfg.num_hidden_layers)]
        assert derived == list(cfg.no_rope_layers), (derived, cfg.no_rope_layers)
        notes.append("no GGUF key for NoPE layers: llama.cpp's rule, no RoPE on every 4th layer")

    sd = {}
    factors = {}
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        name = t.name
        if name in ("rope_factors_long.weight", "rope_factors_short.weight"):
            factors[name.split("_")[2].split(".")[0]] = w.astype(np.float64).tolist()
            continue
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        else:
            m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.weight", name)
            assert m, name
            i, g = int(m.group(1)), m.group(2)
            if arch in ("gemma2", "gemma3"):
                part = {"ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
                        "post_ffw_norm": "post_feedforward_layernorm"}.get(g) or GGUF_NAMES[g]
            elif arch == "phi3":
                part = {"ffn_norm": "post_attention_layernorm", "ffn_up": "mlp.gate_up_proj"}.get(g) or GGUF_NAMES[g]
            else:
                part = {"ffn_norm": "post_attention_layernorm"}.get(g) or GGUF_NAMES[g]
            hf = f"model.layers.{i}.{part}.weight"
            if arch in ("llama2", "smollm3") and g == "attn_q":
                w = unpermute(w, cfg.num_attention_heads)
            elif arch in ("llama2", "smollm3") and g == "attn_k":
                w = unpermute(w, cfg.num_key_value_heads)
        if arch in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            w = w - 1.0
        sd[hf] = torch.from_numpy(np.ascontiguousarray(w))
    if arch == "phi3":
        assert np.allclose(factors["long"], rp["long_factor"]) and np.allclose(factors["short"], rp["short_factor"])
        cfg.rope_parameters = dict(rp, long_factor=[float(x) for x in np.float32(factors["long"])],
                                   short_factor=[float(x) for x in np.float32(factors["short"])])
    cfg.dtype = torch.float32
    m = ARCHS[arch]["cls"](cfg)
    missing, unexpected = m.load_state_dict(sd, strict=False)
    tied = cfg.tie_word_embeddings
    assert not unexpected and set(missing) <= ({"lm_head.weight"} if tied else set()), (missing, unexpected)
    assert ("lm_head.weight" not in sd) == tied
    return m.float().eval(), notes


def hf_gguf_loader(path: Path):
    """transformers' own GGUF loader; returns (model, None) or (None, reason)."""
    try:
        m = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                 attn_implementation="eager")
        return plain_copy(m), None
    except Exception as e:  # noqa: BLE001 - the reason is recorded
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"


# ------------------------------------------------------------------------------------------------ prompts

TEXT_SHORT = "And God said, Let there be light"
TEXT_LONG = "  3 And God said, Let there be light: and there was light.\n  4 And God saw the light"
CHAT = [{"role": "user", "content": "Who divided the light from the darkness?"}]
CHAT_KWARGS = {"qwen3": {"enable_thinking": False}, "smollm3": {"enable_thinking": False}}


def make_prompts(arch: str, tok) -> tuple[list[str], list[list[int]]]:
    kwargs = CHAT_KWARGS.get(arch, {})
    chat = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True, **kwargs)
    texts = [TEXT_SHORT, TEXT_LONG, chat]
    ids = [tok(TEXT_SHORT)["input_ids"], tok(TEXT_LONG)["input_ids"], tok(chat, add_special_tokens=False)["input_ids"]]
    return texts, ids


# ------------------------------------------------------------------------------------------------ tokenizer cases

CASE_TEXTS = [
    "", " ", "  ", "   leading", "trailing   ", "a  b   c", "\t", "tab\there\t\tx", "\n", "line\nnext", "crlf\r\nnext",
    "para\n\nnext", " \n \n", "\n\n\n", "0", "42", "1234567890", "3.14159 and 1,000,000", "1:1", "$19.99",
    "Hello, world!", "\"quoted\" (paren) [bracket] {brace}", "...!?;:-", "it's don't I'LL we've",
    "caf\u00e9", "cafe\u0301", "na\u00efve \u00c6r\u00f8 \u00c5ngstr\u00f6m", "\u212b", "\U0001f600", "\U0001f44d\U0001f3fd",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467", "\U0001f3f3\ufe0f\u200d\U0001f308", "\u65e5\u672c\u8a9e",
    "\u4f60\u597d\uff0c\u4e16\u754c", "\ud55c\uad6d\uc5b4", "\u041f\u0440\u0438\u0432\u0435\u0442",
    "In the beginning God created the heaven and the earth.", "  1 In the beginning",
]


def special_case_texts(name: str) -> list[str]:
    desc = TOKENIZERS[name]
    if desc["kind"] == "bpe":
        sp = [c for c, _ in desc["added"]]
    else:
        sp = [desc["config"]["bos_token"], desc["config"]["eos_token"]] + desc["special_extra"]
    a, b = sp[-1], sp[0]
    return [f"a{a}b", f"{b}user\nHi{a}", f" {a} ", f"{a}{a}", a[:-1], f"x{sp[len(sp) // 2]}\n"]


def tokenizer_cases(name: str, folder: Path) -> dict:
    tok = AutoTokenizer.from_pretrained(str(folder))
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    sp = None
    if (folder / "tokenizer.model").exists():
        sp = spm.SentencePieceProcessor(model_file=str(folder / "tokenizer.model"))
    cases, disagree = [], []
    for text in CASE_TEXTS + special_case_texts(name):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        case = {"text": text, "ids": ids, "decode": tok.decode(ids, skip_special_tokens=False)}
        rid = raw.encode(text, add_special_tokens=False).ids
        if rid != ids:
            case["ids_tokenizer_json"] = rid
            disagree.append(f"tokenizer.json {text!r}")
        if sp is not None:
            case["ids_sentencepiece"] = sp.encode(text)
            if case["ids_sentencepiece"] != ids:
                disagree.append(f"sentencepiece {text!r}")
        cases.append(case)
    return {"class": type(tok).__name__, "vocab_size": len(tok), "cases": cases, "disagreements": disagree}


# ------------------------------------------------------------------------------------------------ main

def build_arch(arch: str, tok_dirs: dict, refs: dict, logits: dict, summary: dict) -> None:
    spec = ARCHS[arch]
    folder = OUT / arch
    for attempt in range(MAX_TRIES):
        seed = spec["seed"] + 100 * attempt
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        for f in tok_dirs[spec["tok"]].iterdir():
            shutil.copy(f, folder / f.name)
        cfg = make_config(arch, AutoTokenizer.from_pretrained(str(tok_dirs[spec["tok"]])))
        cfg.save_pretrained(str(folder))  # AutoTokenizer's choice of class can depend on config.json's model_type
        tok = AutoTokenizer.from_pretrained(str(folder))
        cfg._attn_implementation = "eager"
        torch.manual_seed(seed)
        model = spec["cls"](cfg)
        ids = tok(corpus_text(), add_special_tokens=False)["input_ids"]
        bos = tok.bos_token_id if TOKENIZERS[spec["tok"]]["config"].get("add_bos_token") else None
        loss = train_model(model, ids, bos, seed)
        m_save = copy.deepcopy(model).to(spec["dtype"])
        m_save.save_pretrained(str(folder), max_shard_size=spec["shard"] or "100MB")
        gen = folder / "generation_config.json"
        if gen.exists():
            gen.unlink()
        tok = AutoTokenizer.from_pretrained(str(folder))
        texts, prompts = make_prompts(arch, tok)
        window = getattr(cfg, "sliding_window", None)
        assert window is None or all(len(p) > window for p in prompts), (arch, [len(p) for p in prompts])
        if arch == "phi3":  # the short prompt crosses original_max_position_embeddings while generating
            orig = cfg.rope_parameters["original_max_position_embeddings"]
            assert len(prompts[0]) <= orig < len(prompts[0]) + NEW and len(prompts[1]) > orig
            assert max(len(p) for p in prompts) + NEW <= cfg.max_position_embeddings
        variants = {}
        loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager")
        variants[arch] = (loaded, {"source": f"{arch}/", "route": "transformers from_pretrained(folder), float32"})
        gpath = OUT / f"{arch}.gguf"
        convert(arch, folder, gpath)
        ref_b, notes = gguf_reference(arch, gpath, loaded.config)
        ref_a, why = hf_gguf_loader(gpath)
        route = {"source": gpath.name, "outtype": spec["outtype"]}
        if TOKENIZERS[spec["tok"]]["kind"] == "bpe":
            route["converter_patch"] = f"get_vocab_base_pre -> {TOKENIZERS[spec['tok']]['gguf_pre']}"
        if arch == "gemma3":
            route["converter_patch"] = "adds gemma3.attention.sliding_window_pattern from layer_types"
        if ref_a is not None:
            with torch.no_grad():
                diff = float((ref_a(torch.tensor([prompts[0]])).logits - ref_b(torch.tensor([prompts[0]])).logits)
                             .abs().max())
            if diff > 1e-4:
                why = f"loads, but its logits differ from the file's by {diff:.3g}"
                ref_a = None
        if ref_a is not None:
            route["route"] = "transformers GGUF loader (agrees with the dequantized route)"
            gmodel = ref_a
        else:
            route["route"] = "gguf-py dequantize + transformers class"
            route["hf_gguf_loader"] = why
            gmodel = ref_b
        if notes:
            route["notes"] = notes
        variants[f"{arch}_gguf"] = (gmodel, route)
        results, worst = {}, float("inf")
        for name, (m, info) in variants.items():
            gens, margins, lg, errs = run_variant(m, prompts)
            results[name] = (info, gens, margins, lg, errs)
            worst = min(worst, min(min(x) for x in margins))
        print(f"{arch}: seed {seed} loss {loss:.3f} min margin {worst:.3g}", flush=True)
        if worst > MIN_MARGIN:
            break
    else:
        raise RuntimeError(f"{arch}: no seed gave margins > {MIN_MARGIN}")
    for name, (info, gens, margins, lg, errs) in results.items():
        refs[name] = dict(info, seed=seed, texts=texts, prompts=prompts, generated=gens,
                          margins=[[float(f"{x:.7g}") for x in mg] for mg in margins], lp_err=errs)
        for i, (l, e) in enumerate(zip(lg, errs)):
            logits[f"{name}.p{i}.logits"] = l.float()  # the float64 reference, rounded to float32
            logits[f"{name}.p{i}.err"] = torch.tensor(e, dtype=torch.float64)
        summary[name] = min(min(x) for x in margins)


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    refs, logits, summary, cases = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tok_dirs = {}
        for name in TOKENIZERS:
            d = Path(tmp) / name
            d.mkdir()
            write_tokenizer(name, d)
            tok_dirs[name] = d
        for arch in ARCHS:
            build_arch(arch, tok_dirs, refs, logits, summary)
    for name, arch in (("qwen3", "qwen3"), ("gemma", "gemma2"), ("phi3", "phi3"), ("smollm3", "smollm3"),
                       ("llama2", "llama2")):
        cases[name] = dict(tokenizer_cases(name, OUT / arch), folders=[a for a in ARCHS if ARCHS[a]["tok"] == name])
    meta = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__, "sentencepiece": spm.__version__},
            "new_tokens": NEW, "min_margin": MIN_MARGIN, "converter": "llama-cpp-python 0.3.36 sdist, "
            "vendor/llama.cpp/convert_hf_to_gguf.py"}
    with open(OUT / "reference.json", "w", encoding="utf-8") as f:
        json.dump({"_meta": meta, **refs}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    with open(OUT / "tokenizer_cases.json", "w", encoding="utf-8") as f:
        json.dump({"_meta": meta, **cases}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    save_file(logits, str(OUT / "logits.safetensors"))
    for name, m in summary.items():
        print(f"{name:14s} min top-2 margin {m:.4g}  route: {refs[name]['route']}")
    for name, c in cases.items():
        if c["disagreements"]:
            print(f"tokenizer {name}: {len(c['disagreements'])} disagreements: {c['disagreements'][:6]}")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"total size of {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
