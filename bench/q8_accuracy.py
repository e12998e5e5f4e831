#!/usr/bin/env python3
"""Accuracy of the faster options: qkv's --activations q8 and --kv-cache f16 (and both), and llama.cpp
(whose CPU products with Q4_1 / Q8_0 weights always quantize activations to 8 bits, and whose KV cache
is float16 by default) against qkv's exact path (float32 activations times the exact dequantized
weights, a float32 KV cache: transformers' logits within float32 tolerance).

Each engine runs as an OpenAI-compatible server (qkv serve, llama-server) on the same GGUF file and
answers the same chat prompts greedily with logprobs (the chosen token's and the top 5). Against
the reference's answer to each prompt:
  - agree: how many tokens the answer shares with the reference's before the first difference
    (greedy text stays identical until a near-tie flips),
  - |d logprob|: over those shared positions, |logprob of the chosen token - the reference's|
    (mean and max): how far the quantized activations move the model's probabilities.

  python3 bench/q8_accuracy.py --qkv build/tools/qkv/qkv \\
      --llama-server /path/to/llama-server --model models/SmolLM2-135M-Instruct.Q4_1.gguf

--context FILE --context-words N puts the first N words of FILE before every question (a long
context: what a float16 cache rounds grows with the depth it attends over).

Only the standard library. Not run by CI or make test.
"""
import argparse
import http.client
import json
import math
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_load import free_port, wait_healthy  # noqa: E402

PROMPTS = [
    "What is the capital of France?",
    "Explain in two sentences what a transformer neural network is.",
    "Write a haiku about the sea.",
    "List three uses of a hash table.",
    "Why is the sky blue?",
    "Give me a recipe for pancakes.",
    "What does a compiler do?",
    "Translate 'good morning' into Spanish and German.",
    "How many legs does a spider have?",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "What is the difference between TCP and UDP?",
    "Suggest a name for a pet turtle.",
]


def ask(port, model, prompt, max_tokens):
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "logprobs": True, "top_logprobs": 5}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = json.loads(r.read())
    if r.status != 200:
        raise RuntimeError(f"{r.status}: {data}")
    content = data["choices"][0]["logprobs"]["content"]
    return [(t["token"], t["logprob"]) for t in content]


def serve(cmd, prompts, max_tokens):
    port = free_port()
    proc = subprocess.Popen(shlex.split(cmd.format(port=port)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy("127.0.0.1", port, 120)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/v1/models")
        model = json.loads(c.getresponse().read())["data"][0]["id"]
        return [ask(port, model, p, max_tokens) for p in prompts]
    finally:
        proc.terminate()
        proc.wait(30)


def compare(ref, got):
    agree, dlp = [], []
    for r, g in zip(ref, got):
        n = 0
        while n < min(len(r), len(g)) and r[n][0] == g[n][0]:
            dlp.append(abs(r[n][1] - g[n][1]))
            n += 1
        agree.append(n)
    return agree, dlp


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", default="build/tools/qkv/qkv")
    ap.add_argument("--llama-server", default="/work/scratch/llamacpp/build/bin/llama-server")
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--context", help="a text file whose first --context-words words precede every question")
    ap.add_argument("--context-words", type=int, default=1200)
    ap.add_argument("--json-out")
    args = ap.parse_args()
    m, t = args.model, args.threads
    prompts = PROMPTS
    if args.context:
        words = Path(args.context).read_text(encoding="utf-8", errors="replace").split()[:args.context_words]
        prompts = [" ".join(words) + "\n\n" + p for p in PROMPTS]
    ctx = 4096 if args.context else 1024
    qkv = f"{args.qkv} --threads {t} serve --model {m} --parallel 1 --ctx {ctx} --port {{port}} --quiet"
    engines = {
        "qkv (exact)": qkv,
        "qkv --activations q8": qkv + " --activations q8",
        "qkv --kv-cache f16": qkv + " --kv-cache f16",
        "qkv --activations q8 --kv-cache f16": qkv + " --activations q8 --kv-cache f16",
        "llama.cpp": f"{args.llama_server} -m {m} --parallel 1 -c {ctx} --threads {t} --threads-batch {t} "
                     f"--jinja --host 127.0.0.1 --port {{port}}",
    }
    answers = {name: serve(cmd, prompts, args.max_tokens) for name, cmd in engines.items()}
    ref = answers["qkv (exact)"]
    total = sum(len(r) for r in ref)
    out = {"prompts": len(PROMPTS), "max_tokens": args.max_tokens, "reference_tokens": total,
           "context_words": args.context_words if args.context else 0, "engines": {}}
    print(f"{len(PROMPTS)} chat prompts" + (f" after {args.context_words} words of {args.context}" if args.context else "")
          + f", greedy, up to {args.max_tokens} tokens; reference: qkv's exact path ({total} tokens)\n")
    print("| engine | tokens equal to the reference's (before the first difference) | answers identical | "
          "mean / max abs d logprob of the chosen token |")
    print("|---|---|---|---|")
    for name in [e for e in engines if e != "qkv (exact)"]:
        agree, dlp = compare(ref, answers[name])
        same = sum(1 for r, g in zip(ref, answers[name]) if [x[0] for x in r] == [x[0] for x in g])
        mean = statistics.fmean(dlp) if dlp else math.nan
        mx = max(dlp) if dlp else math.nan
        out["engines"][name] = {"agree": agree, "identical": same, "mean_dlogprob": mean, "max_dlogprob": mx}
        print(f"| {name} | {sum(agree)} / {total} | {same} / {len(PROMPTS)} | {mean:.4f} / {mx:.4f} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
