#!/usr/bin/env python3
"""Train a tiny GPT-2 and write the reference fixtures for qkv's GPT-2 model,
KV cache and `qkv generate`.

Run (from any directory; ~10 s on one thread):

    /root/qkv-venv/bin/python tests/reference/make_gpt2_fixtures.py
    /root/qkv-venv/bin/python tests/reference/make_gpt2_fixtures.py --check-qkv-save DIR

Inputs (committed, written by tests/reference/make_bpe_fixtures.py):
    tests/fixtures/text/kjv_genesis.txt            training text
    tests/fixtures/gpt2_tiny/{vocab.json,merges.txt} byte-level BPE, ~1000 tokens

Outputs:
    tests/fixtures/gpt2_tiny/{config.json,model.safetensors}
        a 2-layer GPT-2 (n_embd 64, 4 heads, n_positions 128, gelu_new, tied
        embeddings) trained in float32 for a few hundred AdamW steps on the
        text, saved by GPT2LMHeadModel.save_pretrained after model.half():
        float16, half the bytes of float32 (the fixtures stay well under 5 MB).
        Every reference below comes from these float16 weights loaded as
        float32 (from_pretrained(..., dtype=torch.float32)), so qkv, which
        widens F16 to float32 at load, runs exactly the same weights.
    tests/fixtures/gpt2_tiny_reference.json
        the prompts, their ids, greedy continuations, per-step argmax margins,
        the left-padded batched run and its comparison with the single runs.
    tests/fixtures/gpt2_tiny_logits.safetensors
        float32 logits of the last min(T, 4) positions of every prompt (all of
        a short prompt's, the last 4 rows of a longer one; LOGITS_ROWS),
        generate's per-step logits for one prompt, per-layer activations for
        one prompt.
    tests/reference/fixture_index.md (its gpt2_tiny block)

Every number is Hugging Face transformers' own (GPT2LMHeadModel, eager
attention, float32 arithmetic on the float16-rounded weights). The script checks itself: generate (KV cache) against
step-by-step full forwards without a cache, the eager against the SDPA
attention, the batched against the single runs, and fails if a greedy choice
is closer than MIN_MARGIN to a tie.

--check-qkv-save DIR loads a GPT-2 folder written by qkv with
GPT2LMHeadModel.from_pretrained, requires a clean loading report (no
missing / unexpected / mismatched keys), compares its logits on the fixture
prompts with the reference (the stored last rows of each), prints the result
and appends one dated line to the index. Exit status 1 if the load is not clean or the logits differ by
more than --tol.

Deterministic: one thread, torch.use_deterministic_algorithms, fixed seeds;
a re-run with the same torch/transformers build rewrites byte-identical files.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import os
import re
import sys
import warnings
from pathlib import Path

import torch

torch.set_num_threads(1)  # fixed reduction order -> reproducible bits
torch.use_deterministic_algorithms(True)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import transformers  # noqa: E402  (after the torch settings on purpose)
transformers.utils.logging.disable_progress_bar()
transformers.utils.logging.set_verbosity_error()
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIX = REPO / "tests" / "fixtures"
MODEL_DIR = FIX / "gpt2_tiny"
TEXT_PATH = FIX / "text" / "kjv_genesis.txt"
REF_JSON = FIX / "gpt2_tiny_reference.json"
LOGITS_ST = FIX / "gpt2_tiny_logits.safetensors"
INDEX_PATH = HERE / "fixture_index.md"
INDEX_BLOCK = "gpt2_tiny"
CHECKS_BLOCK = "gpt2_tiny_qkv_save_checks"

SEED_INIT = 5001     # model initialisation
SEED_BATCHES = 5002  # training batch positions
TRAIN_STEPS = 300
TRAIN_BATCH = 16
TRAIN_CTX = 64
LR = 3e-3
WARMUP = 20
MAX_NEW = 40
MIN_MARGIN = 1e-4    # every greedy step's top1 - top2 logit gap must exceed this
STEP_LOGITS_PROMPT = "short"      # generate's per-step logits are stored for this prompt,
STEP_LOGITS_ROWS = 8              # for its first 8 steps (the file stays small)
LOGITS_ROWS = 4                   # logits.<i> keeps the last min(T, 4) rows of each prompt's logits
                                  # (it held all T rows, ~560 KB; the C++ test compares the last rows)
ACTIVATIONS_PROMPT = "endoftext"  # per-layer activations are stored for this prompt

# (name, text). Ids come from GPT2TokenizerFast on the fixture's vocab.json /
# merges.txt; "<|endoftext|>" inside a text is the special token (one id).
PROMPTS = [
    ("short", "In the beginning"),
    ("long", "And the LORD God formed man of the dust of the ground, and breathed into "
             "his nostrils the breath of life; and man became a living soul."),
    ("endoftext", "and the evening and the morning were the first day.<|endoftext|>And Noah"),
    ("leading_space", " and God said unto Noah,"),
    ("unicode", "Café — “日本” 🙂 and the LORD"),
    ("newlines", "\n\n  3 And God said,"),
    ("word", "God"),
]


# ----------------------------------------------------------------- helpers

def sha16(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def canonicalize_safetensors_header(path: Path) -> None:
    """Sort the __metadata__ keys of a safetensors header in place (the Rust
    writer's HashMap order changes between processes; see make_fixtures.py)."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    text = data[8:8 + n].decode("utf-8").rstrip(" ")
    header = json.loads(text)
    assert json.dumps(header, separators=(",", ":"), ensure_ascii=False) == text
    if "__metadata__" in header:
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    new = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    assert len(new) == len(text.encode("utf-8"))
    path.write_bytes(data[:8] + new.ljust(n, b" ") + data[8 + n:])


def margins_of(step_logits: torch.Tensor) -> list[float]:
    """[S, V] logits -> per row top1 - top2 (float32 arithmetic, as stored)."""
    top = torch.topk(step_logits, 2, dim=-1).values
    return [float(v) for v in (top[:, 0] - top[:, 1])]


def round6(x: float) -> float:
    return float(f"{x:.6g}")


def replace_index_block(name: str, body: str) -> None:
    """Replace (or append) the `<!-- BEGIN name -->...<!-- END name -->` block
    of fixture_index.md; make_fixtures.py keeps such blocks when it rewrites
    the file."""
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    text = INDEX_PATH.read_text(encoding="utf-8") if INDEX_PATH.exists() else ""
    block = f"{begin}\n{body.rstrip()}\n{end}\n"
    if begin in text:
        a = text.index(begin)
        b = text.index(end, a) + len(end)
        if b < len(text) and text[b] == "\n":
            b += 1
        text = text[:a] + block + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    INDEX_PATH.write_text(text, encoding="utf-8")


def index_block_body(name: str) -> str | None:
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    text = INDEX_PATH.read_text(encoding="utf-8") if INDEX_PATH.exists() else ""
    if begin not in text:
        return None
    a = text.index(begin) + len(begin)
    return text[a:text.index(end, a)].strip("\n")


def load_tokenizer() -> GPT2TokenizerFast:
    for f in ("vocab.json", "merges.txt"):
        if not (MODEL_DIR / f).exists():
            sys.exit(f"missing {rel(MODEL_DIR / f)}: run tests/reference/make_bpe_fixtures.py first")
    tok = GPT2TokenizerFast.from_pretrained(str(MODEL_DIR))
    assert tok.convert_tokens_to_ids("<|endoftext|>") == tok.eos_token_id
    return tok


def greedy(model, ids: torch.Tensor, mask: torch.Tensor, pad_id: int):
    """Greedy generate of exactly MAX_NEW tokens (no EOS stop) -> (new ids
    [B, MAX_NEW], raw logits [B, MAX_NEW, V])."""
    out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=MAX_NEW,
                         min_new_tokens=0, pad_token_id=pad_id, output_logits=True,
                         return_dict_in_generate=True)
    new = out.sequences[:, ids.shape[1]:]
    assert new.shape[1] == MAX_NEW, new.shape
    return new, torch.stack(out.logits, dim=1)


def load_float32(path: Path, attn: str, **kwargs):
    """GPT2LMHeadModel.from_pretrained in float32 whatever the checkpoint's dtype:
    transformers 5 would keep the fixture's float16 by default. F16 -> F32 is
    exact, so the model holds the stored weights."""
    out = GPT2LMHeadModel.from_pretrained(str(path), attn_implementation=attn, dtype=torch.float32, **kwargs)
    model = out[0] if isinstance(out, tuple) else out
    assert all(p.dtype == torch.float32 for p in model.parameters()), path
    return out


def make_model_eager(path: Path):
    model = load_float32(path, "eager").eval()
    # Stop only at max_new_tokens: the model's eos would end a greedy run early.
    model.generation_config.eos_token_id = None
    return model


# ----------------------------------------------------------------- training

def train(tok: GPT2TokenizerFast) -> None:
    text = TEXT_PATH.read_text(encoding="utf-8")
    data = torch.tensor(tok(text)["input_ids"], dtype=torch.long)
    assert len(data) > TRAIN_CTX + 1, len(data)
    eos = tok.eos_token_id
    cfg = GPT2Config(vocab_size=len(tok), n_positions=128, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(SEED_INIT)
    model = GPT2LMHeadModel(cfg)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / WARMUP))
    gen = torch.Generator().manual_seed(SEED_BATCHES)
    losses = []
    for step in range(TRAIN_STEPS):
        start = torch.randint(0, len(data) - TRAIN_CTX, (TRAIN_BATCH,), generator=gen)
        x = torch.stack([data[s:s + TRAIN_CTX] for s in start.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
    print(f"trained {TRAIN_STEPS} steps on {len(data)} tokens: loss {losses[0]:.3f} -> "
          f"{sum(losses[-20:]) / 20:.3f} (mean of last 20)")
    model.eval()
    # Stored in float16: half the bytes; the references are computed from these rounded weights
    # (references() reloads the folder), never from the float32 ones trained here.
    model.half().save_pretrained(str(MODEL_DIR))
    stored = load_file(str(MODEL_DIR / "model.safetensors"))
    assert all(t.dtype == torch.float16 for t in stored.values()), "model.safetensors is not all float16"
    gen_cfg = MODEL_DIR / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()  # bos/eos are in config.json; nothing else in it is used
    for extra in sorted(MODEL_DIR.iterdir()):  # nothing else save_pretrained might add
        assert extra.name in ("config.json", "model.safetensors", "vocab.json", "merges.txt",
                              "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"), extra
    return losses


# ----------------------------------------------------------------- references

def capture_activations(model, ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """Forward with hooks: every block's ln_1, attn (after c_proj), ln_2, mlp,
    block output; ln_f; and HF's hidden_states as hidden.<i>."""
    acts: dict[str, torch.Tensor] = {}
    hooks = []
    for i, block in enumerate(model.transformer.h):
        for part in ("ln_1", "attn", "ln_2", "mlp"):
            def hook(_m, _inp, out, key=f"block.{i}.{part}"):
                acts[key] = (out[0] if isinstance(out, tuple) else out)[0].detach().clone()
            hooks.append(getattr(block, part).register_forward_hook(hook))

        def block_hook(_m, _inp, out, key=f"block.{i}.out"):
            acts[key] = (out[0] if isinstance(out, tuple) else out)[0].detach().clone()
        hooks.append(block.register_forward_hook(block_hook))

    def lnf_hook(_m, _inp, out):
        acts["ln_f"] = out[0].detach().clone()
    hooks.append(model.transformer.ln_f.register_forward_hook(lnf_hook))
    with torch.no_grad():
        out = model(ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
    for h in hooks:
        h.remove()
    for i, h in enumerate(out.hidden_states):
        acts[f"hidden.{i}"] = h[0].detach().clone()
    # HF's convention: hidden.0 = wte + wpe, hidden.i = output of block i-1,
    # except the last, which is ln_f of the last block's output.
    n = model.config.n_layer
    assert torch.equal(acts[f"hidden.{n}"], acts["ln_f"])
    for i in range(n - 1):
        assert torch.equal(acts[f"hidden.{i + 1}"], acts[f"block.{i}.out"])
    return acts


def references(tok: GPT2TokenizerFast) -> tuple[dict, dict[str, torch.Tensor]]:
    model = make_model_eager(MODEL_DIR)
    sdpa = load_float32(MODEL_DIR, "sdpa").eval()
    eos = tok.eos_token_id
    V = model.config.vocab_size
    tensors: dict[str, torch.Tensor] = {}
    prompts = []
    singles = {}
    worst_sdpa = 0.0
    worst_cache = 0.0
    for i, (name, text) in enumerate(PROMPTS):
        ids_list = tok(text)["input_ids"]
        ids = torch.tensor([ids_list])
        mask = torch.ones_like(ids)  # explicit: pad id == eos, a real <|endoftext|> is attended
        with torch.no_grad():
            logits = model(ids, attention_mask=mask).logits[0]
            logits_sdpa = sdpa(ids, attention_mask=mask).logits[0]
            new, step_logits = greedy(model, ids, mask, eos)
        new, step_logits = new[0], step_logits[0]
        worst_sdpa = max(worst_sdpa, float((logits - logits_sdpa).abs().max()))
        # The KV-cache run against full forwards without a cache, step by step.
        seq = torch.cat([ids[0], new])
        with torch.no_grad():
            full = model(seq[None, :-1], attention_mask=torch.ones(1, len(seq) - 1, dtype=torch.long)).logits[0]
        full_steps = full[len(ids_list) - 1:]
        assert torch.equal(full_steps.argmax(-1), new), f"{name}: cached and uncached greedy ids differ"
        worst_cache = max(worst_cache, float((full_steps - step_logits).abs().max()))
        assert float((full[:len(ids_list)] - logits).abs().max()) < 1e-5
        margins = margins_of(step_logits)
        if min(margins) <= MIN_MARGIN:
            sys.exit(f"prompt {name!r}: greedy step {margins.index(min(margins))} has margin "
                     f"{min(margins):.3g} <= {MIN_MARGIN}; choose another prompt")
        tensors[f"logits.{i}"] = logits[-LOGITS_ROWS:].contiguous()  # last min(T, LOGITS_ROWS) rows
        if name == STEP_LOGITS_PROMPT:
            tensors[f"step_logits.{i}"] = step_logits[:STEP_LOGITS_ROWS].contiguous()
        if name == ACTIVATIONS_PROMPT:
            for k, v in capture_activations(model, ids).items():
                tensors[k] = v.contiguous()
        assert tok.decode(ids_list, clean_up_tokenization_spaces=False) == text, name
        singles[name] = (new, step_logits)
        prompts.append({
            "index": i,
            "name": name,
            "text": text,
            "ids": ids_list,
            "logits_tensor": f"logits.{i}",
            "new_ids": new.tolist(),
            "new_text": tok.decode(new.tolist()),
            "margins": [round6(m) for m in margins],
            "min_margin": round6(min(margins)),
            "prompt_last_row_margin": round6(margins_of(logits[-1:])[0]),
        })
        print(f"{name:14s} T={len(ids_list):3d}  min margin {min(margins):.4f}  "
              f"-> {tok.decode(new.tolist())[:60]!r}")

    # One left-padded batch of every prompt.
    tok.padding_side = "left"
    tok.pad_token = tok.eos_token
    texts = [t for _, t in PROMPTS]
    enc = tok(texts, padding=True, return_tensors="pt")
    for row, p in enumerate(prompts):
        n_pad = enc["input_ids"].shape[1] - len(p["ids"])
        assert enc["input_ids"][row, n_pad:].tolist() == p["ids"]
        assert enc["attention_mask"][row].tolist() == [0] * n_pad + [1] * len(p["ids"])
    with torch.no_grad():
        bnew, blogits = greedy(model, enc["input_ids"], enc["attention_mask"], eos)
    rows_equal = []
    worst_batch = 0.0
    for row, (name, _) in enumerate(PROMPTS):
        snew, slog = singles[name]
        same = bnew[row].tolist() == snew.tolist()
        rows_equal.append(same)
        # Logits are comparable up to the first differing token.
        upto = MAX_NEW if same else next(k for k in range(MAX_NEW) if bnew[row, k] != snew[k]) + 1
        worst_batch = max(worst_batch, float((blogits[row, :upto] - slog[:upto]).abs().max()))
        if not same:
            print(f"WARNING: HF batched row {row} ({name}) differs from its single run at step {upto - 1}")
    batch_margins = [min(margins_of(blogits[r])) for r in range(len(PROMPTS))]

    ref = {
        "description": "Tiny GPT-2 reference (HF transformers, eager attention, float32 arithmetic "
                       "on the folder's float16 weights). "
                       "See tests/reference/fixture_index.md, block gpt2_tiny.",
        "model_dir": rel(MODEL_DIR),
        "logits_file": rel(LOGITS_ST),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": __import__("tokenizers").__version__},
        "vocab_size": V,
        "eos_token_id": eos,
        "pad_token_id": eos,
        "max_new_tokens": MAX_NEW,
        "greedy": "argmax of the last row's logits each step; exactly max_new_tokens steps, "
                  "no stop at eos; attention_mask all ones (a real <|endoftext|> is attended)",
        "min_margin": round6(min(p["min_margin"] for p in prompts)),
        "max_abs_diff_eager_vs_sdpa_prompt_logits": round6(worst_sdpa),
        "max_abs_diff_cached_vs_uncached_step_logits": round6(worst_cache),
        "prompts": prompts,
        "step_logits": {"prompt": STEP_LOGITS_PROMPT,
                        "tensor": f"step_logits.{[n for n, _ in PROMPTS].index(STEP_LOGITS_PROMPT)}",
                        "rows": STEP_LOGITS_ROWS,
                        "note": "[rows, V]: row k = generate's logits that chose new_ids[k] "
                                "(row 0 = last row of the prompt's logits)"},
        "activations": {"prompt": ACTIVATIONS_PROMPT,
                        "tensors": sorted(k for k in tensors if k.startswith(("hidden.", "block.", "ln_f"))),
                        "note": "[T, n_embd] each. hidden.0 = wte+wpe; hidden.i = output of block i-1 "
                                "for i < n_layer; hidden.n_layer = ln_f(block n_layer-1 output) "
                                "(HF convention); block.i.{ln_1,attn,ln_2,mlp,out}: attn and mlp "
                                "after their c_proj, before the residual add; out = block output"},
        "batch": {
            "padding_side": "left",
            "pad_token_id": eos,
            "prompts": [n for n, _ in PROMPTS],
            "input_ids": enc["input_ids"].tolist(),
            "attention_mask": enc["attention_mask"].tolist(),
            "position_ids": "cumsum(attention_mask) - 1, 0 on pads (what HF generate uses)",
            "new_ids": bnew.tolist(),
            "rows_equal_single": rows_equal,
            "max_abs_diff_step_logits_vs_single": round6(worst_batch),
            "min_margin": round6(min(batch_margins)),
        },
    }
    return ref, tensors


def write_outputs(ref: dict, tensors: dict[str, torch.Tensor], losses: list[float]) -> None:
    tmp = LOGITS_ST.with_suffix(".safetensors.tmp")
    for k, v in tensors.items():
        assert v.dtype == torch.float32 and torch.isfinite(v).all(), k
    save_file(dict(sorted(tensors.items())), str(tmp),
              {"description": "tiny GPT-2 reference logits/activations; see gpt2_tiny_reference.json"})
    canonicalize_safetensors_header(tmp)
    os.replace(tmp, LOGITS_ST)
    back = load_file(str(LOGITS_ST))
    assert set(back) == set(tensors) and all(torch.equal(back[k], tensors[k]) for k in tensors)
    text = json.dumps(ref, indent=1, ensure_ascii=False, sort_keys=False)
    # Number lists on one line each (ids, margins, masks), the rest indented.
    text = re.sub(r"\[\s*(-?[\d.e+-]+(?:,\s*-?[\d.e+-]+)*)\s*\]",
                  lambda m: "[" + ", ".join(v.strip() for v in m.group(1).split(",")) + "]", text)
    assert json.loads(text) == ref
    REF_JSON.write_text(text + "\n", encoding="utf-8")
    write_index(ref, tensors, losses)


def write_index(ref: dict, tensors: dict[str, torch.Tensor], losses: list[float]) -> None:
    cfg = json.loads((MODEL_DIR / "config.json").read_text())
    files = [MODEL_DIR / f for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt")]
    files += [REF_JSON, LOGITS_ST]
    L = []
    L.append("## Tiny GPT-2 (`make_gpt2_fixtures.py`)\n")
    L.append(f"A GPT-2 with n_layer {cfg['n_layer']}, n_head {cfg['n_head']}, n_embd {cfg['n_embd']}, "
             f"n_positions {cfg['n_positions']}, vocab {cfg['vocab_size']}, `{cfg['activation_function']}`, "
             f"LN eps {cfg['layer_norm_epsilon']}, tied embeddings, bos = eos = {ref['eos_token_id']} "
             f"(`<|endoftext|>`), trained {TRAIN_STEPS} AdamW steps (batch {TRAIN_BATCH}, context "
             f"{TRAIN_CTX}) on `tests/fixtures/text/kjv_genesis.txt` (loss {losses[0]:.2f} -> "
             f"{sum(losses[-20:]) / 20:.2f}), stored in float16. Reference numbers: transformers "
             f"{transformers.__version__}, torch {torch.__version__}, eager attention, float32 arithmetic on "
             f"the float16 weights (loaded with `dtype=torch.float32`).\n")
    L.append("| file | bytes | sha256[:16] |")
    L.append("|---|---|---|")
    for f in files:
        L.append(f"| `{rel(f)}` | {f.stat().st_size} | `{sha16(f)}` |")
    L.append("")
    L.append("- `gpt2_tiny/`: a Hugging Face folder (`save_pretrained`): `config.json` (note "
             "`\"n_inner\": null` = 4 * n_embd, `\"pad_token_id\": null`, dropouts 0), "
             "`model.safetensors` (**float16**: `model.half().save_pretrained`, half the bytes of "
             "float32; HF names `transformer.*`, no `lm_head.weight`: tied to `transformer.wte.weight`), `vocab.json` + `merges.txt` (byte-level BPE).")
    L.append("- `gpt2_tiny_reference.json`: `prompts[i]` = {`name`, `text`, `ids` (GPT2TokenizerFast), "
             "`logits_tensor`, `new_ids` (greedy, exactly `max_new_tokens` = "
             f"{MAX_NEW}, no EOS stop), `new_text`, `margins` (top1 - top2 logit at every generated "
             "step), `min_margin`}; `batch` = the same prompts in one left-padded batch "
             "(`input_ids`, `attention_mask`, `new_ids`, `rows_equal_single`); tolerances measured "
             "in HF itself (`max_abs_diff_*`).")
    L.append(f"- `gpt2_tiny_logits.safetensors` (all F32): `logits.<i>` [min(T_i, {LOGITS_ROWS}), V] = the "
             f"last min(T_i, {LOGITS_ROWS}) rows of prompt i's full-forward logits (all of a short prompt's; "
             f"the last row = position T_i - 1); `step_logits.<i>` [{STEP_LOGITS_ROWS}, V] for prompt "
             f"`{STEP_LOGITS_PROMPT}` = the logits of its first {STEP_LOGITS_ROWS} generate steps (KV cache; "
             f"row 0 = last prompt row); activations of prompt `{ACTIVATIONS_PROMPT}` [T, n_embd]: " + ", ".join(f"`{k}`" for k in ref["activations"]["tensors"])
             + ". `hidden.0` = wte + wpe, `hidden.1` = block 0 output, `hidden.2` = **ln_f** of block 1's "
             "output (HF's convention); `block.<l>.attn` / `.mlp` are after c_proj, before the residual add.")
    L.append("")
    L.append(f"Measured: min greedy margin over all prompts {ref['min_margin']}; eager vs SDPA prompt "
             f"logits {ref['max_abs_diff_eager_vs_sdpa_prompt_logits']}; cached vs uncached step logits "
             f"{ref['max_abs_diff_cached_vs_uncached_step_logits']}; batched vs single step logits "
             f"{ref['batch']['max_abs_diff_step_logits_vs_single']}, batched rows equal single: "
             f"{all(ref['batch']['rows_equal_single'])}; batched min margin {ref['batch']['min_margin']}.\n")
    L.append("- **Test (model):** load `gpt2_tiny/` with qkv's HF GPT-2 loader; for each prompt compare the "
             "last `logits.<i>.size(0)` rows of the forward logits with `logits.<i>` (float32: `atol 1e-4` "
             "is ample, the eager/SDPA spread above is the scale of legitimate rounding differences); on "
             f"failure compare the activations of `{ACTIVATIONS_PROMPT}` in order (`hidden.0`, `block.0.ln_1`, `block.0.attn`, ...) to find "
             "the first divergence.")
    L.append("- **Test (tokenizer):** qkv's BPE on `text` gives exactly `ids` (special token "
             "`<|endoftext|>` in the text is one id).")
    L.append(f"- **Test (generate):** greedy with the KV cache, exactly {MAX_NEW} new tokens, never stop "
             "at eos: `new_ids` must match exactly (every step's margin is above "
             f"{MIN_MARGIN}, far above float32 noise); per-step logits of `{STEP_LOGITS_PROMPT}` vs "
             "`step_logits.<i>` (`atol 1e-4`); no-cache generation gives the same ids.")
    L.append("- **Test (batched generate):** `batch.input_ids` with `batch.attention_mask` (left padding, "
             "pad id = eos, positions = cumsum(mask) - 1): each row's new ids equal `batch.new_ids` "
             "(= the single runs when `rows_equal_single` is all true).")
    L.append("- **Save round trip:** after `qkv` writes a GPT-2 folder, run "
             "`make_gpt2_fixtures.py --check-qkv-save DIR` (appends a line to the block below).")
    replace_index_block(INDEX_BLOCK, "\n".join(L))
    if index_block_body(CHECKS_BLOCK) is None:
        replace_index_block(CHECKS_BLOCK, "### `--check-qkv-save` runs (appended by make_gpt2_fixtures.py)\n")


# ----------------------------------------------------------------- --check-qkv-save

def check_qkv_save(directory: Path, tol: float) -> int:
    ref = json.loads(REF_JSON.read_text(encoding="utf-8"))
    want = load_file(str(LOGITS_ST))
    # Collect what from_pretrained logs or warns (missing/unexpected keys, ...).
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    handler = Collect(level=logging.WARNING)
    transformers.utils.logging.set_verbosity_warning()
    transformers.utils.logging.add_handler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, info = load_float32(directory, "eager", output_loading_info=True)
    transformers.utils.logging.remove_handler(handler)
    transformers.utils.logging.set_verbosity_error()
    model.eval()
    model.generation_config.eos_token_id = None
    problems = [f"{k}: {v}" for k, v in sorted(info.items()) if v]
    problems += [f"log: {m}" for m in records]
    problems += [f"warning: {w.message}" for w in caught]
    ref_cfg = json.loads((MODEL_DIR / "config.json").read_text())
    for key in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "activation_function",
                "layer_norm_epsilon", "tie_word_embeddings"):
        got = getattr(model.config, key)
        if got != ref_cfg.get(key, getattr(GPT2Config(), key)):
            problems.append(f"config {key} = {got!r}, reference {ref_cfg.get(key)!r}")
    worst, ids_equal = 0.0, True
    for p in ref["prompts"]:
        ids = torch.tensor([p["ids"]])
        with torch.no_grad():
            logits = model(ids, attention_mask=torch.ones_like(ids)).logits[0]
            new, _ = greedy(model, ids, torch.ones_like(ids), ref["pad_token_id"])
        ref_rows = want[p["logits_tensor"]]  # the prompt's last rows (all of a short prompt's)
        d = float((logits[-ref_rows.shape[0]:] - ref_rows).abs().max())
        same = new[0].tolist() == p["new_ids"]
        ids_equal &= same
        worst = max(worst, d)
        print(f"{p['name']:14s} max|logits - ref| {d:.3g}  greedy ids {'equal' if same else 'DIFFER'}")
    ok = not problems and worst <= tol and ids_equal
    for pr in problems:
        print("PROBLEM:", pr)
    print(f"{'OK' if ok else 'FAIL'}: {directory}: max |logits - reference| = {worst:.3g} over "
          f"{len(ref['prompts'])} prompts (tol {tol}), greedy ids equal: {ids_equal}, "
          f"loading report clean: {not problems}")
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = index_block_body(CHECKS_BLOCK) or "### `--check-qkv-save` runs (appended by make_gpt2_fixtures.py)\n"
    body = body.rstrip("\n") + (f"\n- {stamp}: `{directory}`: max |logits - reference| = {worst:.3g}, "
                                f"greedy ids equal: {ids_equal}, loading report clean: {not problems}, "
                                f"transformers {transformers.__version__} -> {'OK' if ok else 'FAIL'}")
    replace_index_block(CHECKS_BLOCK, body)
    return 0 if ok else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check-qkv-save", metavar="DIR", type=Path,
                    help="compare a GPT-2 folder written by qkv with the reference instead of regenerating")
    ap.add_argument("--tol", type=float, default=1e-4, help="max abs logit difference for --check-qkv-save")
    a = ap.parse_args()
    if a.check_qkv_save:
        return check_qkv_save(a.check_qkv_save, a.tol)
    tok = load_tokenizer()
    losses = train(tok)
    ref, tensors = references(tok)
    write_outputs(ref, tensors, losses)
    total = sum(f.stat().st_size for f in MODEL_DIR.iterdir())
    assert total < 1_000_000, f"{rel(MODEL_DIR)} is {total} bytes"
    for f in sorted(MODEL_DIR.iterdir()) + [REF_JSON, LOGITS_ST]:
        print(f"{f.stat().st_size:8d}  {sha16(f)}  {rel(f)}")
    print(f"batched rows equal single runs: {ref['batch']['rows_equal_single']}; "
          f"min margin {ref['min_margin']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
