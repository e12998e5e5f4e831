#!/usr/bin/env python3
"""Random-weight benchmark models with the real shapes of Qwen3-0.6B and Gemma-3-1B.

For each model this script
  1. writes a Hugging Face folder (<out>/<name>-hf/): the Hub's config.json, bf16
     random weights from transformers' own init (seeded), and a small trained
     tokenizer the llama.cpp converter accepts;
  2. converts it with llama.cpp's convert_hf_to_gguf.py to <name>-bf16.gguf
     (source for quantization) and <name>-q8_0.gguf;
  3. quantizes the bf16 GGUF with llama-quantize to <name>-q4_k_m.gguf;
  4. runs `llama-bench -t 1 -p 16 -n 4 -r 1` on the Q8_0 and Q4_K_M files;
  5. writes <out>/REPORT.md (sizes, tensor types per file, key metadata, bench output);
     converter / llama-quantize / llama-bench output goes to <out>/logs/.

The weights are random: the files are for speed only, their output is noise.

Tokenizers:
  * Qwen3: a byte-level BPE (Qwen2's pre-tokenizer regex, NFC) trained on the
    Python standard library's sources, ~8k entries, with Qwen3's 26 added tokens
    at their real ids (151643 <|endoftext|> ... 151668 </think>); the converter
    fills the ids in between with [PAD<i>] up to vocab_size 151936. The converter
    identifies BPE pre-tokenizers by hashing the ids of a test string, which a
    new vocabulary cannot match, so TextModel.get_vocab_base_pre is patched
    in-process to return "qwen2" (what the real Qwen3 GGUFs carry).
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
  python bench/make_bench_models.py [--out DIR (models/bench)] [--models qwen3,gemma3]
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

MODELS = {
    "qwen3": dict(name="qwen3-0.6b", config=QWEN3_CONFIG),
    "gemma3": dict(name="gemma3-1b", config=GEMMA3_CONFIG),
}


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


def run_heavy(cmd: list[str], env: dict | None = None, logfile: Path | None = None) -> str:
    """Run under the CPU lock; output captured (and written to logfile if given), shown on failure."""
    full = ["flock", LOCK] + [str(c) for c in cmd]
    log("$ " + " ".join(full).replace("\n", " "))
    r = subprocess.run(full, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if logfile is not None:
        logfile.write_text(r.stdout)
    if r.returncode != 0:
        print(r.stdout[-20000:], file=sys.stderr)
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(full)}")
    return r.stdout


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

def make_qwen3_tokenizer(folder: Path) -> None:
    from tokenizers import Tokenizer, Regex, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    j = json.loads(tok.to_str())
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
    n = sum(p.numel() for p in model.parameters())
    log(f"{key}: {n / 1e6:.1f} M parameters; saving bf16 safetensors")
    model.save_pretrained(tmp, safe_serialization=True)
    # put the Hub's config.json back (save_pretrained writes the transformers-5 form)
    (tmp / "config.json").write_text(json.dumps(hub_cfg, indent=2) + "\n")
    gen = {"bos_token_id": hub_cfg["bos_token_id"], "eos_token_id": hub_cfg["eos_token_id"]}
    (tmp / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    (tmp / "README.md").write_text(
        f"Random weights (transformers init, torch seed {SEED}) with the config of "
        f"{'Qwen/Qwen3-0.6B' if key == 'qwen3' else 'google/gemma-3-1b-it'}; small trained tokenizer. "
        "For speed benchmarks only; made by make_bench_models.py.\n")
    if key == "qwen3":
        make_qwen3_tokenizer(tmp)
    else:
        make_gemma3_tokenizer(tmp)
    # sanity: a short forward pass stays finite
    with torch.no_grad():
        ids = torch.tensor([[2, 100, 200, 300, 400, 500, 600, 700]])
        out = model(ids, output_hidden_states=True)
        logits = out.logits.float()
        hs = [h.float().std().item() for h in out.hidden_states]
    assert torch.isfinite(logits).all(), "non-finite logits"
    log(f"{key}: forward ok; hidden-state std per layer {hs[0]:.3g} .. {hs[-1]:.3g}, "
        f"logits std {logits.std().item():.3g}")
    del model
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


# ---------------------------------------------------------------- conversion

CONVERT_WRAPPER = r"""
import runpy, sys
src = sys.argv[1]
sys.path.insert(0, src)
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
sys.argv = [src + "/convert_hf_to_gguf.py"] + sys.argv[2:]
runpy.run_path(src + "/convert_hf_to_gguf.py", run_name="__main__")
"""


def convert(key: str, folder: Path, outfile: Path, outtype: str, llama_src: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(llama_src / "gguf-py"))
    tmp = outfile.with_name(outfile.name + ".tmp")
    args = [str(folder), "--outtype", outtype, "--outfile", str(tmp)]
    if key == "qwen3":  # BPE: the pre-tokenizer hash cannot match a new vocabulary
        cmd = [sys.executable, "-c", CONVERT_WRAPPER, str(llama_src)] + args
    else:
        cmd = [sys.executable, str(llama_src / "convert_hf_to_gguf.py")] + args
    run_heavy(cmd, env=env, logfile=logdir() / (outfile.stem + ".convert.log"))
    tmp.rename(outfile)


def quantize(src: Path, dst: Path, qtype: str, llama_bin: Path) -> str:
    tmp = dst.with_name(dst.name + ".tmp")
    out = run_heavy([llama_bin / "llama-quantize", src, tmp, qtype], logfile=logdir() / (dst.stem + ".quantize.log"))
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


def main() -> None:
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--models", default="qwen3,gemma3")
    ap.add_argument("--llama-src", type=Path, default=DEFAULT_LLAMA_SRC)
    ap.add_argument("--llama-bin", type=Path, default=DEFAULT_LLAMA_BIN)
    ap.add_argument("--force", action="store_true", help="redo steps whose outputs exist")
    ap.add_argument("--no-bench", action="store_true", help="skip the llama-bench smoke runs")
    ARGS = ap.parse_args()
    out: Path = ARGS.out
    out.mkdir(parents=True, exist_ok=True)
    report = ["# Benchmark models (random weights, real shapes)", "",
              f"Made by make_bench_models.py on {time.strftime('%Y-%m-%d %H:%M:%S')}; llama.cpp source "
              f"{ARGS.llama_src}, tools {ARGS.llama_bin}.", ""]

    for key in [k.strip() for k in ARGS.models.split(",") if k.strip()]:
        name = MODELS[key]["name"]
        folder = out / f"{name}-hf"
        f_bf16 = out / f"{name}-bf16.gguf"
        f_q8 = out / f"{name}-q8_0.gguf"
        f_q4 = out / f"{name}-q4_k_m.gguf"

        if ARGS.force or not (folder / "model.safetensors").exists():
            with cpu_lock():
                make_hf_folder(key, folder)
        if ARGS.force or not f_bf16.exists():
            convert(key, folder, f_bf16, "bf16", ARGS.llama_src)
        if ARGS.force or not f_q8.exists():
            convert(key, folder, f_q8, "q8_0", ARGS.llama_src)
        if ARGS.force or not f_q4.exists():
            quantize(f_bf16, f_q4, "Q4_K_M", ARGS.llama_bin)

        report += [f"## {name}", ""]
        for f in (f_bf16, f_q8, f_q4):
            report.append(f"- `{f}`: {f.stat().st_size:,} bytes ({f.stat().st_size / 2**20:.1f} MiB)")
        report.append("")
        for f in (f_q8, f_q4):
            info = tensor_types(f)
            report.append(f"### tensor types in {f.name}: " +
                          ", ".join(f"{k} {v}" for k, v in sorted(info["counts"].items())))
            report += ["```"] + summarize_types(info) + ["```", ""]
            if f == f_q4:
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
        if not ARGS.no_bench:
            for f in (f_q8, f_q4):
                txt = run_heavy([ARGS.llama_bin / "llama-bench", "-m", f, "-t", "1", "-p", "16", "-n", "4", "-r", "1"],
                                logfile=logdir() / (f.stem + ".bench.log"))
                table = [l for l in txt.splitlines() if l.startswith("|")]
                print("\n".join(table), flush=True)
                report += [f"### llama-bench {f.name} (-t 1 -p 16 -n 4 -r 1)", "```"] + table + ["```", ""]

    (out / "REPORT.md").write_text("\n".join(report) + "\n")
    log(f"wrote {out / 'REPORT.md'}")


ARGS: argparse.Namespace
if __name__ == "__main__":
    main()
