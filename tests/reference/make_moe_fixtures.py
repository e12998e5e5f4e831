#!/usr/bin/env python3
"""Fixtures for mixture-of-experts decoders (Mixtral, Qwen3-MoE, OLMoE), made by transformers and llama.cpp's
converter, in the formats make_arch_fixtures.py writes for tests/fixtures/arch/ (whose functions this script imports:
tokenizer, training, greedy runs, float64 reference, conversion).

Run (from any directory; ~2 minutes on one thread; the venv and llama.cpp source of make_arch_fixtures.py, whose
convert() takes the tokenizer and general.name as parameters for folders outside its own table):

    /root/qkv-venv/bin/python tests/reference/make_moe_fixtures.py

Inputs: tests/fixtures/text/kjv_genesis.txt (training text of the tokenizer and the models); the llama.cpp source
(convert_hf_to_gguf.py + conversion/ + gguf-py/, models/templates/Qwen-Qwen3-0.6B.jinja); if present,
tests/fixtures/arch/qwen3/ and tests/fixtures/arch/reference.json, which the rebuilt tokenizer files and the prompt
ids must equal.

Outputs (tests/fixtures/moe/, rewritten from scratch on every run; ~297 KB of files, see "Size"):
  mixtral/    MixtralForCausalLM, bfloat16. 2 layers, hidden 16, 2 heads on 1 key/value head, head_dim 8
              (= hidden/heads, written explicitly), 4 experts (num_local_experts), 2 per token, expert
              intermediate_size 16, sliding_window null, rope_theta 1e6, rms_norm_eps 1e-5; the router always
              renormalises its top-k.
  qwen3_moe/  Qwen3MoeForCausalLM, bfloat16. 2 layers, hidden 16, 2 heads on 1, head_dim 16 (explicit: heads x
              head_dim = 32 != hidden 16, as the real Qwen3 sets head_dim apart from hidden/heads), per-head q_norm /
              k_norm [16], 4 experts, 2 per token, moe_intermediate_size 16 (intermediate_size 1, the smallest
              positive value: it is the width of dense feed-forwards, of which there are none with
              decoder_sparse_step 1 and mlp_only_layers []), norm_topk_prob true (as Qwen3-30B-A3B), rope_theta
              1e6, rms_norm_eps 1e-6. transformers 5 writes the expert count of config.json as "num_local_experts"
              (the real Qwen3-30B-A3B file says "num_experts").
  olmoe/      OlmoeForCausalLM, float16. 2 layers, hidden 16, 2 heads on 1 (head_dim = hidden/heads = 8: the config
              has no head_dim), q_norm an RMSNorm over the whole q projection [16], k_norm over the whole k
              projection [kv_heads x head_dim = 8], 4 experts, 2 per token, intermediate_size 16 (the experts'),
              norm_topk_prob false (as OLMoE-1B-7B), clip_qkv null, rope_theta 1e4, rms_norm_eps 1e-5 (the value
              llama.cpp's converter writes for every OLMoE regardless of the config).
              Every folder holds only config.json and model.safetensors as save_pretrained writes it (per-expert
              2-D tensors: model.layers.N.block_sparse_moe.experts.E.w1 / w2 / w3.weight (gate / down / up) for
              mixtral, model.layers.N.mlp.experts.E.gate_proj / up_proj / down_proj.weight and the router
              model.layers.N.mlp.gate.weight [4, 16] for the others; block_sparse_moe.gate.weight for mixtral).
              No tokenizer.json / tokenizer_config.json (the size budget): the tests use token ids, and the GGUF
              files carry the vocabulary and chat template as the converter writes them. The tokenizer is
              make_arch_fixtures' qwen3 byte-level BPE (vocab 301, <|endoftext|> = 292 = bos / pad id, <|im_end|>
              = 294 = eos id, the Qwen3 chat template; its files are tests/fixtures/arch/qwen3/'s, which the
              rebuilt ones must equal); the script loads it, and runs the converter, from a temporary copy of
              each folder with the tokenizer files added. max_position_embeddings 256. Embeddings are TIED in all
              three (the real models are untied): the size budget (see "Size" below).
  <arch>.gguf  each folder (the temporary copy with the tokenizer) converted by llama.cpp's convert_hf_to_gguf.py
              with --outtype q8_0. Q8_0 blocks are 32 wide, so the converter falls back to F16 for every matrix
              whose rows (the input dimension) are 16 wide: with hidden 16 and experts 16 wide that is all of them
              (token_embd, attn_q / k / v / output, the experts) except qwen3_moe's attn_output (rows heads x
              head_dim = 32: Q8_0); norms and the router ffn_gate_inp stay F32 (the types are in reference.json's
              _meta.gguf_types). bf16 / f16 -> F16 is exact at these magnitudes, so mixtral_gguf and olmoe_gguf are
              the folders' models bit for bit. mixtral becomes GGUF architecture "llama" with attn_q / attn_k rows
              permuted (LlamaModel.permute) and blk.N.ffn_gate_inp (router) + ffn_gate_exps / ffn_up_exps [E, I, H]
              / ffn_down_exps [E, H, I] (numpy order; ggml ne reversed); qwen3_moe -> "qwen3moe" (+
              expert_feed_forward_length 16), olmoe -> "olmoe". Converter patch (as in make_arch_fixtures): the BPE
              pre-tokenizer is named "qwen2" instead of being recognised by a hash. general.name
              "qkv-fixture-<folder>". No GGUF key says whether the top-k weights are renormalised: llama.cpp
              hard-codes it per architecture (llama: yes, qwen3moe: yes, olmoe: no), which matches the folders'
              norm_topk_prob (checked).
  reference.json  per variant (<arch> = the folder through transformers from_pretrained, float32, eager attention,
              eager experts; <arch>_gguf = the GGUF: every tensor dequantized by gguf-py, the converter's changes
              undone (mixtral's attn_q / attn_k row permutation; ffn_gate_exps + ffn_up_exps concatenated into the
              class's 3-D gate_up_proj [E, 2I, H], ffn_down_exps its down_proj [E, H, I], i.e. the per-expert
              weights save_pretrained writes as E 2-D tensors) and loaded into the transformers class with the
              folder's config, which the script checks against the GGUF metadata), in make_arch_fixtures' format:
              texts, prompts (short and longer Genesis excerpts and one chat message through the Qwen3 template with
              enable_thinking=False; the same ids as arch/reference.json's qwen3), the 40 greedy tokens of each,
              the top-2 logit margin of every step, lp_err, route (+ notes, hf_gguf_loader: what transformers' own
              GGUF loader does with the file, recorded, not used: llama -> a LlamaForCausalLM without experts,
              qwen3moe -> size mismatch (head_dim not read), olmoe -> unsupported), seed; and in addition
                routes[prompt][layer][position] = the 2 expert indices transformers' router picks in the float32
                    forward pass of the whole prompt, by descending router probability (forward hooks on the
                    router modules, model.layers.N.mlp.gate in all three classes: transformers 5 names Mixtral's
                    block block_sparse_moe only in the checkpoint);
                route_margins[prompt][layer][position] = p_2 - p_3, the gap between the 2nd and 3rd router
                    probability (softmax over the 4 router logits, float32, 4 significant digits), so a test can
                    skip near-ties.
  logits.safetensors  per variant and prompt: the float64 logits of the last prompt position rounded to float32
              (<name>.p<i>.logits [301]) and max |float32 - float64| over the float64 ones (<name>.p<i>.err, scalar
              float64), as make_arch_fixtures.

Models. transformers' classes and configs with experts_implementation "eager" (the per-expert loop; transformers 5
would pick grouped_mm by default where it can), trained as make_arch_fixtures trains (its train_model: AdamW, lr 5e-3
cosine to 5e-4, batch 16 x 64 tokens, no BOS, one thread, seeded; 300 steps for every family, ARCHS' "steps",
recorded as train_steps), saved with save_pretrained in the folder's dtype (generation_config.json removed). The
routers are not left at torch.zeros: the classes' _init_weights draws them normal(0, initializer_range 0.02) at
construction, seeded like the rest; the script checks after training that they route: if any expert of any layer is
chosen at no prompt position (of the folder or GGUF variant), or any greedy step of either has a top-2 margin <=
1e-3, the architecture is retrained with the next seed (seed + 100); the seed used is recorded. Router near-ties are
not avoided, only recorded (route_margins). The float64 reference is make_arch_fixtures' f64_copy / F64Mode (float64
throughout, checked by its LowPrecisionCheck), routers included.

Size. The repository keeps its fixtures well under 5 MB in all, which leaves this directory ~240 KB; it is ~297 KB of
files (du -sb ~313 KB with the four directories), OVER that budget, though half the 601 KB of the hidden-32 version
(hidden 32, 4 heads on 2, experts 32 wide, tokenizer files in the folders). Parameters: the embedding 301 x 16 = 4.8k
(tied; untied would add as much again), each MoE layer 3.9k (mixtral, olmoe) / 4.7k (qwen3_moe), 4 experts x 3 x 16 x
16 = 3.1k of it: 12.7k / 14.3k / 12.8k per family. Each costs ~4 bytes (2 in the bf16 / f16 folder + 2 in the GGUF,
whose Q8_0 falls back to F16 for 16-wide rows, see above). The fixed parts come to ~137 KB: 46 KB of float64 logits
(23 KB since they are stored rounded to float32),
40 KB of reference.json, ~11.5 KB of vocabulary, merges, chat template and tensor table in each GGUF, ~4.4 KB of
safetensors header (24 per-expert tensors) in each folder, 2.6 KB of config.json. By file: mixtral 29.8 KB folder +
37.3 KB GGUF, qwen3_moe 33.3 + 39.9, olmoe 30.1 + 37.6. Leaving the tokenizer files out saves 31 KB.

Deterministic: re-running gives byte-identical files (fixed seeds, one thread, deterministic algorithms, sorted
safetensors keys) with the same torch / transformers / tokenizers builds and llama.cpp source (versions in
reference.json's _meta).
"""
from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_arch_fixtures as A  # noqa: E402  (sets one thread, deterministic algorithms, quiet transformers)

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402
from transformers import (AutoModelForCausalLM, AutoTokenizer, GptOssConfig, GptOssForCausalLM,  # noqa: E402
                          MixtralConfig, MixtralForCausalLM, OlmoeConfig, OlmoeForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

gguf = A.gguf
OUT = A.ROOT / "tests" / "fixtures" / "moe"
ARCH_OUT = A.ROOT / "tests" / "fixtures" / "arch"
TOK = "qwen3"             # make_arch_fixtures' tokenizer used by every folder
EXPERTS_IMPL = "eager"
TOP_K = 2
N_EXPERTS = 4
HIDDEN = 16
EXPERT_FF = 16
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
GPT_OSS_HIDDEN = 32       # gpt-oss's MXFP4 experts need rows of 32 (its block)
GPT_OSS_CLAMP = 0.25      # a swiglu_limit the tiny model's gate / up values reach (see build_arch)
LLAMA_QUANTIZE = Path(os.environ.get("QKV_LLAMA_QUANTIZE", "/root/peers/llama.cpp-build/bin/llama-quantize"))

ARCHS = {
    # name: model class, folder dtype, GGUF outtype, GGUF architecture, llama.cpp's top-k renormalisation, first seed,
    # training steps
    "mixtral": dict(cls=MixtralForCausalLM, dtype=torch.bfloat16, outtype="q8_0", gguf_arch="llama", norm_w=True,
                    seed=71, steps=300),
    "qwen3_moe": dict(cls=Qwen3MoeForCausalLM, dtype=torch.bfloat16, outtype="q8_0", gguf_arch="qwen3moe",
                      norm_w=True, seed=81, steps=300),
    "olmoe": dict(cls=OlmoeForCausalLM, dtype=torch.float16, outtype="q8_0", gguf_arch="olmoe", norm_w=False,
                  seed=91, steps=300),
    "qwen2_moe": dict(cls=Qwen2MoeForCausalLM, dtype=torch.bfloat16, outtype="q8_0", gguf_arch="qwen2moe",
                      norm_w=False, seed=111, steps=300),
    # gpt-oss: converted to bf16, then llama-quantize MXFP4_MOE (the experts MXFP4, as the published files are).
    "gpt_oss": dict(cls=GptOssForCausalLM, dtype=torch.bfloat16, outtype="bf16", gguf_arch="gpt-oss", norm_w=None,
                    seed=101, steps=300, quantize="MXFP4_MOE"),
}


def make_config(arch: str, tok) -> transformers.PretrainedConfig:
    tid = tok.convert_tokens_to_ids
    common = dict(vocab_size=len(tok), hidden_size=HIDDEN, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, max_position_embeddings=256, num_experts_per_tok=TOP_K,
                  tie_word_embeddings=True, bos_token_id=tid("<|endoftext|>"), eos_token_id=tid("<|im_end|>"),
                  pad_token_id=tid("<|endoftext|>"))
    if arch == "mixtral":
        return MixtralConfig(**common, head_dim=8, intermediate_size=EXPERT_FF, num_local_experts=N_EXPERTS,
                             sliding_window=None, rms_norm_eps=1e-5,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if arch == "qwen3_moe":
        # intermediate_size is the width of dense feed-forwards, of which there are none here (decoder_sparse_step 1,
        # mlp_only_layers []): the smallest positive value (qkv and llama.cpp read it as feed_forward_length).
        return Qwen3MoeConfig(**common, head_dim=16, intermediate_size=1, moe_intermediate_size=EXPERT_FF,
                              num_experts=N_EXPERTS, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                              use_sliding_window=False, rms_norm_eps=1e-6,
                              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if arch == "olmoe":
        return OlmoeConfig(**common, intermediate_size=EXPERT_FF, num_experts=N_EXPERTS, norm_topk_prob=False,
                           clip_qkv=None, rms_norm_eps=1e-5,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    if arch == "qwen2_moe":
        # A shared expert (as wide as the routed ones) beside them; biases on q, k and v (qkv_bias, as Qwen1.5-MoE).
        return Qwen2MoeConfig(**common, intermediate_size=EXPERT_FF, moe_intermediate_size=EXPERT_FF,
                              shared_expert_intermediate_size=EXPERT_FF, num_experts=N_EXPERTS, norm_topk_prob=False,
                              decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False, qkv_bias=True,
                              rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    if arch == "gpt_oss":
        # Untied (llama.cpp's gpt-oss needs output.weight), a sliding window of 8 on layer 0 (layer_types' default:
        # even layers slide) so the prompts and generations cross it, YaRN past an original context of 64 with
        # truncate false (as gpt-oss), swiglu limit / alpha at the defaults llama.cpp hard-codes.
        return GptOssConfig(**dict(common, hidden_size=GPT_OSS_HIDDEN, tie_word_embeddings=False), head_dim=16,
                            intermediate_size=GPT_OSS_HIDDEN, num_local_experts=N_EXPERTS, sliding_window=8,
                            rms_norm_eps=1e-5, attention_bias=True,
                            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                             "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                             "original_max_position_embeddings": 64})
    raise KeyError(arch)


def write_tokenizer(folder: Path) -> None:
    """make_arch_fixtures' qwen3 tokenizer files, checked against tests/fixtures/arch/qwen3/ when present."""
    A.write_tokenizer(TOK, folder)
    assert sorted(f.name for f in folder.iterdir()) == sorted(TOKENIZER_FILES), sorted(folder.iterdir())
    for name in TOKENIZER_FILES:
        committed = ARCH_OUT / "qwen3" / name
        if committed.exists():
            assert committed.read_bytes() == (folder / name).read_bytes(), f"{name} differs from arch/qwen3/"


# ------------------------------------------------------------------------------------------------ routes

def router_of(layer):
    """The router module of a layer (gpt-oss names it mlp.router, the others mlp.gate)."""
    return layer.mlp.router if hasattr(layer.mlp, "router") else layer.mlp.gate


def routes(m32, prompts: list[list[int]]):
    """Per prompt, layer and position: the router's top-k experts (by descending probability) in the float32 forward
    pass of the whole prompt, and the gap between the k-th and (k+1)-th router probability."""
    layers = m32.model.layers
    got = {}
    hooks = [router_of(layer).register_forward_hook(lambda mod, inp, out, i=i: got.__setitem__(i, out))
             for i, layer in enumerate(layers)]
    all_routes, all_margins = [], []
    try:
        for p in prompts:
            got.clear()
            with torch.no_grad():
                m32(torch.tensor([p]))
            pr, pm = [], []
            for i in range(len(layers)):
                logits, _, idx = got[i]
                assert logits.shape == (len(p), N_EXPERTS) and idx.shape == (len(p), TOP_K), (logits.shape, idx.shape)
                probs = torch.softmax(logits.float(), dim=-1)
                top = torch.topk(probs, TOP_K + 1, dim=-1)
                assert torch.equal(top.indices[:, :TOP_K], idx), "router order differs from topk of its softmax"
                pr.append(idx.tolist())
                pm.append([float(f"{x:.4g}") for x in (top.values[:, TOP_K - 1] - top.values[:, TOP_K]).double()])
            all_routes.append(pr)
            all_margins.append(pm)
    finally:
        for h in hooks:
            h.remove()
    return all_routes, all_margins


def expert_use(rts) -> list[list[int]]:
    """How often each expert of each layer is chosen over all prompts and positions."""
    n_layers = len(rts[0])
    use = [[0] * N_EXPERTS for _ in range(n_layers)]
    for pr in rts:
        for i, layer in enumerate(pr):
            for pos in layer:
                for e in pos:
                    use[i][e] += 1
    return use


# ------------------------------------------------------------------------------------------------ GGUF

GGUF_MOE_NAMES = dict(A.GGUF_NAMES, ffn_norm="post_attention_layernorm", ffn_gate_inp="mlp.gate",
                      ffn_gate_shexp="mlp.shared_expert.gate_proj", ffn_up_shexp="mlp.shared_expert.up_proj",
                      ffn_down_shexp="mlp.shared_expert.down_proj", ffn_gate_inp_shexp="mlp.shared_expert_gate")


def gpt_oss_gguf_reference(path: Path, folder_cfg, folder_sd: dict):
    """gpt_oss.gguf's reference model: every tensor dequantized by gguf-py (the MXFP4 experts included), the
    converter's changes undone (ffn_gate_exps / ffn_up_exps [E, I, H] interleaved back into gate_up_proj [E, H, 2I],
    ffn_down_exps [E, H, I] transposed into down_proj [E, I, H], the expert biases re-interleaved), loaded into
    GptOssForCausalLM with the folder's config after checking it against the metadata."""
    r = gguf.GGUFReader(str(path))
    kv = A.gguf_fields(r)
    a = kv["general.architecture"]
    assert a == "gpt-oss", a
    cfg = copy.deepcopy(folder_cfg)
    for value, key in ((cfg.num_hidden_layers, "block_count"), (cfg.hidden_size, "embedding_length"),
                       (cfg.num_attention_heads, "attention.head_count"),
                       (cfg.num_key_value_heads, "attention.head_count_kv"), (N_EXPERTS, "expert_count"),
                       (TOP_K, "expert_used_count"), (cfg.intermediate_size, "expert_feed_forward_length"),
                       (cfg.sliding_window, "attention.sliding_window"),
                       (cfg.max_position_embeddings, "context_length")):
        assert kv[f"{a}.{key}"] == value, (key, kv[f"{a}.{key}"], value)
    for value, key in ((cfg.rms_norm_eps, "attention.layer_norm_rms_epsilon"),
                       (cfg.rope_parameters["rope_theta"], "rope.freq_base"),
                       (cfg.rope_parameters["factor"], "rope.scaling.factor")):
        assert abs(kv[f"{a}.{key}"] - value) <= 1e-6 * abs(value), (key, kv[f"{a}.{key}"], value)
    assert kv[f"{a}.rope.scaling.type"] == "yarn"
    assert kv[f"{a}.rope.scaling.original_context_length"] == cfg.rope_parameters["original_max_position_embeddings"]
    assert cfg.swiglu_limit == 7.0 and abs(cfg.swiglu_alpha - 1.702) < 1e-9  # llama.cpp's fixed constants
    notes = ["llama.cpp's gpt-oss rounds YaRN's correction range (truncate); transformers' config says truncate "
             "false, which the reference (and qkv) follow",
             "swiglu limit 7 / alpha 1.702: llama.cpp's fixed constants, the config's too"]
    names = {"attn_norm": "input_layernorm.weight", "post_attention_norm": "post_attention_layernorm.weight",
             "attn_sinks": "self_attn.sinks", "ffn_gate_inp": "mlp.router"}
    sd, exps, tensors = {}, {}, []
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        tensors.append([t.name, t.tensor_type.name, shape])
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        top = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
               "output.weight": "lm_head.weight"}
        if t.name in top:
            sd[top[t.name]] = w
            continue
        m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", t.name)
        assert m, t.name
        i, g, kind = int(m.group(1)), m.group(2), m.group(3)
        pre = f"model.layers.{i}."
        if g in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
            exps[(i, g, kind)] = w
        elif g in A.GGUF_NAMES:
            sd[pre + A.GGUF_NAMES[g] + "." + kind] = w
        elif g == "ffn_gate_inp":
            sd[pre + "mlp.router." + kind] = w
        else:
            assert kind == "weight", t.name
            sd[pre + names[g]] = w
    for i in range(cfg.num_hidden_layers):
        pre = f"model.layers.{i}.mlp.experts."
        gate, up = exps.pop((i, "ffn_gate_exps", "weight")), exps.pop((i, "ffn_up_exps", "weight"))  # [E, I, H]
        gu = np.empty((N_EXPERTS, cfg.hidden_size, 2 * cfg.intermediate_size), np.float32)
        gu[..., ::2], gu[..., 1::2] = gate.transpose(0, 2, 1), up.transpose(0, 2, 1)
        sd[pre + "gate_up_proj"] = gu
        sd[pre + "down_proj"] = np.ascontiguousarray(exps.pop((i, "ffn_down_exps", "weight")).transpose(0, 2, 1))
        gb, ub = exps.pop((i, "ffn_gate_exps", "bias")), exps.pop((i, "ffn_up_exps", "bias"))  # [E, I]
        gub = np.empty((N_EXPERTS, 2 * cfg.intermediate_size), np.float32)
        gub[:, ::2], gub[:, 1::2] = gb, ub
        sd[pre + "gate_up_proj_bias"] = gub
        sd[pre + "down_proj_bias"] = exps.pop((i, "ffn_down_exps", "bias"))
    assert not exps, sorted(exps)
    sd = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}
    # Every dequantized tensor is the folder's within MXFP4 / Q8_0 rounding (a check of the mapping).
    for k, v in sd.items():
        ref = folder_sd[k].float()
        assert v.shape == ref.shape, (k, v.shape, ref.shape)
        tol = 0.25 if "experts" in k and "bias" not in k else 0.01  # MXFP4: 2 bits of mantissa
        assert float((v - ref).abs().max()) <= float(ref.abs().max()) * tol + 1e-7, (k, float((v - ref).abs().max()))
    cfg.dtype = torch.float32
    model = GptOssForCausalLM(cfg)
    missing, unexpected = model.load_state_dict(sd, strict=True)
    assert not missing and not unexpected, (missing, unexpected)
    info = {"tensors": tensors, "expert_keys": {k: kv[k] for k in sorted(kv) if ".expert" in k}}
    return model.float().eval(), notes, info


def gguf_reference(arch: str, path: Path, folder_cfg, folder_sd: dict):
    """The reference model of a GGUF, built from the file alone as llama.cpp reads it: every tensor dequantized by
    gguf-py, mixtral's attn_q / attn_k rows un-permuted, ffn_gate_exps + ffn_up_exps concatenated into the class's
    gate_up_proj [E, 2I, H] and ffn_down_exps taken as down_proj [E, H, I], loaded into the transformers class with
    the folder's config after checking it against the metadata. Returns (model, notes, info) where info lists the
    tensors (name, type, shape) and the expert keys."""
    spec = ARCHS[arch]
    if arch == "gpt_oss":
        return gpt_oss_gguf_reference(path, folder_cfg, folder_sd)
    r = gguf.GGUFReader(str(path))
    kv = A.gguf_fields(r)
    a = kv["general.architecture"]
    assert a == spec["gguf_arch"], (a, spec["gguf_arch"])
    cfg = copy.deepcopy(folder_cfg)
    notes = []

    def same(value, gkey):
        assert gkey in kv, f"{path.name}: {gkey} missing"
        got = kv[gkey]
        assert (abs(got - value) <= 1e-6 * abs(value) if isinstance(value, float) else got == value), (gkey, got, value)

    same(cfg.num_hidden_layers, f"{a}.block_count")
    same(cfg.hidden_size, f"{a}.embedding_length")
    same(cfg.num_attention_heads, f"{a}.attention.head_count")
    same(cfg.num_key_value_heads, f"{a}.attention.head_count_kv")
    same(cfg.rms_norm_eps, f"{a}.attention.layer_norm_rms_epsilon")
    same(cfg.max_position_embeddings, f"{a}.context_length")
    same(cfg.rope_parameters["rope_theta"], f"{a}.rope.freq_base")
    same(N_EXPERTS, f"{a}.expert_count")
    same(TOP_K, f"{a}.expert_used_count")
    same(cfg.intermediate_size, f"{a}.feed_forward_length")
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    if arch in ("qwen3_moe", "qwen2_moe"):
        same(cfg.moe_intermediate_size, f"{a}.expert_feed_forward_length")
    if arch == "qwen2_moe":
        same(cfg.shared_expert_intermediate_size, f"{a}.expert_shared_feed_forward_length")
    expert_ffn = cfg.moe_intermediate_size if arch in ("qwen3_moe", "qwen2_moe") else cfg.intermediate_size
    if f"{a}.attention.key_length" in kv:
        same(head_dim, f"{a}.attention.key_length")
        same(head_dim, f"{a}.attention.value_length")
    if f"{a}.rope.dimension_count" in kv:
        same(head_dim, f"{a}.rope.dimension_count")
    for key in ("expert_weights_norm", "expert_weights_scale", "expert_gating_func", "expert_shared_count"):
        assert f"{a}.{key}" not in kv, f"{a}.{key}"
    norm_topk = True if arch == "mixtral" else cfg.norm_topk_prob
    assert norm_topk == spec["norm_w"], (arch, norm_topk)
    notes.append(f"no GGUF key for top-k renormalisation: llama.cpp's {a} {'always' if spec['norm_w'] else 'never'} "
                 f"renormalises (norm_w={str(spec['norm_w']).lower()}), as the folder does")

    sd, exps, tensors = {}, {}, []
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]
        tensors.append([t.name, t.tensor_type.name, shape])
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        name = t.name
        if name == "token_embd.weight":
            hf = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            hf = "model.norm.weight"
        elif name == "output.weight":
            hf = "lm_head.weight"
        else:
            m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name)
            assert m, name
            i, g, kind = int(m.group(1)), m.group(2), m.group(3)
            if g in ("ffn_gate_exps", "ffn_up_exps"):
                assert shape == [N_EXPERTS, expert_ffn, cfg.hidden_size], (name, shape)
                exps[(i, g)] = w
                continue
            if g == "ffn_down_exps":
                assert shape == [N_EXPERTS, cfg.hidden_size, expert_ffn], (name, shape)
                hf = f"model.layers.{i}.mlp.experts.down_proj"
            else:
                hf = f"model.layers.{i}.{GGUF_MOE_NAMES[g]}.{kind}"
            if g == "ffn_gate_inp_shexp":  # a Linear(hidden, 1): [1, C] in the class, [C] in the file
                w = w.reshape(1, -1)
            if arch == "mixtral" and g == "attn_q":
                w = A.unpermute(w, cfg.num_attention_heads)
            elif arch == "mixtral" and g == "attn_k":
                w = A.unpermute(w, cfg.num_key_value_heads)
        sd[hf] = torch.from_numpy(np.ascontiguousarray(w))
    for i in range(cfg.num_hidden_layers):
        gate, up = exps.pop((i, "ffn_gate_exps")), exps.pop((i, "ffn_up_exps"))
        sd[f"model.layers.{i}.mlp.experts.gate_up_proj"] = torch.from_numpy(np.concatenate([gate, up], axis=1))
    assert not exps, sorted(exps)
    # Every dequantized tensor is the folder's within Q8_0 rounding (a check of the name / layout mapping).
    for k, v in sd.items():
        ref = folder_sd[k].float()
        assert v.shape == ref.shape, (k, v.shape, ref.shape)
        assert float((v - ref).abs().max()) <= float(ref.abs().max()) / 100 + 1e-7, k
    cfg.dtype = torch.float32
    model = ARCHS[arch]["cls"](cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    assert "lm_head.weight" not in sd and cfg.tie_word_embeddings
    info = {"tensors": tensors, "expert_keys": {k: kv[k] for k in sorted(kv) if ".expert" in k}}
    return model.float().eval(), notes, info


def hf_gguf_loader_outcome(path: Path, ref, prompt: list[int]) -> str:
    """What transformers' own GGUF loader makes of the file (recorded, not used)."""
    m, why = A.hf_gguf_loader(path)
    if m is None:
        return why
    try:
        with torch.no_grad():
            diff = float((m(torch.tensor([prompt])).logits - ref(torch.tensor([prompt])).logits).abs().max())
    except Exception as e:  # noqa: BLE001 - the reason is recorded
        return f"loads as {type(m).__name__}, but fails to run: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    return f"loads as {type(m).__name__}; logits differ from the dequantized route's by {diff:.3g}"


# ------------------------------------------------------------------------------------------------ main

def with_tokenizer(folder: Path, tok_dir: Path, tmp: Path) -> Path:
    """A copy of folder plus the tokenizer files, under tmp / folder.name (the folders are committed without them:
    the tests use token ids, and the GGUF files carry the vocabulary and chat template; llama.cpp's converter and
    AutoTokenizer need them)."""
    full = tmp / folder.name
    if full.exists():
        shutil.rmtree(full)
    full.mkdir(parents=True)
    for f in sorted(folder.iterdir()):
        assert f.name not in TOKENIZER_FILES, f
        shutil.copy(f, full / f.name)
    for f in sorted(tok_dir.iterdir()):
        shutil.copy(f, full / f.name)
    return full


def build_arch(arch: str, tok_dir: Path, tmp: Path, arch_prompts, refs: dict, logits: dict, summary: dict,
               ginfo: dict) -> None:
    spec = ARCHS[arch]
    folder = OUT / arch
    for attempt in range(A.MAX_TRIES):
        seed = spec["seed"] + 100 * attempt
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        cfg = make_config(arch, AutoTokenizer.from_pretrained(str(tok_dir)))
        cfg.save_pretrained(str(folder))
        # AutoTokenizer's choice of class can depend on config.json's model_type: load it from config + tokenizer.
        tok = AutoTokenizer.from_pretrained(str(with_tokenizer(folder, tok_dir, tmp)))
        cfg._attn_implementation = "eager"
        cfg._experts_implementation = EXPERTS_IMPL
        torch.manual_seed(seed)
        model = spec["cls"](cfg)
        assert model.config._experts_implementation == EXPERTS_IMPL
        for layer in model.model.layers:
            assert float(router_of(layer).weight.detach().abs().max()) > 0, "router initialised at zero"
        ids = tok(A.corpus_text(), add_special_tokens=False)["input_ids"]
        loss = A.train_model(model, ids, None, seed, steps=spec["steps"])
        m_save = copy.deepcopy(model).to(spec["dtype"])
        m_save.save_pretrained(str(folder))
        gen = folder / "generation_config.json"
        if gen.exists():
            gen.unlink()
        assert sorted(f.name for f in folder.iterdir()) == ["config.json", "model.safetensors"], list(folder.iterdir())
        full = with_tokenizer(folder, tok_dir, tmp)
        tok = AutoTokenizer.from_pretrained(str(full))
        texts, prompts = A.make_prompts(TOK, tok)
        if arch_prompts is not None:
            assert prompts == arch_prompts, "prompt ids differ from arch/reference.json's qwen3"
        loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager",
                                                      experts_implementation=EXPERTS_IMPL)
        assert type(loaded) is spec["cls"] and loaded.config._experts_implementation == EXPERTS_IMPL
        variants = {arch: (loaded, {"source": f"{arch}/", "route": "transformers from_pretrained(folder), float32, "
                                    "experts_implementation eager"})}
        gpath = OUT / f"{arch}.gguf"
        if spec.get("quantize"):  # converted, then quantized by llama-quantize
            raw = Path(tmp) / f"{arch}-{spec['outtype']}.gguf"
            A.convert(arch, full, raw, outtype=spec["outtype"], tok=TOK, model_name=f"qkv-fixture-{arch}")
            q = subprocess.run([str(LLAMA_QUANTIZE), str(raw), str(gpath), spec["quantize"], "1"],
                               capture_output=True, text=True)
            if q.returncode != 0:
                sys.stderr.write(q.stdout[-4000:] + q.stderr[-4000:])
                raise RuntimeError(f"llama-quantize failed for {arch}")
        else:
            A.convert(arch, full, gpath, outtype=spec["outtype"], tok=TOK, model_name=f"qkv-fixture-{arch}")
        gmodel, notes, info = gguf_reference(arch, gpath, loaded.config, loaded.state_dict())
        ginfo[arch] = info
        route = {"source": gpath.name, "outtype": spec["outtype"],
                 "converter_patch": f"get_vocab_base_pre -> {A.TOKENIZERS[TOK]['gguf_pre']}",
                 "route": "gguf-py dequantize + transformers class",
                 "hf_gguf_loader": hf_gguf_loader_outcome(gpath, gmodel, prompts[0]), "notes": notes}
        variants[f"{arch}_gguf"] = (gmodel, route)
        results, worst, unused = {}, float("inf"), False
        for name, (m, vinfo) in variants.items():
            gens, margins, lg, errs = A.run_variant(m, prompts)
            rts, rms = routes(m.float().eval(), prompts)
            use = expert_use(rts)
            unused = unused or any(min(u) == 0 for u in use)
            results[name] = (vinfo, gens, margins, lg, errs, rts, rms)
            worst = min(worst, min(min(x) for x in margins))
            low = min(min(min(layer) for layer in p) for p in rms)
            print(f"  {name}: expert use per layer {use}, min route margin {low:.3g}", flush=True)
        print(f"{arch}: seed {seed} loss {loss:.3f} min margin {worst:.3g}{', an expert unused' if unused else ''}",
              flush=True)
        if worst > A.MIN_MARGIN and not unused:
            break
    else:
        raise RuntimeError(f"{arch}: no seed gave margins > {A.MIN_MARGIN} and every expert in use")
    for name, (vinfo, gens, margins, lg, errs, rts, rms) in results.items():
        refs[name] = dict(vinfo, seed=seed, train_steps=spec["steps"], texts=texts, prompts=prompts, generated=gens,
                          margins=[[float(f"{x:.7g}") for x in mg] for mg in margins], lp_err=errs,
                          routes=rts, route_margins=rms)
        for i, (l, e) in enumerate(zip(lg, errs)):
            logits[f"{name}.p{i}.logits"] = l.float()  # the float64 reference, rounded to float32
            logits[f"{name}.p{i}.err"] = torch.tensor(e, dtype=torch.float64)
        summary[name] = min(min(x) for x in margins)
    if arch == "gpt_oss":
        # The clamp of the experts' SwiGLU at a limit it reaches (the trained weights stay below 7): the folder's
        # model with limit GPT_OSS_CLAMP, its float64 last prompt logits (gpt_oss_clamped.p<i>.logits / .err; not a
        # variant of reference.json: the tests load the folder and set the limit) and how far they moved.
        mc = copy.deepcopy(variants[arch][0]).float().eval()
        mc.config.swiglu_limit = GPT_OSS_CLAMP
        for layer in mc.model.layers:
            layer.mlp.experts.limit = GPT_OSS_CLAMP
        _, _, lgc, errc = A.run_variant(mc, prompts)
        moved = max(float((a - b).abs().max()) for a, b in zip(lgc, results[arch][3]))
        assert moved > 1e-2, f"swiglu limit {GPT_OSS_CLAMP} does not change the logits ({moved})"
        for i, (l, e) in enumerate(zip(lgc, errc)):
            logits[f"gpt_oss_clamped.p{i}.logits"] = l.float()  # the float64 reference, rounded to float32
            logits[f"gpt_oss_clamped.p{i}.err"] = torch.tensor(e, dtype=torch.float64)
        refs[arch]["clamp_check"] = {"swiglu_limit": GPT_OSS_CLAMP, "max_logit_change": float(f"{moved:.4g}")}


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    arch_prompts = None
    arch_ref = ARCH_OUT / "reference.json"
    if arch_ref.exists():
        arch_prompts = json.loads(arch_ref.read_text(encoding="utf-8"))["qwen3"]["prompts"]
    refs, logits, summary, ginfo = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = Path(tmp) / "tokenizer" / TOK
        tok_dir.mkdir(parents=True)
        write_tokenizer(tok_dir)
        for arch in ARCHS:
            build_arch(arch, tok_dir, Path(tmp) / "with_tokenizer", arch_prompts, refs, logits, summary, ginfo)
    meta = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__},
            "new_tokens": A.NEW, "min_margin": A.MIN_MARGIN, "top_k": TOP_K, "experts": N_EXPERTS,
            "converter": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/convert_hf_to_gguf.py",
            "gguf_types": {arch: sorted({f"{n.split('.', 2)[-1] if n.startswith('blk.') else n}:{t}"
                                         for n, t, _ in info["tensors"]}) for arch, info in ginfo.items()}}
    with open(OUT / "reference.json", "w", encoding="utf-8") as f:
        json.dump({"_meta": meta, **refs}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    save_file(logits, str(OUT / "logits.safetensors"))
    for name, m in summary.items():
        print(f"{name:16s} min top-2 margin {m:.4g}  route: {refs[name]['route']}")
    for arch, info in ginfo.items():
        print(f"{arch}.gguf expert keys: {info['expert_keys']}")
    for p in sorted(OUT.rglob("*")):
        if p.is_file():
            print(f"{p.stat().st_size:8d}  {p.relative_to(OUT)}")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"total size of {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
