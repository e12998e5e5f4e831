"""qkv vs transformers on the real-shaped random models (Qwen3-0.6B, Gemma-3-1B configs as published):
greedy tokens and the first step's top-5 log-probabilities. Each GGUF is compared with transformers' own GGUF
loader on the same file (its weights dequantized by gguf-py), the folder with the folder.
Usage: QKV_BIN=build/tools/qkv python tests/reference/real_shape_parity.py FOLDER N_PROMPT [GGUF...]
(FOLDER and the GGUFs as bench/make_bench_models.py writes them: models/bench/qwen3-0.6b-hf and its .gguf files).
QKV_FOLDER_AS=FILE: qkv reads FILE in the folder's place (its bf16 GGUF: the same weights, for a folder whose stand-in
tokenizer qkv refuses, e.g. ids with gaps); a GGUF that transformers' GGUF loader cannot read (Qwen3.5) is skipped,
so pass the folder and QKV_FOLDER_AS for it:
    QKV_BIN=build/tools/qkv/qkv QKV_FOLDER_AS=models/bench/qwen3.5-0.8b-bf16.gguf \
        python tests/reference/real_shape_parity.py models/bench/qwen3.5-0.8b-hf 1000"""
import json, os, subprocess, sys
import numpy as np, torch
from transformers import AutoModelForCausalLM

folder, n = sys.argv[1], int(sys.argv[2])
ggufs = sys.argv[3:]
torch.set_num_threads(2)
rng = np.random.default_rng(7)
cfg = json.load(open(folder + "/config.json"))
ids = [int(x) for x in rng.integers(1000, min(cfg["vocab_size"], 100000), size=n)]
NEW = 8

def reference(path):
    if os.path.isdir(path):
        m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    else:
        m = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32, attn_implementation="eager")
    m = m.eval()
    with torch.no_grad():
        t = torch.tensor([ids])
        g = m.generate(t, attention_mask=torch.ones_like(t), do_sample=False, max_new_tokens=NEW, min_new_tokens=NEW,
                       output_scores=True, return_dict_in_generate=True, pad_token_id=0, eos_token_id=None)
    del m
    return (g.sequences[0, n:].tolist(), [torch.log_softmax(s[0].double(), -1) for s in g.scores],
            [float(torch.topk(s[0].double(), 2).values.diff().abs()) for s in g.scores])

for path in [folder] + ggufs:
    try:
        ref_new, ref_lp, margins = reference(path)
    except Exception as e:
        print(f"{os.path.basename(path):28s} transformers cannot load it: {type(e).__name__}: {str(e)[:120]}")
        continue
    qkv_path = os.environ.get("QKV_FOLDER_AS", path) if path == folder else path
    cmd = [os.environ.get("QKV_BIN", "build/tools/qkv"), "--threads", "2", "generate", "--model", qkv_path, "--prompt-ids", ",".join(map(str, ids)),
           "--max-new", str(NEW), "--ignore-eos", "--logprobs", "5", "--json"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[0])
    new = out["new_ids"]
    same = 0
    while same < NEW and new[same] == ref_new[same]:
        same += 1
    worst = max(abs(e["logprob"] - float(ref_lp[k][e["id"]])) for k in range(same) for e in out["logprobs"][k]["top"]) \
        if same else float("nan")
    step0 = out["logprobs"][0]
    diffs = [abs(e["logprob"] - float(ref_lp[0][e["id"]])) for e in step0["top"]]
    top_ref = torch.topk(ref_lp[0], 5).indices.tolist()
    print(f"{os.path.basename(path):28s} {n} prompt tokens: greedy equal for {same}/{NEW}"
          f"{'' if same == NEW else f' (then a top-2 margin of {margins[same]:.3g})'}; step-0 top-5 ids "
          f"{'equal' if [e['id'] for e in step0['top']] == top_ref else 'DIFFER'}, max |logprob diff| {max(diffs):.3g} "
          f"(every step's top-5 before a divergence: {worst:.3g})",
          flush=True)
