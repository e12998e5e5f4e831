"""Medians of bench/models_vs_llamacpp.sh's JSON lines: per model and thread count, llama-bench's
tg128 / pp512, qkv's decode and prefill with the ratio to llama.cpp, the decode's fraction of the
read-bandwidth bound (as `qkv bench generate` measured it) and the bandwidth itself.
Usage: python3 bench/models_summary.py OUT.jsonl"""
import collections
import json
import statistics as st
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
d = collections.defaultdict(list)
for r in rows:
    if "peak" in r:
        print(f"peak {r['peak'].get('gflops', 0):.1f} GFLOP/s on {r['peak'].get('threads')} threads (round {r['round']})")
        continue
    if r.get("r") is None:
        continue
    m = r["model"].split("/")[-1].removesuffix(".gguf")
    if r["tool"] == "qkv":
        j, k = r["r"], (m, r["T"], "qkv-" + r["act"])
        if r["test"] == "decode":
            d[k + ("tg",)].append(j["decode_tokens_per_s"])
            d[k + ("frac",)].append(j["fraction_of_bound"])
            d[k + ("bw",)].append(j["read_gbs"])
        else:
            d[k + ("pp",)].append(j["prefill_tokens_per_s"])
    else:
        for e in r["r"]:
            d[(m, r["T"], "llama.cpp", "pp" if e["n_prompt"] > 0 else "tg")].append(e["avg_ts"])
for m in sorted({k[0] for k in d}):
    for T in (1, 2):
        lt, lp = d.get((m, T, "llama.cpp", "tg")), d.get((m, T, "llama.cpp", "pp"))
        if not lt or not lp:
            continue
        mt, mp = st.median(lt), st.median(lp)
        print(f"{m} T={T}: llama.cpp tg128 {mt:.1f} pp512 {mp:.1f} (n={len(lt)})")
        for a in ("qkv-q8", "qkv-f32"):
            tg, pp = d.get((m, T, a, "tg")), d.get((m, T, a, "pp"))
            if not tg:
                continue
            line = (f"   {a:8s} decode {st.median(tg):6.1f} ({st.median(tg) / mt:.2f}x, "
                    f"{100 * st.median(d[(m, T, a, 'frac')]):.0f}% of the bound, read {st.median(d[(m, T, a, 'bw')]):.1f} GB/s)")
            if pp:
                line += f"  prefill512 {st.median(pp):6.1f} ({st.median(pp) / mp:.2f}x)"
            print(line)
