#!/usr/bin/env python3
"""Reference fixtures for qkv's BPE trainer (tests/tokenize/test_bpe_train.cpp).

Run (from any directory):

    /root/qkv-venv/bin/python tests/reference/make_bpe_train_fixtures.py

Hugging Face `tokenizers`' BpeTrainer learns byte-level BPEs exactly as
`qkv tokenize train` and `tokenize::train_byte_level_bpe*` must:

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=N, min_frequency=F, special_tokens=[...],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([path], trainer)            # route "files": every line (with its "\\n") a sequence
    tok.train_from_iterator(texts, ...)   # route "iterator": every text a sequence
    tok.model.save(dir)                   # vocab.json + merges.txt

Inputs (committed):
    tests/fixtures/text/kjv_genesis.txt   Genesis 1-19, KJV (public domain; see make_bpe_fixtures.py)
    tests/fixtures/text/bpe_mixed.txt     written by this script (MIXED below): a small text with
                                          many equal pair counts, CRLF and lone CR line ends, blank
                                          runs, U+2028/U+0085/NBSP, tabs, emoji, CJK, Arabic,
                                          Devanagari, "<|endoftext|>" as plain text, no final newline
Outputs (committed):
    tests/fixtures/bpe_train/<case>/vocab.json, merges.txt   HF's files for each case, byte for byte
    tests/fixtures/bpe_train/cases.json   the settings of each case, its route (and for the iterator
                                          route the texts), vocab size and merge count reached, whether
                                          the vocabulary filled up, and texts -> ids from transformers'
                                          GPT2TokenizerFast loaded from the saved files

Checks made here (the script fails otherwise): the file route equals train_from_iterator over
the file's lines cut after every "\\n" (HF's lines_with_ending: "\\r\\n" stays whole, a lone "\\r",
U+2028 or U+0085 does not end a line -- unlike Python's str.splitlines); GPT2TokenizerFast from
the files, a tokenizers.Tokenizer rebuilt with BPE.from_file and the trained object give the same
ids. Training is deterministic: re-running writes byte-identical files.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import tokenizers  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402
from transformers import GPT2TokenizerFast  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
KJV = FIX / "text" / "kjv_genesis.txt"
MIXED_PATH = FIX / "text" / "bpe_mixed.txt"
OUT = FIX / "bpe_train"
EOT = "<|endoftext|>"

# Many ties: the same few pairs, each pattern repeated the same number of times, in several scripts.
MIXED = (
    "ab ba ab ba cd dc cd dc\n"
    "ab ba ab ba cd dc cd dc\n"
    "xyz zyx yzx xyz zyx yzx\r\n"
    "aa aaa aaaa aaaaa bb bbb bbbb\n"
    "\n\n\n"
    "It's the end: they'll say we've won, I'm sure; DON'T.\n"
    "tab\tseparated\tvalues\t\n"
    "trailing spaces   \n"
    "   leading spaces\n"
    "lone\rcarriage return and form\x0cfeed\n"
    "line\u2028separator and next\u0085line and no\u00a0break\u00a0space\n"
    "<|endoftext|> is plain text here <|endoftext|>\n"
    "numbers 123 4567 89 123 4567 89 3.14 1,000\n"
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 cafe\u0301 \u00c5ngstr\u00f6m caf\u00e9 caf\u00e9\n"
    "\U0001f600 \U0001f600\U0001f600 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 \u2764\ufe0f \U0001f600\n"
    "\u65e5\u672c\u8a9e \u4f60\u597d\uff0c\u4e16\u754c \u65e5\u672c\u8a9e \u4f60\u597d \ud55c\uad6d\uc5b4 \ud55c\uad6d\uc5b4\n"
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0645\u0631\u062d\u0628\u0627\n"
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0928\u092e\u0938\u094d\u0924\u0947\n"
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u041f\u0440\u0438\u0432\u0435\u0442 \u041f\u0440\u0438\u0432\u0435\u0442\n"
    "\n"
    "ab ba ab ba cd dc cd dc xyz zyx yzx \U0001f600 \u65e5\u672c\u8a9e caf\u00e9\n"
    "the end without a newline"
)

# name, text file, route, vocab_size, min_frequency, special tokens, lines to encode (None: no encode check)
KJV_LINES = [
    "In the beginning God created the heaven and the earth.\n",
    "  3 And God said, Let there be light: and there was light.\n",
    "And Abram went up out of Egypt, he, and his wife, and all that he had.",
    "Hello, world! It's 2024; caf\u00e9 \U0001f600 \u65e5\u672c",
    "<|endoftext|>The end<|endoftext|>",
]
CASES = [
    ("kjv_v300", KJV, "files", 300, 0, [EOT], KJV_LINES),
    ("kjv_v1000_f2", KJV, "files", 1000, 2, [EOT], KJV_LINES),
    ("kjv_v4096", KJV, "files", 4096, 0, [EOT], KJV_LINES),  # the excerpt runs out of pairs first
    ("kjv_v4096_f20", KJV, "files", 4096, 20, [EOT], KJV_LINES),  # stops at min_frequency
    ("kjv_specials", KJV, "files", 400, 0, [EOT, "the", "e", EOT], None),  # "th"+"e" reuses id 1; "e" not re-added
    ("mixed_files", MIXED_PATH, "files", 5000, 0, [EOT], None),  # until no pair is left
    ("mixed_iter", MIXED_PATH, "iterator", 330, 0, [EOT], None),
]


def rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def lines_with_ending(text: str) -> list[str]:
    """HF tokenizers' lines_with_ending: cut after every '\\n' only."""
    out, pos = [], 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end + 1
        out.append(text[pos:end])
        pos = end
    return out


def iterator_texts(text: str) -> list[str]:
    """The texts of the iterator route: the mixed text cut into chunks of four lines (keeping the ends)."""
    lines = lines_with_ending(text)
    return ["".join(lines[i:i + 4]) for i in range(0, len(lines), 4)]


def trainer(vocab_size: int, min_frequency: int, specials: list[str]) -> trainers.BpeTrainer:
    return trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                               initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tok


def saved(tok: Tokenizer) -> tuple[bytes, bytes]:
    with tempfile.TemporaryDirectory() as d:
        tok.model.save(d)
        return (Path(d) / "vocab.json").read_bytes(), (Path(d) / "merges.txt").read_bytes()


def main() -> None:
    MIXED_PATH.write_bytes(MIXED.encode("utf-8"))
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    out_cases = []
    for name, path, route, vocab_size, min_freq, specials, lines in CASES:
        text = path.read_bytes().decode("utf-8")
        tok = new_tokenizer()
        case = {"name": name, "text": rel(path), "route": route, "vocab_size": vocab_size,
                "min_frequency": min_freq, "special_tokens": specials}
        if route == "files":
            tok.train([str(path)], trainer(vocab_size, min_freq, specials))
            # The same as the lines cut after "\n", each a sequence.
            check = new_tokenizer()
            check.train_from_iterator(lines_with_ending(text), trainer(vocab_size, min_freq, specials))
            assert saved(check) == saved(tok), f"{name}: train([file]) != train_from_iterator(lines_with_ending)"
        else:
            texts = iterator_texts(text)
            case["texts"] = texts
            tok.train_from_iterator(texts, trainer(vocab_size, min_freq, specials))
        vocab_json, merges_txt = saved(tok)
        # Deterministic: a second run gives the same bytes.
        again = new_tokenizer()
        if route == "files":
            again.train([str(path)], trainer(vocab_size, min_freq, specials))
        else:
            again.train_from_iterator(case["texts"], trainer(vocab_size, min_freq, specials))
        assert saved(again) == (vocab_json, merges_txt), f"{name}: training is not deterministic"

        d = OUT / name
        d.mkdir()
        (d / "vocab.json").write_bytes(vocab_json)
        (d / "merges.txt").write_bytes(merges_txt)
        vocab = json.loads(vocab_json)
        merges = merges_txt.decode("utf-8").split("\n")
        assert merges[0] == "#version: 0.2" and merges[-1] == "", merges[:1]
        merges = merges[1:-1]
        case["vocab_size_out"] = len(vocab)
        case["merges_out"] = len(merges)
        case["vocab_full"] = len(vocab) >= vocab_size  # else HF ran out of pairs or hit min_frequency
        if lines is not None:
            fast = GPT2TokenizerFast(vocab=str(d / "vocab.json"), merges=str(d / "merges.txt"),
                                     clean_up_tokenization_spaces=False)
            raw = Tokenizer(models.BPE.from_file(str(d / "vocab.json"), str(d / "merges.txt")))
            raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            raw.add_special_tokens([EOT])
            enc = []
            for line in lines:
                ids = fast.encode(line, add_special_tokens=False)
                assert ids == raw.encode(line).ids, (name, line)
                assert ids == tok.encode(line).ids, (name, line)
                enc.append({"text": line, "ids": ids})
            case["encode"] = enc
        out_cases.append(case)
        print(f"{name}: vocab {len(vocab)} (asked {vocab_size}), {len(merges)} merges, "
              f"{len(vocab_json) + len(merges_txt)} bytes")
    doc = {
        "generator": "tests/reference/make_bpe_train_fixtures.py",
        "tokenizers_version": tokenizers.__version__,
        "cases": out_cases,
    }
    (OUT / "cases.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {rel(OUT)}/ ({total} bytes) and {rel(MIXED_PATH)}")


if __name__ == "__main__":
    main()
