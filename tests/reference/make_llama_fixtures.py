#!/usr/bin/env python3
"""Fixtures for the Llama family (tests/models/test_llama*.cpp), made by transformers.

Writes tests/fixtures/llama_family/:
  llama/    LlamaForCausalLM, float32, GQA 4 query heads on 2 key/value heads, llama3 rope scaling,
            untied head                                   (config.json + model.safetensors)
  mistral/  MistralForCausalLM, bfloat16, multi-query (1 key/value head), sliding window 8, tied
  qwen2/    Qwen2ForCausalLM, float16, q/k/v biases, tied, sharded in two files
            (model.safetensors.index.json + model-0000{1,2}-of-00002.safetensors)
  llama_q8_0.gguf   the llama model without rope scaling as llama.cpp's converter writes it
                    (architecture llama, attn_q / attn_k rows permuted, Q8_0 weights, F32 norms,
                    F16 embedding)
  qwen2_mixed.gguf  the qwen2 model (architecture qwen2, not permuted) with Q4_0 / Q4_1 / Q5_0 /
                    Q5_1 / Q8_0 / F16 / BF16 weights mixed across tensors
  reference.json    per model: prompts (token ids of mixed lengths), the greedy continuation of
                    each (generate(do_sample=False), 40 new tokens, alone, with the KV cache) and
                    the top-2 margin of every step; for SmolLM2 (models/SmolLM2-135M-Instruct.Q4_1.gguf
                    dequantized by transformers) chat prompts rendered by its template.
  logits.safetensors  per model and prompt: the logits of the prompt's last 4 positions in
                    float64 (<name>.p<i>.f64 [4, V]) and max |float32 - float64| over them
                    (<name>.p<i>.err, scalar) — the R1 rule's reference and bound; for SmolLM2 the
                    top 256 logits of the last position (<name>.p<i>.top_ids / .top_f64) instead.

Run from the repository root with the venv that has torch, transformers, gguf and numpy:
  /root/qkv-venv/bin/python tests/reference/make_llama_fixtures.py
It reads models/SmolLM2-135M-Instruct.Q4_1.gguf (make models fetches it). Re-running gives the same
files (fixed seeds, deterministic CPU kernels).
"""
import json
import os
import sys

import numpy as np
import torch
import gguf
from safetensors.torch import save_file
from transformers import (AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUT = os.path.join(ROOT, "tests", "fixtures", "llama_family")
SMOL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
V = 128
NEW = 40

torch.set_num_threads(1)


def tiny(kind):
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=256, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
    torch.manual_seed({"llama": 1, "mistral": 2, "qwen2": 3}[kind])
    if kind == "llama":
        c = LlamaConfig(**common, num_key_value_heads=2, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 32})
        m = LlamaForCausalLM(c)
    elif kind == "mistral":
        c = MistralConfig(**common, num_key_value_heads=1, sliding_window=8, tie_word_embeddings=True,
                          rope_parameters={"rope_type": "default", "rope_theta": 1000.0})
        m = MistralForCausalLM(c)
    else:
        c = Qwen2Config(**common, num_key_value_heads=2, tie_word_embeddings=True,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
        m = Qwen2ForCausalLM(c)
    # Larger weights than the 0.02 initialisation, so the logits are far from uniform and the
    # greedy tokens are decided by clear margins.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 / p.shape[-1] ** 0.5 if p.dim() == 2 else 0.1))
    return m.eval()


def save_folder(m, kind):
    d = os.path.join(OUT, kind)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    dtype = {"llama": torch.float32, "mistral": torch.bfloat16, "qwen2": torch.float16}[kind]
    m2 = m.to(dtype)
    m2.save_pretrained(d, safe_serialization=True, max_shard_size="30KB" if kind == "qwen2" else "100MB")
    gen = os.path.join(d, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)
    m.to(torch.float32)
    return d


def permute(w, n_head):  # llama.cpp's convert_hf_to_gguf LlamaModel.permute
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(m, kind, path, types):
    c = m.config
    arch = kind
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(V)
    if kind == "llama":
        w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    # A byte-level vocabulary of V tokens (ids only are used by the tests).
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"t{i}" for i in range(V)])
    w.add_token_types([1] * V)
    w.add_token_merges([])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    sd = {k: v.detach().float().numpy() for k, v in m.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
           "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
           "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
           "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
           "self_attn.v_proj.bias": "attn_v.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
           "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(c.num_hidden_layers):
        for k, v in per.items():
            names[f"model.layers.{i}.{k}"] = f"blk.{i}.{v}"
    for hf, arr in sd.items():
        if hf == "lm_head.weight" and c.tie_word_embeddings:
            continue
        g = names[hf]
        if kind == "llama" and ".attn_q." in g:
            arr = permute(arr, c.num_attention_heads)
        elif kind == "llama" and ".attn_k." in g:
            arr = permute(arr, c.num_key_value_heads)
        t = types(g, arr)
        if arr.ndim == 1 or t == gguf.GGMLQuantizationType.F32:
            w.add_tensor(g, arr.astype(np.float32))
        elif t == gguf.GGMLQuantizationType.F16:
            w.add_tensor(g, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(arr.astype(np.float32), t)
            w.add_tensor(g, q, raw_shape=q.shape, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def plain_copy(m):
    """The same architecture and weights as an ordinary float32 module (transformers marks models
    loaded from GGUF as quantized and refuses .float() / .double() on them)."""
    p = type(m)(m.config)
    p.load_state_dict(m.state_dict())
    return p.float().eval()


def run(m, prompts, name, refs, logits):
    """Greedy continuations (float32) and last-position logits (float64 vs float32)."""
    m = plain_copy(m)
    m32 = m
    out = {"prompts": prompts, "generated": [], "margins": []}
    for i, p in enumerate(prompts):
        ids = torch.tensor([p])
        with torch.no_grad():
            g = m32.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW,
                             min_new_tokens=NEW, output_scores=True, return_dict_in_generate=True,
                             pad_token_id=0, eos_token_id=None)
        new = g.sequences[0, len(p):].tolist()
        margins = []
        for s in g.scores:
            top = torch.topk(s[0].double(), 2).values
            margins.append(float(top[0] - top[1]))
        out["generated"].append(new)
        out["margins"].append(margins)
    m64 = m.double().eval()
    for i, p in enumerate(prompts):
        ids = torch.tensor([p])
        with torch.no_grad():
            l64 = m64(ids).logits[0, -4:].double()
            l32 = m32_logits(m, ids)[-4:].double()
        logits[f"{name}.p{i}.f64"] = l64.contiguous()
        logits[f"{name}.p{i}.err"] = torch.tensor((l32 - l64).abs().max().item(), dtype=torch.float64)
    m.float()
    refs[name] = out


def m32_logits(m, ids):
    m32 = m.float().eval()
    with torch.no_grad():
        return m32(ids).logits[0]


def prompts_for(seed, lengths):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, V, (n,), generator=g).tolist() for n in lengths]


def main():
    os.makedirs(OUT, exist_ok=True)
    refs, logits = {}, {}
    lengths = [5, 13, 21]
    models = {k: tiny(k) for k in ("llama", "mistral", "qwen2")}
    for kind, m in models.items():
        save_folder(m, kind)
        # The reference runs the weights as saved (bf16 / f16 rounded), loaded back in float32.
        loaded = AutoModelForCausalLM.from_pretrained(os.path.join(OUT, kind), dtype=torch.float32)
        run(loaded, prompts_for(10 + len(kind), lengths), kind, refs, logits)

    # GGUF: llama without rope scaling (transformers' GGUF loader has no rope_scaling), Q8_0.
    plain = tiny("llama")
    plain.config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    plain = LlamaForCausalLM(plain.config).eval()
    plain.load_state_dict(tiny("llama").state_dict())
    Q = gguf.GGMLQuantizationType
    write_gguf(plain, "llama", os.path.join(OUT, "llama_q8_0.gguf"),
               lambda name, a: Q.F16 if name == "token_embd.weight" else (Q.F32 if a.ndim == 1 else Q.Q8_0))
    mixed = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0, Q.F16, Q.BF16]
    counter = iter(range(1000))
    write_gguf(models["qwen2"], "qwen2", os.path.join(OUT, "qwen2_mixed.gguf"),
               lambda name, a: Q.F32 if a.ndim == 1 else mixed[next(counter) % len(mixed)])
    for f, name in (("llama_q8_0.gguf", "llama_gguf"), ("qwen2_mixed.gguf", "qwen2_gguf")):
        loaded = AutoModelForCausalLM.from_pretrained(OUT, gguf_file=f, dtype=torch.float32)
        run(loaded, prompts_for(30 + len(name), lengths), name, refs, logits)

    if os.path.exists(SMOL):
        smol_dir, smol_file = os.path.split(SMOL)
        tok = AutoTokenizer.from_pretrained(smol_dir, gguf_file=smol_file)
        model = plain_copy(AutoModelForCausalLM.from_pretrained(smol_dir, gguf_file=smol_file, dtype=torch.float32))
        chats = [
            [{"role": "user", "content": "What is the capital of France?"}],
            [{"role": "system", "content": "You are a concise assistant."},
             {"role": "user", "content": "Name three primary colors."}],
            [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello! How can I help?"},
             {"role": "user", "content": "Write a haiku about the sea."}],
        ]
        prompts, texts = [], []
        for c in chats:
            text = tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
            texts.append(text)
            prompts.append(tok(text, add_special_tokens=False)["input_ids"])
        out = {"chats": chats, "texts": texts, "prompts": prompts, "generated": [], "margins": []}
        for p in prompts:
            ids = torch.tensor([p])
            with torch.no_grad():
                g = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW,
                                   min_new_tokens=NEW, output_scores=True, return_dict_in_generate=True,
                                   pad_token_id=2, eos_token_id=None)
            out["generated"].append(g.sequences[0, len(p):].tolist())
            out["margins"].append([float(torch.topk(s[0].double(), 2).values.diff().abs()) for s in g.scores])
        refs["smollm2"] = out
        m64 = model.double()
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            with torch.no_grad():
                l64 = m64(ids).logits[0, -1]
            l32 = m32_logits(model, ids)[-1].double()
            top = torch.topk(l64, 256)
            logits[f"smollm2.p{i}.top_ids"] = top.indices.to(torch.int64).contiguous()
            logits[f"smollm2.p{i}.top_f64"] = top.values.contiguous()
            logits[f"smollm2.p{i}.err"] = torch.tensor((l32 - l64).abs().max().item(), dtype=torch.float64)
            model.double()
    else:
        print(f"warning: {SMOL} missing (run make models); SmolLM2 references not written", file=sys.stderr)

    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(refs, f, separators=(",", ":"))
        f.write("\n")
    save_file(logits, os.path.join(OUT, "logits.safetensors"))
    for kind in refs:
        gens = refs[kind]["margins"]
        print(kind, "min top-2 margin", min(min(x) for x in gens))


if __name__ == "__main__":
    main()
