#!/usr/bin/env python3
"""qkv vs PyTorch: the balanced TinyTextClassifier run (300 epochs, lr 3e-3,
full-batch Adam, 200 train / 200 validation, accuracy every 10 epochs), one
thread each, interleaved repetitions, medians and the ratio.

PyTorch side: the tutorial's model built from nn.TransformerEncoderLayer
(d_model 16, nhead 4, dim_feedforward 32, dropout 0.1, post-norm ReLU,
batch_first) + interleaved sinusoidal PE + Linear on token 0; the data set is
the same task (label 1 iff tokens 3 and 7 both appear), balanced by rejection.
qkv side: `qkv train classify --balanced --epochs 300 --lr 3e-3 --threads 1
--json`, timed as the whole process (start-up, data, training, evaluation) and
also by its own "seconds" field (the training loop alone).

usage: /root/qkv-venv/bin/python bench/compare_pytorch_train.py [--qkv build/tools/qkv/qkv] [--reps 5]
"""
import argparse
import json
import math
import statistics
import subprocess
import time

import torch
import torch.nn as nn


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=32):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        pos = torch.arange(0, max_len).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class TinyTextClassifier(nn.Module):
    def __init__(self, vocab_size=20, d_model=16, nhead=4, d_ff=32, num_layers=2, num_classes=2, dropout=0.1):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, d_ff, dropout, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, x):
        x = self.encoder(self.pos_encoding(self.embedding(x)))
        return self.classifier(x[:, 0, :])


def make_data(n, gen, seq_len=8, vocab=20):
    xs, ys, pos, neg = [], [], 0, 0
    while len(xs) < n:
        x = torch.randint(1, vocab, (seq_len,), generator=gen)
        y = int(bool((x == 3).any() and (x == 7).any()))
        if (y and pos >= n // 2) or (not y and neg >= n - n // 2):
            continue
        pos, neg = pos + y, neg + (1 - y)
        xs.append(x)
        ys.append(y)
    perm = torch.randperm(n, generator=gen)
    return torch.stack(xs)[perm], torch.tensor(ys)[perm]


def run_torch(seed, epochs=300, lr=3e-3):
    gen = torch.Generator().manual_seed(seed)
    xt, yt = make_data(200, gen)
    xv, yv = make_data(200, gen)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    model = TinyTextClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    val_acc = 0.0
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        loss = loss_fn(model(xt), yt)
        loss.backward()
        opt.step()
        if (epoch + 1) % 10 == 0:
            model.eval()
            with torch.no_grad():
                _ = (model(xt).argmax(-1) == yt).float().mean()
                val_acc = (model(xv).argmax(-1) == yv).float().mean().item()
    return time.perf_counter() - t0, val_acc


def run_qkv(binary, seed):
    cmd = [binary, "train", "classify", "--balanced", "--epochs", "300", "--lr", "3e-3", "--threads", "1",
           "--json", "--no-progress", "--seed", str(seed)]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    done = [json.loads(line) for line in out.splitlines() if '"done"' in line][-1]
    return wall, done["seconds"], done["val_acc"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", default="build/tools/qkv/qkv")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    run_torch(a.seed, epochs=20)  # warm-up (lazy init, allocator)
    tt, tq, tql = [], [], []
    for r in range(a.reps):  # interleaved: both see the same machine load
        t, acc_t = run_torch(a.seed)
        w, s, acc_q = run_qkv(a.qkv, a.seed)
        tt.append(t)
        tq.append(w)
        tql.append(s)
        print(f"rep {r + 1}: pytorch {t:.3f}s (val acc {acc_t:.3f})   qkv {w:.3f}s process, {s:.3f}s loop "
              f"(val acc {acc_q:.3f})", flush=True)
    mt, mq, ml = statistics.median(tt), statistics.median(tq), statistics.median(tql)
    print(f"median: pytorch {mt:.3f}s, qkv {mq:.3f}s (whole process; training loop {ml:.3f}s)")
    print(f"speed-up qkv vs pytorch: {mt / mq:.2f}x (whole process), {mt / ml:.2f}x (training loop)")


if __name__ == "__main__":
    main()
