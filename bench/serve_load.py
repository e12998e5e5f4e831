#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (qkv serve, llama.cpp's llama-server).

N concurrent streaming clients each send chat completions of mixed prompt lengths (slices of a
text file, 4 lengths in turn) with --max-tokens new tokens, until --requests requests in all have
been answered. Reports aggregate tokens/s and requests/s, time-to-first-token p50/p99,
inter-token latency p50/p99 (gaps between content chunks of a stream), and the server's resident
memory before and after (with --spawn, which starts the server itself and stops it afterwards).

  python3 bench/serve_load.py --clients 16 --requests 32 \\
      --spawn "build/tools/qkv/qkv --threads 2 serve --model M.gguf --parallel 16 --ctx 1024 --port {port} --quiet"
  python3 bench/serve_load.py --url http://127.0.0.1:8080 --clients 4 --requests 8

Only the standard library (http.client, threads). Not run by CI or make test.
"""
import argparse
import http.client
import json
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def prompts_from(path, count):
    """`count` prompts of 4 lengths in turn (about 15, 60, 150 and 300 words of the text)."""
    with open(path, encoding="utf-8") as f:
        words = f.read().split()
    lengths = [15, 60, 150, 300]
    out, at = [], 0
    for i in range(count):
        n = lengths[i % len(lengths)]
        if at + n > len(words):
            at = 0
        out.append("Continue this text in the same style:\n\n" + " ".join(words[at:at + n]))
        at += n
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def wait_healthy(host, port, timeout):
    until = time.time() + timeout
    while time.time() < until:
        try:
            c = http.client.HTTPConnection(host, port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


def one_request(host, port, prompt, args, rec):
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": args.max_tokens,
            "temperature": args.temperature, "seed": args.seed, "stream": True,
            "stream_options": {"include_usage": True}}
    if args.model:
        body["model"] = args.model
    if args.ignore_eos:
        body["ignore_eos"] = True  # llama.cpp's extension, which qkv serve reads too
    t0 = time.perf_counter()
    c = http.client.HTTPConnection(host, port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        rec["errors"].append(f"{r.status} {r.read()[:200]!r}")
        return
    first, last, chunks, usage = None, None, 0, None
    gaps = []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        j = json.loads(data)
        if j.get("usage"):
            usage = j["usage"]
        for ch in j.get("choices", []):
            if ch.get("delta", {}).get("content"):
                now = time.perf_counter()
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
                chunks += 1
    c.close()
    if first is None:
        rec["errors"].append("no content")
        return
    tokens = usage["completion_tokens"] if usage else chunks
    with rec["lock"]:
        rec["ttft"].append(first - t0)
        rec["itl"].extend(gaps)
        rec["tokens"] += tokens
        rec["done"] += 1


def run_load(host, port, args, pid=None):
    prompts = prompts_from(args.text, args.requests)
    rec = {"lock": threading.Lock(), "ttft": [], "itl": [], "tokens": 0, "done": 0, "errors": []}
    next_i = [0]
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next_i[0]
                if i >= len(prompts):
                    return
                next_i[0] += 1
            try:
                one_request(host, port, prompts[i], args, rec)
            except Exception as e:  # noqa: BLE001 - counted and reported
                rec["errors"].append(repr(e))

    rss_before = rss_kib(pid) if pid else 0
    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "label": args.label, "clients": args.clients, "requests": rec["done"], "errors": len(rec["errors"]),
        "first_errors": rec["errors"][:3], "max_tokens": args.max_tokens, "wall_s": round(wall, 2),
        "tokens": rec["tokens"], "tokens_per_s": round(rec["tokens"] / wall, 1),
        "requests_per_s": round(rec["done"] / wall, 3),
        "ttft_p50_ms": round(1000 * percentile(rec["ttft"], 50), 1),
        "ttft_p99_ms": round(1000 * percentile(rec["ttft"], 99), 1),
        "itl_p50_ms": round(1000 * percentile(rec["itl"], 50), 1),
        "itl_p99_ms": round(1000 * percentile(rec["itl"], 99), 1),
        "rss_before_mib": round(rss_before / 1024, 1), "rss_after_mib": round(rss_kib(pid) / 1024, 1) if pid else 0,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080", help="the server (ignored with --spawn)")
    ap.add_argument("--spawn", help="a server command to start, {port} replaced by a free port; stopped at the end")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=8, help="requests in all")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ignore-eos", action="store_true", help="every request runs to --max-tokens")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--model", default="", help="the request's model field (default: none)")
    ap.add_argument("--text", default="data/kjv.txt", help="text the prompts are cut from")
    ap.add_argument("--warmup", type=int, default=1, help="requests sent alone first, not counted")
    ap.add_argument("--label", default="")
    args = ap.parse_args()

    proc = None
    if args.spawn:
        port = free_port()
        host = "127.0.0.1"
        cmd = shlex.split(args.spawn.replace("{port}", str(port)))
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not wait_healthy(host, port, 120):
            proc.kill()
            sys.exit("the server did not become healthy within 120 s: " + args.spawn)
    else:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port or 80
    try:
        if args.warmup:
            w = argparse.Namespace(**vars(args))
            w.clients, w.requests = 1, args.warmup
            run_load(host, port, w)
        result = run_load(host, port, args, proc.pid if proc else None)
        result["command"] = args.spawn or args.url
        print(json.dumps(result))
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


if __name__ == "__main__":
    main()
