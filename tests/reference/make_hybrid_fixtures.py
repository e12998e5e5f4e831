#!/usr/bin/env python3
"""Fixtures for hybrid decoders whose layers are not all softmax attention (Qwen3.5's Gated DeltaNet linear
attention), made by transformers and llama.cpp's converter, in the formats make_arch_fixtures.py writes for
tests/fixtures/arch/ (whose functions this script imports: tokenizer, training, greedy runs, float64 reference,
conversion).

Run (from any directory; ~1 minute on one thread; the venv and llama.cpp source of make_arch_fixtures.py):

    /root/qkv-venv/bin/python tests/reference/make_hybrid_fixtures.py

Inputs: tests/fixtures/text/kjv_genesis.txt (training text of the tokenizer and the model); the llama.cpp source
(convert_hf_to_gguf.py + conversion/ + gguf-py/, models/templates/Qwen-Qwen3-0.6B.jinja); if present,
tests/fixtures/arch/qwen3/ and tests/fixtures/arch/reference.json, which the rebuilt tokenizer files and the prompt
ids must equal.

Outputs (tests/fixtures/hybrid/, rewritten from scratch on every run):
  qwen3_5/    Qwen3_5ForCausalLM (model_type qwen3_5_text), bfloat16. 3 layers with layer_types [linear_attention,
              full_attention, linear_attention] (not the real every-fourth rule: a pattern only the list gives),
              hidden 16, intermediate 16, tied embeddings, rms_norm_eps 1e-6, max_position_embeddings 256.
              Linear attention (Gated DeltaNet): 2 key heads, 4 value heads (2 value heads per key head, so
              llama.cpp's converter reorders the value heads: see below), key and value head dims 8, convolution
              kernel 4. Full attention: 2 heads on 1 key/value head, head_dim 16 (heads x head_dim = 32 != hidden),
              the output gate (q_proj 2 x 32 rows, query and gate interleaved per head), q_norm / k_norm,
              partial_rotary_factor 0.25 (4 rotary dims), rope_theta 1e7. Every RMSNorm but the linear attention's
              gated one computes x * (1 + w). The folder holds only config.json and model.safetensors (the size
              budget); the tokenizer is make_arch_fixtures' qwen3 byte-level BPE (vocab 301, <|endoftext|> = 292,
              <|im_end|> = 294, the Qwen3 chat template), added to a temporary copy for the converter and
              AutoTokenizer.
  qwen3_5_moe/  Qwen3_5MoeForCausalLM (model_type qwen3_5_moe_text), bfloat16: 2 layers [linear_attention,
              full_attention] with qwen3_5's attention sizes, and in every layer a mixture of 4 experts of 16 (2 per
              token, softmax then top-k, renormalised) plus a shared expert of 16 weighed by
              sigmoid(h . shared_expert_gate). save_pretrained writes the experts one tensor each
              (mlp.experts.E.gate_proj / up_proj / down_proj).
  qwen3_5.gguf  the folder (with the tokenizer) converted by llama.cpp's convert_hf_to_gguf.py, --outtype bf16 (the
              matrices are the folder's bits). GGUF architecture "qwen35": attn_qkv / attn_gate (in_proj_qkv /
              in_proj_z), ssm_alpha / ssm_beta (in_proj_a / in_proj_b), ssm_a = -exp(A_log) (float32), ssm_dt.bias
              (dt_bias), ssm_conv1d [C, K], ssm_norm (not offset), ssm_out; post_attention_norm is the feed-forward's
              pre-norm; norms stored as 1 + w. The value heads of every linear-attention tensor are permuted from
              transformers' grouped order (value head h reads key head h / 2) to the tiled order (h reads h % 2).
              qwen3_5_moe.gguf: architecture "qwen35moe", the experts as 3-D ffn_{gate,up,down}_exps, the router
              ffn_gate_inp, the shared expert ffn_*_shexp and its gate ffn_gate_inp_shexp, no feed_forward_length.
              Converter patch (as in make_arch_fixtures): the BPE pre-tokenizer is named "qwen2". --no-mtp (the
              converter otherwise requires the multi-token-prediction layers of the published checkpoints, which
              qkv does not run and the tiny model does not have).
  reference.json  per variant (qwen3_5 = the folder through transformers from_pretrained, float32, eager attention;
              qwen3_5_gguf = the GGUF: every tensor dequantized by gguf-py, the converter's changes undone (value
              heads back to the grouped order, A_log = log(-ssm_a), norms - 1, conv1d [C, 1, K]) and loaded into
              Qwen3_5ForCausalLM with the config its metadata describes, which the script checks against the
              folder's): texts and prompt ids (make_arch_fixtures' three prompts through the qwen3 tokenizer), the
              greedy continuation of each (40 tokens, KV + recurrent cache, one prompt at a time), top-2 margins,
              the float32 error of the last-position logits, the training seed.
  logits.safetensors  per variant and prompt: the float64 last-position logits rounded to float32
              (<name>.p<i>.logits [V]) and max |float32 - float64| over the float64 ones (<name>.p<i>.err).

float64: make_arch_fixtures' F64Mode / LowPrecisionCheck (the Gated DeltaNet's explicit float32 casts become
float64 too). transformers runs the chunked form of the delta rule (chunk 64) on a prompt and the recurrent form
on each generated token, in float32.

Deterministic: re-running gives byte-identical files (fixed seeds, one thread, deterministic algorithms) with the
same torch / transformers / tokenizers builds and llama.cpp source (versions in reference.json's _meta).
"""
from __future__ import annotations

import copy
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_arch_fixtures as A  # noqa: E402  (sets one thread, deterministic algorithms, quiet transformers)
import make_moe_fixtures as M  # noqa: E402  (the qwen3 tokenizer files, the temporary copy with them)

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.models.qwen3_5 import Qwen3_5ForCausalLM, Qwen3_5TextConfig  # noqa: E402
from transformers.models.qwen3_5_moe import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig  # noqa: E402

gguf = A.gguf
OUT = A.ROOT / "tests" / "fixtures" / "hybrid"
TOK = "qwen3"

ARCHS = {
    "qwen3_5": dict(cls=Qwen3_5ForCausalLM, dtype=torch.bfloat16, outtype="bf16", seed=71, steps=300,
                    convert_args=("--no-mtp",)),
    "qwen3_5_moe": dict(cls=Qwen3_5MoeForCausalLM, dtype=torch.bfloat16, outtype="bf16", seed=81, steps=300,
                        convert_args=("--no-mtp",)),
}


def make_config(arch: str, tok) -> transformers.PretrainedConfig:
    tid = tok.convert_tokens_to_ids
    if arch == "qwen3_5":
        return Qwen3_5TextConfig(
            vocab_size=len(tok), hidden_size=16, intermediate_size=16, num_hidden_layers=3,
            layer_types=["linear_attention", "full_attention", "linear_attention"],
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_conv_kernel_dim=4, rms_norm_eps=1e-6, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            bos_token_id=tid("<|endoftext|>"), eos_token_id=tid("<|im_end|>"), pad_token_id=tid("<|endoftext|>"))
    if arch == "qwen3_5_moe":
        return Qwen3_5MoeTextConfig(
            vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=256,
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_conv_kernel_dim=4, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
            shared_expert_intermediate_size=16, rms_norm_eps=1e-6, tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
            bos_token_id=tid("<|endoftext|>"), eos_token_id=tid("<|im_end|>"), pad_token_id=tid("<|endoftext|>"))
    raise KeyError(arch)


# ------------------------------------------------------------------------------------------------ GGUF

def regroup_v(w: np.ndarray, dim: int, hk: int, per_k: int, d: int) -> np.ndarray:
    """Inverse of the converter's _reorder_v_heads: the value heads of `dim` from the tiled order (value head j =
    v * hk + k reads key head k) back to the grouped one (value head k * per_k + v)."""
    shape = list(w.shape)
    assert shape[dim] == hk * per_k * d, (shape, dim)
    w = w.reshape(shape[:dim] + [per_k, hk, d] + shape[dim + 1:])
    return np.ascontiguousarray(np.swapaxes(w, dim, dim + 1).reshape(shape))


GGUF_FULL = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
             "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
GGUF_LINEAR = {"attn_qkv": "linear_attn.in_proj_qkv", "attn_gate": "linear_attn.in_proj_z",
               "ssm_beta": "linear_attn.in_proj_b", "ssm_alpha": "linear_attn.in_proj_a",
               "ssm_a": "linear_attn.A_log", "ssm_dt": "linear_attn.dt_bias", "ssm_conv1d": "linear_attn.conv1d",
               "ssm_norm": "linear_attn.norm", "ssm_out": "linear_attn.out_proj"}
GGUF_COMMON = {"attn_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
               "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
               "ffn_gate_inp": "mlp.gate", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
               "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj",
               "ffn_gate_inp_shexp": "mlp.shared_expert_gate"}
GGUF_EXPERTS = {"ffn_gate_exps": "gate_proj", "ffn_up_exps": "up_proj", "ffn_down_exps": "down_proj"}


def gguf_reference(path: Path, folder_cfg, folder_sd: dict):
    """The GGUF's model from the file alone, as llama.cpp reads it. Returns (model, notes, info)."""
    r = gguf.GGUFReader(str(path))
    kv = A.gguf_fields(r)
    a = kv["general.architecture"]
    moe = a == "qwen35moe"
    assert a in ("qwen35", "qwen35moe"), a
    cfg = copy.deepcopy(folder_cfg)
    notes = []

    def same(value, gkey):
        got = kv[gkey]
        got = list(got) if isinstance(got, (list, tuple)) else got
        assert (abs(got - value) <= 1e-6 * abs(value) if isinstance(value, float) else got == value), (gkey, got, value)

    same(cfg.num_hidden_layers, f"{a}.block_count")
    same(cfg.hidden_size, f"{a}.embedding_length")
    if moe:
        same(cfg.num_experts, f"{a}.expert_count")
        same(cfg.num_experts_per_tok, f"{a}.expert_used_count")
        same(cfg.moe_intermediate_size, f"{a}.expert_feed_forward_length")
        same(cfg.shared_expert_intermediate_size, f"{a}.expert_shared_feed_forward_length")
        assert f"{a}.feed_forward_length" not in kv, "a dense width in a qwen35moe file"
    else:
        same(cfg.intermediate_size, f"{a}.feed_forward_length")
    same(cfg.num_attention_heads, f"{a}.attention.head_count")
    same(cfg.num_key_value_heads, f"{a}.attention.head_count_kv")
    same(cfg.head_dim, f"{a}.attention.key_length")
    same(cfg.rms_norm_eps, f"{a}.attention.layer_norm_rms_epsilon")
    same(cfg.max_position_embeddings, f"{a}.context_length")
    same(cfg.rope_parameters["rope_theta"], f"{a}.rope.freq_base")
    same(int(cfg.head_dim * cfg.rope_parameters["partial_rotary_factor"]), f"{a}.rope.dimension_count")
    same(cfg.linear_conv_kernel_dim, f"{a}.ssm.conv_kernel")
    same(cfg.linear_key_head_dim, f"{a}.ssm.state_size")
    same(cfg.linear_num_key_heads, f"{a}.ssm.group_count")
    same(cfg.linear_num_value_heads, f"{a}.ssm.time_step_rank")
    same(cfg.linear_value_head_dim * cfg.linear_num_value_heads, f"{a}.ssm.inner_size")
    assert [bool(x) for x in kv[f"{a}.attention.recurrent_layers"]] == \
        [t == "linear_attention" for t in cfg.layer_types], kv[f"{a}.attention.recurrent_layers"]
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, per_k = cfg.linear_key_head_dim, cfg.linear_value_head_dim, hv // hk
    qk = 2 * hk * dk
    sd, types = {}, []
    for t in r.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(x) for x in reversed(t.shape)])
        types.append((t.name, t.tensor_type.name, [int(x) for x in reversed(t.shape)]))
        name = t.name
        if name == "token_embd.weight":
            sd["model.embed_tokens.weight"] = w
            continue
        if name == "output_norm.weight":
            sd["model.norm.weight"] = w - 1.0
            continue
        m = re.fullmatch(r"blk\.(\d+)\.(\w+?)(\.weight|\.bias|)", name)
        assert m, name
        i, g = int(m.group(1)), m.group(2)
        if g in GGUF_EXPERTS:  # [E, rows, cols]: one matrix per expert
            for e in range(w.shape[0]):
                sd[f"model.layers.{i}.mlp.experts.{e}.{GGUF_EXPERTS[g]}.weight"] = np.ascontiguousarray(w[e])
            continue
        if g == "ffn_gate_inp_shexp":
            w = w.reshape(1, -1)
        part = GGUF_COMMON.get(g) or (GGUF_LINEAR if cfg.layer_types[i] == "linear_attention" else GGUF_FULL)[g]
        if g in ("attn_norm", "post_attention_norm", "attn_q_norm", "attn_k_norm"):
            w = w - 1.0
        if g == "attn_qkv":
            w = np.concatenate([w[:qk], regroup_v(w[qk:], 0, hk, per_k, dv)])
        elif g == "attn_gate":
            w = regroup_v(w, 0, hk, per_k, dv)
        elif g in ("ssm_beta", "ssm_alpha", "ssm_dt"):
            w = regroup_v(w, 0, hk, per_k, 1)
        elif g == "ssm_a":
            w = np.log(-regroup_v(w, 0, hk, per_k, 1).astype(np.float64)).astype(np.float32)
        elif g == "ssm_conv1d":
            w = np.concatenate([w[:qk], regroup_v(w[qk:], 0, hk, per_k, dv)])[:, None, :]
        elif g == "ssm_out":
            w = regroup_v(w, 1, hk, per_k, dv)
        key = f"model.layers.{i}.{part}." + ("weight" if g not in ("ssm_a", "ssm_dt") else "")
        sd[key.rstrip(".")] = w
    # How far the undone tensors are from the folder's (the matrices are its bits; A_log passes through -exp and
    # log in float32 / float64).
    worst = {}
    for k, w in sd.items():
        want = folder_sd[k].float().numpy()
        assert w.shape == want.shape, (k, w.shape, want.shape)
        worst[k.split(".", 3)[-1] if k.startswith("model.layers.") else k] = max(
            worst.get(k, 0.0), float(np.abs(w - want).max()))
    big = {k: v for k, v in worst.items() if v > (1e-6 if k.endswith("A_log") else 0.0)}
    assert not big, big
    cfg.dtype = torch.float32
    cfg._experts_implementation = "eager"
    if moe:  # transformers 5 holds each layer's experts fused: gate_up_proj [E, 2F, C], down_proj [E, C, F]
        for i in range(cfg.num_hidden_layers):
            ex = f"model.layers.{i}.mlp.experts"
            n = cfg.num_experts
            sd[f"{ex}.gate_up_proj"] = np.stack([np.concatenate([sd.pop(f"{ex}.{e}.gate_proj.weight"),
                                                                 sd.pop(f"{ex}.{e}.up_proj.weight")]) for e in range(n)])
            sd[f"{ex}.down_proj"] = np.stack([sd.pop(f"{ex}.{e}.down_proj.weight") for e in range(n)])
    model = (Qwen3_5MoeForCausalLM if moe else Qwen3_5ForCausalLM)(cfg)
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    notes.append("undone tensors equal the folder's (matrices bit for bit; A_log within "
                 f"{max(v for k, v in worst.items() if k.endswith('A_log')):.3g})")
    return model.float().eval(), notes, {"tensors": types}


# ------------------------------------------------------------------------------------------------ main

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
        tok = AutoTokenizer.from_pretrained(str(M.with_tokenizer(folder, tok_dir, tmp)))
        cfg._attn_implementation = "eager"
        cfg._experts_implementation = "eager"  # (the grouped-mm default has no float64)
        torch.manual_seed(seed)
        model = spec["cls"](cfg)
        ids = tok(A.corpus_text(), add_special_tokens=False)["input_ids"]
        loss = A.train_model(model, ids, None, seed, steps=spec["steps"])
        m_save = copy.deepcopy(model).to(spec["dtype"])
        m_save.save_pretrained(str(folder))
        gen = folder / "generation_config.json"
        if gen.exists():
            gen.unlink()
        assert sorted(f.name for f in folder.iterdir()) == ["config.json", "model.safetensors"], list(folder.iterdir())
        full = M.with_tokenizer(folder, tok_dir, tmp)
        tok = AutoTokenizer.from_pretrained(str(full))
        texts, prompts = A.make_prompts(TOK, tok)
        if arch_prompts is not None:
            assert prompts == arch_prompts, "prompt ids differ from arch/reference.json's qwen3"
        loaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32, attn_implementation="eager",
                                                      **({"experts_implementation": "eager"} if "moe" in arch else {}))
        assert type(loaded) is spec["cls"], type(loaded)
        variants = {arch: (loaded, {"source": f"{arch}/", "route": "transformers from_pretrained(folder), float32"})}
        gpath = OUT / f"{arch}.gguf"
        A.convert(arch, full, gpath, outtype=spec["outtype"], tok=TOK, model_name=f"qkv-fixture-{arch}",
                  extra_args=spec.get("convert_args", ()))
        gmodel, notes, info = gguf_reference(gpath, loaded.config, load_file(str(folder / "model.safetensors")))
        ginfo[arch] = info
        route = {"source": gpath.name, "outtype": spec["outtype"],
                 "converter_patch": f"get_vocab_base_pre -> {A.TOKENIZERS[TOK]['gguf_pre']}",
                 "route": "gguf-py dequantize + transformers class",
                 "hf_gguf_loader": M.hf_gguf_loader_outcome(gpath, gmodel, prompts[0]), "notes": notes}
        variants[f"{arch}_gguf"] = (gmodel, route)
        results, worst = {}, float("inf")
        for name, (m, vinfo) in variants.items():
            gens, margins, lg, errs = A.run_variant(m, prompts)
            results[name] = (vinfo, gens, margins, lg, errs)
            worst = min(worst, min(min(x) for x in margins))
        print(f"{arch}: seed {seed} loss {loss:.3f} min margin {worst:.3g}", flush=True)
        if worst > A.MIN_MARGIN:
            break
    else:
        raise RuntimeError(f"{arch}: no seed gave margins > {A.MIN_MARGIN}")
    for name, (vinfo, gens, margins, lg, errs) in results.items():
        refs[name] = dict(vinfo, seed=seed, train_steps=spec["steps"], texts=texts, prompts=prompts, generated=gens,
                          margins=[[float(f"{x:.7g}") for x in mg] for mg in margins], lp_err=errs)
        for i, (l, e) in enumerate(zip(lg, errs)):
            logits[f"{name}.p{i}.logits"] = l.float()  # the float64 reference, rounded to float32
            logits[f"{name}.p{i}.err"] = torch.tensor(e, dtype=torch.float64)
        summary[name] = min(min(x) for x in margins)


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    arch_prompts = None
    arch_ref = M.ARCH_OUT / "reference.json"
    if arch_ref.exists():
        arch_prompts = json.loads(arch_ref.read_text(encoding="utf-8"))["qwen3"]["prompts"]
    refs, logits, summary, ginfo = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tok_dir = Path(tmp) / "tokenizer" / TOK
        tok_dir.mkdir(parents=True)
        M.write_tokenizer(tok_dir)
        for arch in ARCHS:
            build_arch(arch, tok_dir, Path(tmp) / "with_tokenizer", arch_prompts, refs, logits, summary, ginfo)
    meta = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "tokenizers": tokenizers.__version__},
            "new_tokens": A.NEW, "min_margin": A.MIN_MARGIN,
            "converter": "llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/convert_hf_to_gguf.py",
            "gguf_types": {arch: sorted({f"{n.split('.', 2)[-1] if n.startswith('blk.') else n}:{t}"
                                         for n, t, _ in info["tensors"]}) for arch, info in ginfo.items()}}
    with open(OUT / "reference.json", "w", encoding="utf-8") as f:
        json.dump({"_meta": meta, **refs}, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    save_file(logits, str(OUT / "logits.safetensors"))
    for name, m in summary.items():
        print(f"{name:16s} min top-2 margin {m:.4g}  route: {refs[name]['route']}")
    for p in sorted(OUT.rglob("*")):
        if p.is_file():
            print(f"{p.stat().st_size:8d}  {p.relative_to(OUT)}")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"total size of {OUT}: {total} bytes")


if __name__ == "__main__":
    main()
