#!/usr/bin/env python3
"""Fixtures for prompt log-probabilities and sliding-window perplexity (tests/infer/test_score.cpp),
made by transformers on two committed tiny models (no new model bytes):

  llama2  tests/fixtures/arch/llama2     LlamaForCausalLM, SentencePiece vocabulary of 336, BOS added
  gpt2    tests/fixtures/gpt2_tiny       GPT2LMHeadModel, byte-level BPE of 1000, no BOS

Writes tests/fixtures/perplexity.json (~9 KB): per model
  text        the first 300 bytes of tests/fixtures/text/kjv_genesis.txt (ASCII)
  ids         tokenizer(text).input_ids (BOS first for llama2), T tokens
  prompt      the first 40 ids as one window: token_logprobs[i] = log p(ids[i + 1] | ids[:i + 1]) for
              i in 0..38 (the first token has none), and top2[i] = the two most likely tokens at that
              position as [id, logprob] (ties broken by the lower id), from log_softmax of the float32
              logits computed in float64
  windows     for each (context N, stride S): the sliding-window rule of transformers' "Perplexity of
              fixed-length models": windows [b, min(b + N, T)) for b = 0, S, 2S, ... until one reaches T; each
              scores the tokens the previous one did not (its last end - prev_end tokens, and never the
              window's first token, which nothing in the window predicts), so every token but the first is
              scored once when S < N (with S = N the first token of each window is not scored either).
              nll_sum, tokens, perplexity = exp(nll_sum / tokens); for the first setting also every scored
              token's position and log-probability (positions, token_logprobs).
              Computed as the documentation's loop does (model(input_ids, labels=target_ids) with the
              context masked to -100), with outputs.loss multiplied by the number of labels it really
              averages over. doc_loop_perplexity is the documentation's own formula, which multiplies the
              mean loss by (valid labels - 1) in every window: for a window after the first that undercounts
              its tokens by one, so it differs slightly from the exact average; qkv computes the exact one.
  Numbers are rounded to 7 decimals (the C++ test's tolerances are 1e-4 on log-probabilities, ~5 significant
  digits on perplexities).

Run from any directory with the venv of tests/reference/requirements.txt (~5 s):
  /root/qkv-venv/bin/python tests/reference/make_perplexity_fixtures.py
Re-running gives the same file (one thread, deterministic CPU kernels).
"""
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2TokenizerFast

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIX = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIX, "perplexity.json")
TEXT_BYTES = 300
PROMPT = 40
TOP = 2
SETTINGS = [(64, 24), (64, 64), (32, 1)]  # (context, stride); the first also per token

torch.set_num_threads(1)


def r(x):
    return round(float(x), 7)


def load(name):
    path = os.path.join(FIX, {"llama2": "arch/llama2", "gpt2": "gpt2_tiny"}[name])
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tok = GPT2TokenizerFast.from_pretrained(path) if name == "gpt2" else AutoTokenizer.from_pretrained(path)
    return model, tok


def log_softmax(model, ids):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits.double(), dim=-1)


def prompt_case(model, ids):
    lp = log_softmax(model, ids[:PROMPT])
    token_lps, top = [], []
    for i in range(PROMPT - 1):
        token_lps.append(r(lp[i, ids[i + 1]]))
        row = lp[i]
        order = sorted(range(row.shape[0]), key=lambda v: (-row[v].item(), v))[:TOP]
        top.append([[v, r(row[v])] for v in order])
    return {"token_logprobs": token_lps, "top2": top}


def windows_case(model, ids, context, stride, per_token):
    T = len(ids)
    x = torch.tensor([ids])
    nll_sum, n_tokens, doc_nll, doc_tokens = 0.0, 0, 0.0, 0
    positions, lps = [], []
    prev_end = 0
    for begin in range(0, T, stride):
        end = min(begin + context, T)
        trg_len = end - prev_end
        input_ids = x[:, begin:end]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            out = model(input_ids, labels=target_ids)
        # The labels the loss really averages over: the shifted ones that are not -100.
        valid = int((target_ids[:, 1:] != -100).sum())
        nll_sum += out.loss.double().item() * valid
        n_tokens += valid
        doc_n = int((target_ids != -100).sum()) - 1  # the documentation's count
        doc_nll += out.loss.double().item() * doc_n
        doc_tokens += doc_n
        if per_token:
            lp = torch.log_softmax(out.logits[0].float().double(), dim=-1)
            for j in range(end - begin - 1):
                if target_ids[0, j + 1] != -100:
                    positions.append(begin + j + 1)
                    lps.append(r(lp[j, ids[begin + j + 1]]))
        prev_end = end
        if end == T:
            break
    case = {"context": context, "stride": stride, "tokens": n_tokens, "nll_sum": r(nll_sum),
            "perplexity": r(torch.exp(torch.tensor(nll_sum / n_tokens, dtype=torch.float64))),
            "doc_loop_perplexity": r(torch.exp(torch.tensor(doc_nll / doc_tokens, dtype=torch.float64)))}
    if per_token:
        assert len(positions) == n_tokens and abs(-sum(lps) - nll_sum) < 1e-4 * n_tokens, (len(positions), n_tokens)
        case["positions"] = positions
        case["token_logprobs"] = lps
    return case


def main():
    with open(os.path.join(FIX, "text", "kjv_genesis.txt"), "rb") as f:
        text = f.read()[:TEXT_BYTES].decode("ascii")
    out = {"transformers_version": transformers.__version__, "torch_version": torch.__version__.split("+")[0],
           "models": {}}
    for name in ["llama2", "gpt2"]:
        model, tok = load(name)
        ids = tok(text).input_ids
        assert PROMPT < len(ids) and max(n for n, _ in SETTINGS) <= model.config.max_position_embeddings, len(ids)
        out["models"][name] = {
            "text": text, "ids": ids, "prompt": prompt_case(model, ids),
            "windows": [windows_case(model, ids, n, s, i == 0) for i, (n, s) in enumerate(SETTINGS)]}
        print(name, len(ids), "tokens;", [(w["context"], w["stride"], w["perplexity"], w["doc_loop_perplexity"])
                                          for w in out["models"][name]["windows"]])
    with open(OUT, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
