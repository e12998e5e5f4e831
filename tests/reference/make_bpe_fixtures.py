#!/usr/bin/env python3
"""Reference fixtures for qkv's byte-level BPE tokenizer (tests/tokenize/).

Run (from any directory):

    /root/qkv-venv/bin/python tests/reference/make_bpe_fixtures.py

Inputs (committed):
    tests/fixtures/text/kjv_genesis.txt   Genesis 1-19 (King James Version, public
                                          domain) as printed by Debian's bible-kjv:
                                          `bible gen1:1-19:38 </dev/null`
                                          (re-create it with --make-text)
Outputs (committed):
    tests/fixtures/gpt2_tiny/vocab.json   a byte-level BPE of VOCAB_SIZE tokens trained
    tests/fixtures/gpt2_tiny/merges.txt   on that text with Hugging Face `tokenizers`
                                          (GPT-2 format; GPT2TokenizerFast loads them;
                                          the tiny GPT-2 fixtures use the same files)
    tests/fixtures/bpe_cases.json         encode cases (text -> ids), decode cases
                                          (ids -> text, with U+FFFD where the bytes
                                          are not UTF-8) and the class of every code
                                          point under the GPT-2 pre-tokenizer regex

Every id and string comes from transformers' GPT2TokenizerFast loaded from the two
files, and is cross-checked against the `tokenizers` object that was trained (and
against a `tokenizers.Tokenizer` rebuilt from the files). Training is deterministic:
re-running writes byte-identical files (check with sha256sum).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import GPT2TokenizerFast  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
TEXT_PATH = FIX / "text" / "kjv_genesis.txt"
MODEL_DIR = FIX / "gpt2_tiny"
CASES_PATH = FIX / "bpe_cases.json"
VOCAB_SIZE = 1000
EOT = "<|endoftext|>"
BIBLE_REF = "gen1:1-19:38"  # Genesis 1-19: ~62 KB


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def make_text() -> None:
    """Re-create the training text from Debian's bible-kjv (`bible` command)."""
    out = subprocess.run(["bible", BIBLE_REF], stdin=subprocess.DEVNULL, capture_output=True, check=True).stdout
    TEXT_PATH.parent.mkdir(parents=True, exist_ok=True)
    TEXT_PATH.write_bytes(out)
    print(f"wrote {rel(TEXT_PATH)} ({len(out)} bytes)")


# ---------------------------------------------------------------- training

def train(text: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=[EOT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, so any text encodes
        show_progress=False,
    )
    tok.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    return tok


def save_model(tok: Tokenizer) -> None:
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    tok.model.save(str(MODEL_DIR))  # writes vocab.json (ordered by id) and merges.txt ("#version: 0.2" first)
    vocab = json.loads((MODEL_DIR / "vocab.json").read_text(encoding="utf-8"))
    merges = (MODEL_DIR / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == VOCAB_SIZE, len(vocab)
    assert sorted(vocab.values()) == list(range(VOCAB_SIZE)), "ids not dense"
    assert merges[0].startswith("#version"), merges[0]
    assert len(merges) - 1 == VOCAB_SIZE - 256 - 1, len(merges)
    assert vocab[EOT] == 0


def load_hf() -> GPT2TokenizerFast:
    """GPT2TokenizerFast from the folder, as the tiny GPT-2 fixtures load it."""
    return GPT2TokenizerFast.from_pretrained(str(MODEL_DIR), clean_up_tokenization_spaces=False)


def load_hf_files() -> GPT2TokenizerFast:
    """GPT2TokenizerFast from the two file paths (transformers 5: vocab=, merges=; in transformers 4
    the same files load as GPT2TokenizerFast(vocab_file, merges_file))."""
    return GPT2TokenizerFast(vocab=str(MODEL_DIR / "vocab.json"), merges=str(MODEL_DIR / "merges.txt"),
                             clean_up_tokenization_spaces=False)


def load_raw() -> Tokenizer:
    """A tokenizers.Tokenizer rebuilt from the saved files (no transformers involved)."""
    t = Tokenizer(models.BPE.from_file(str(MODEL_DIR / "vocab.json"), str(MODEL_DIR / "merges.txt")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens([EOT])
    return t


# ---------------------------------------------------------------- encode cases

def encode_texts(corpus: str) -> list[tuple[str, str]]:
    cases: list[tuple[str, str]] = []

    def add(group: str, *texts: str) -> None:
        for t in texts:
            cases.append((group, t))

    add("empty", "")
    add("whitespace", " ", "  ", "   ", "\t", "\n", "\r", "\t\n", "\r\n", "a  b", "a   b", "hi   ", "\n\n\n",
        " \n ", "  hello", "hello  world  ", "x \t y", "a \n\n b", " \t \t ", "end.\n", "\n\nword", "    indent",
        "a\u000bb\u000cc", "\u000b\u000c")
    add("unicode-space",
        "a\u00a0b", "\u00a0", "a\u00a0 b", " \u00a0", "\u00a0\u00a0x", "x\u00a0\u00a0",           # NBSP: \s
        "a\u200bb", "\u200b", "\u200b ", " \u200b", "word\u200b\u200bword",                       # ZWSP: not \s
        "\ufeffhello", "a\ufeff b", "\ufeff",                                                       # BOM: not \s
        "line\u2028break", "\u2028", "a \u2028 b", "\u2029para", "\u3000wide space", "a\u3000\u3000b",
        "\u0085nel", "x\u0085", "a\u180eb", "\u1680ogham", "thin\u2009space", "nnbsp\u202fx",
        "\u2060joiner", "\u001c\u001d\u001e\u001f", "a\u001fb", "soft\u00adhyphen")
    add("contraction", "I'm", "they'll", "DON'T", "it's'", "'s", "we've", "you're", "she'd", "'ll", "''", "'",
        "o'clock", "rock'n'roll", "I'M", "can't", "y'all'd've", " 's", "'S", "Let's go", "he's 'quoted'",
        "'twas", "''s", "it\u2019s")
    add("digits", "12345", "3.14", "1,000", "2024-01-01", "v1.2.3", "a1b2", "\u0661\u0662\u0663", "\u00bd \u2153",
        "\u216b", "x\u00b2", "42nd", "007", " 99 bottles", "1e-9", "0x1F", "1234567890123456789", "\uff11\uff12")
    add("punctuation", "!!!", "?!?", "...", "--", "\u2014", "\u00abquoted\u00bb", "(a)", "[x]{y}", "$100",
        "#hashtag", "@user", "a.b.c", "e.g.", "C++", "->", "::", "\"quoted\"", "\u201csmart quotes\u201d",
        "\u00bfQu\u00e9?", "\u00a1Hola!", "~`^", "*_*", " !?", "a, b; c: d.", "<|", "|>", "<|endoftext",
        "<|endoftext|", "<|unknown|>", "<|>", "<||>")
    add("accents", "caf\u00e9", "cafe\u0301", "na\u00efve", "\u00c5ngstr\u00f6m", "A\u030angstro\u0308m",
        "r\u00e9sum\u00e9", "Cr\u00e8me br\u00fbl\u00e9e", "\u00f1", "n\u0303", "Zo\u00eb", "\u0301", " \u0301",
        "e\u0301\u0301", "\u1ebf", "Vi\u1ec7t Nam")
    add("emoji", "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
        "\U0001f1eb\U0001f1f7\U0001f1e9\U0001f1ea", "\U0001f3f3\ufe0f\u200d\U0001f308", "\u2764\ufe0f",
        "hi \U0001f600 there", "\U0001f600\U0001f600\U0001f600", "\U0001f916\U0001f680", "#\ufe0f\u20e3",
        "emoji\U0001f642mid", " \U0001f642", "\ufe0f")
    add("cjk", "\u65e5\u672c\u8a9e", "\u4f60\u597d\uff0c\u4e16\u754c", "\ud55c\uad6d\uc5b4",
        "\u30ab\u30bf\u30ab\u30ca", "\uff46\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48",
        "\u4e2d\u6587 English \u6df7\u5408", "\U0002070e\U00020731", "\u3053\u3093\u306b\u3061\u306f\u3002")
    add("rtl", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
        "\u0627\u0644\u0633\u0644\u0627\u0645 \u0639\u0644\u064a\u0643\u0645", "\u05e9\u05dc\u05d5\u05dd",
        "\u05e2\u05b4\u05d1\u05b0\u05e8\u05b4\u05d9\u05ea")
    add("indic", "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
        "\u0939\u093f\u0928\u094d\u0926\u0940", "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd",
        "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35")
    add("scripts", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u10e5\u10d0\u10e0\u10d7\u10e3\u10da\u10d8",
        "\u1230\u120b\u121d", "\u0f56\u0f7c\u0f51", "\u16a0\u16a2\u16a6")
    add("tabs", "\tindented", "a\tb\tc", "\t\t", "code:\n\tif x:\n\t\treturn 1\n", "col1\tcol2\n")
    add("special", EOT, f"a{EOT}b", f"hello {EOT} world", EOT + EOT, f" {EOT}", f"{EOT} ", f"<{EOT}>",
        f"{EOT}\n", f"<|{EOT}|>", "<|endoftext||>", f"{EOT}{EOT} x{EOT}", f"end.{EOT}Start", f"\u00e9{EOT}\u00e9")
    add("long", "a" * 300, "supercalifragilisticexpialidocious", "antidisestablishmentarianism", "ab" * 200,
        " " * 300, "\n" * 50, "-" * 100, "The" + "e" * 260 + "nd", "\U0001f600" * 70)
    add("mixed", "Hello\u4e16\u754c123!", "abc\u0430\u0431\u0432", "\u0391lpha\u0410\u043b\u044c\u0444\u0430",
        "ma\u00f1ana \u660e\u5929 tomorrow", "x=1; y=\u03c0*r\u00b2", "naïve café 日本 😀 123 'tis")
    add("control", "\x00", "a\x00b", "\x01\x02\x03", "\x1b[31mred\x1b[0m", "\x7f", "bell\x07", "\x08", "\x80\x9f")
    add("misc", "\ufffd", "\ue000", "\uffff", "\U0010ffff", "\U000e0041", "\U0001d400\U0001d401",
        "\u00ff\u0100\u0143", "\u0120\u010a", "\u00c4\u00a0")
    # The corpus: its start, its headers, a few verses, a long stretch, and seeded random slices.
    lines = corpus.splitlines(keepends=True)
    add("corpus", corpus[:200], lines[1], "".join(lines[:12]), corpus[10000:12000])
    rng = random.Random(1234)
    for _ in range(16):
        a = rng.randrange(len(corpus) - 400)
        add("corpus-slice", corpus[a:a + rng.randrange(1, 400)])
    return cases


# ---------------------------------------------------------------- decode cases

def decode_id_lists(hf: GPT2TokenizerFast) -> list[tuple[str, list[int]]]:
    vocab = hf.get_vocab()
    b2u = {b: c for c, b in byte_decoder().items()}
    byte_id = [vocab[b2u[b]] for b in range(256)]

    def of_bytes(bs: bytes) -> list[int]:
        return [byte_id[b] for b in bs]

    out: list[tuple[str, list[int]]] = []
    # Hand-made invalid (and valid but split) byte sequences, one byte token each.
    for name, bs in [
        ("lone continuation", b"a\x80b"), ("0xff", b"\xff"), ("0xfe 0xff", b"x\xfe\xffy"),
        ("0xc0 0x80 overlong", b"\xc0\x80"), ("0xc1 0xbf overlong", b"\xc1\xbf"),
        ("e0 80 80 overlong", b"\xe0\x80\x80"), ("surrogate ed a0 80", b"\xed\xa0\x80"),
        ("f4 90 above max", b"\xf4\x90\x80\x80"), ("f5", b"\xf5\x80\x80\x80"),
        ("truncated 3-byte at end", "\u20ac".encode()[:2]), ("truncated 4-byte at end", "\U0001f600".encode()[:3]),
        ("truncated 2-byte in middle", b"a\xc3b"), ("truncated 4-byte in middle", b"\xf0\x9f\x98 ok"),
        ("two truncated", b"\xe2\x82\xe2\x82"), ("valid split euro", "\u20ac".encode()),
        ("valid split emoji", "x\U0001f600y".encode()),
        ("valid 4-byte max", "\U0010ffff".encode()), ("continuation run", b"\x80\x81\x82\x83"),
        ("lead then ascii", b"\xe2(\xa1"), ("e0 a0 then end", b"\xe0\xa0"),
    ]:
        out.append((name, of_bytes(bs)))
    out.append(("empty", []))
    out.append(("eot only", [vocab[EOT]]))
    # Seeded random id sequences over the whole vocabulary (many single-byte tokens >= 0x80: invalid UTF-8).
    rng = random.Random(5678)
    for i in range(40):
        n = rng.randrange(1, 13)
        pool = range(1, 257) if i % 2 else range(VOCAB_SIZE)  # odd: byte tokens only (mostly invalid)
        out.append((f"random {i}", [rng.choice(pool) for _ in range(n)]))
    return out


def byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode, inverted (unicode char -> byte)."""
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


def raw_bytes(hf: GPT2TokenizerFast, ids: list[int]) -> bytes:
    dec = byte_decoder()
    toks = hf.convert_ids_to_tokens(ids)
    return b"".join(bytes(dec[c] for c in t) for t in toks)


# ---------------------------------------------------------------- code point classes

def code_point_classes() -> list[list]:
    """Run-length table [[first code point, class], ...] of how HF's ByteLevel pre-tokenizer
    (GPT-2 regex on Oniguruma) treats each code point: L (joins \\p{L}+), N (joins \\p{N}+),
    P (joins [^\\s\\p{L}\\p{N}]+), S (\\s). Surrogates are X (not text)."""
    pt = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

    def pieces(s: str) -> int:
        return len(pt.pre_tokenize_str(s))

    runs: list[list] = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:
            cls = "X"
        else:
            c = chr(cp)
            if pieces("a" + c) == 1:
                cls = "L"
            elif pieces("1" + c) == 1:
                cls = "N"
            elif pieces("!" + c) == 1:
                cls = "P"
            else:
                cls = "S"
                assert pieces("\t" + c) == 1 and pieces("1" + c) == 2, hex(cp)
        if not runs or runs[-1][1] != cls:
            runs.append([cp, cls])
    return runs


# ---------------------------------------------------------------- main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--make-text", action="store_true", help=f"re-create {rel(TEXT_PATH)} with `bible {BIBLE_REF}`")
    args = ap.parse_args()
    if args.make_text:
        make_text()
    corpus = TEXT_PATH.read_text(encoding="utf-8")
    assert len(corpus.encode()) < 100_000

    trained = train(corpus)
    save_model(trained)
    hf = load_hf()
    hf_files = load_hf_files()
    raw = load_raw()
    for t in (hf, hf_files):
        assert len(t) == VOCAB_SIZE and t.convert_tokens_to_ids(EOT) == 0 and t.get_vocab() == raw.get_vocab()

    encode_cases = []
    for group, text in encode_texts(corpus):
        ids = hf(text)["input_ids"]
        assert ids == hf_files(text)["input_ids"] == trained.encode(text).ids == raw.encode(text).ids, (group, text)
        assert hf.decode(ids) == text, (group, text)  # every case is valid UTF-8: exact round trip
        case = {"group": group, "text": text, "ids": ids}
        if "<|" in text:  # special tokens as plain text too
            case["ids_ordinary"] = hf(text, split_special_tokens=True)["input_ids"]
            raw.encode_special_tokens = True
            assert case["ids_ordinary"] == raw.encode(text).ids, (group, text)
            raw.encode_special_tokens = False
        encode_cases.append(case)
    assert len(encode_cases) >= 150, len(encode_cases)
    # The pre-tokenizer behaviours the C++ must reproduce (asserted here so a change in HF shows up).
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)

    def pieces(s: str) -> list[str]:
        return [p for p, _ in byte_level.pre_tokenize_str(s)]
    # NBSP, U+2028 and U+0085 are \s; ZWSP U+200B, BOM U+FEFF and U+180E are not (they join punctuation runs).
    assert [len(pieces("!" + c)) for c in "\u00a0\u2028\u0085\u200b\ufeff\u180e"] == [2, 2, 2, 1, 1, 1]
    assert pieces("a  b") == ["a", "\u0120", "\u0120b"] and pieces("hi   ") == ["hi", "\u0120\u0120\u0120"]

    decode_cases = []
    n_invalid = 0
    for name, ids in decode_id_lists(hf):
        text = hf.decode(ids)
        assert text == hf_files.decode(ids) == trained.decode(ids, skip_special_tokens=False) == \
            raw.decode(ids, skip_special_tokens=False), name  # transformers keeps special tokens by default
        bs = raw_bytes(hf, ids)
        try:
            bs.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        assert valid == ("\ufffd" not in text), (name, bs, text)  # HF really puts U+FFFD for invalid bytes
        n_invalid += not valid
        decode_cases.append({"name": name, "ids": ids, "text": text, "bytes_hex": bs.hex(), "valid_utf8": valid})
    assert n_invalid >= 20, n_invalid

    classes = code_point_classes()
    doc = {
        "about": "Byte-level BPE reference cases from Hugging Face tokenizers for tests/tokenize "
                 "(written by tests/reference/make_bpe_fixtures.py; model files in gpt2_tiny/).",
        "versions": {"tokenizers": __import__("tokenizers").__version__,
                     "transformers": __import__("transformers").__version__,
                     "unicodedata (python)": unicodedata.unidata_version},
        "vocab_size": VOCAB_SIZE,
        "eos_id": hf.convert_tokens_to_ids(EOT),
        "encode": encode_cases,
        "decode": decode_cases,
        "code_point_classes": classes,
    }
    CASES_PATH.write_text(json.dumps(doc, ensure_ascii=True, indent=0) + "\n", encoding="ascii")
    size = CASES_PATH.stat().st_size
    assert size < 300_000, size
    print(f"wrote {rel(MODEL_DIR / 'vocab.json')}, {rel(MODEL_DIR / 'merges.txt')}, {rel(CASES_PATH)} "
          f"({len(encode_cases)} encode, {len(decode_cases)} decode ({n_invalid} invalid UTF-8), "
          f"{len(classes)} code point runs, {size} bytes)")


if __name__ == "__main__":
    sys.exit(main())
