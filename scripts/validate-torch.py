#!/usr/bin/python3
"""The seed's multi-step H2O validation as a plain PyTorch loop (CPU), the baseline that
scripts/validate-speed.sh times beside vkh2o-validate in the same run.

Per step and layer, as vkh2o-validate's defaults do (4 layers, 4 heads, q/k 192 = nope 128 +
rope 64, budget 64, 4 sinks, 16 recents, H2O with summed scores):
  - a new token's query, key and value from a seeded generator;
  - latent layout (the default): one row [c_kv (512) | k_pe (64)] shared by the heads, the query
    absorbed (576 numbers a head), the output P . c_kv; expanded: per-head K (192) and V (128);
  - the row appended (FP16, as the cache stores it), attention of the query over every held row,
    each token's score += its mass summed over heads;
  - over the cap (sinks + budget + recents): the middle token of lowest score evicted (ties: the
    higher position goes), its row removed.
Prints one line: steps, seconds, steps per second.
"""
import argparse
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--n-sink", type=int, default=4)
    ap.add_argument("--n-recent", type=int, default=16)
    ap.add_argument("--layout", choices=["latent", "expanded"], default="latent")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    g = torch.Generator().manual_seed(a.seed)
    H = a.heads
    if a.layout == "latent":
        qw, ow = 512 + 64, 512
    else:
        qw, ow = 192, 128
    scale = 192 ** -0.5
    cap = a.n_sink + a.budget + a.n_recent
    keys = [torch.empty(0, H, qw, dtype=torch.float16) if a.layout == "expanded" else torch.empty(0, qw, dtype=torch.float16)
            for _ in range(a.layers)]
    vals = [torch.empty(0, H, ow, dtype=torch.float16) for _ in range(a.layers)]
    pos = [torch.empty(0, dtype=torch.long) for _ in range(a.layers)]
    score = [torch.empty(0, dtype=torch.float32) for _ in range(a.layers)]
    evicted = 0
    t0 = time.perf_counter()
    for step in range(a.steps):
        for l in range(a.layers):
            q = torch.randn(H, qw, generator=g)
            if a.layout == "latent":
                row = torch.randn(qw, generator=g).half()
                keys[l] = torch.cat([keys[l], row[None]])
                K = keys[l].float()                      # [n, qw] shared by the heads
                logits = (q @ K.T) * scale               # [H, n]
                p = torch.softmax(logits, dim=-1)
                out = p @ K[:, :ow]                      # [H, ow]
            else:
                k = torch.randn(H, qw, generator=g).half()
                v = torch.randn(H, ow, generator=g).half()
                keys[l] = torch.cat([keys[l], k[None]])
                vals[l] = torch.cat([vals[l], v[None]])
                K, V = keys[l].float(), vals[l].float()  # [n, H, d]
                logits = torch.einsum("hd,nhd->hn", q, K) * scale
                p = torch.softmax(logits, dim=-1)
                out = torch.einsum("hn,nhd->hd", p, V)
            del out
            pos[l] = torch.cat([pos[l], torch.tensor([step])])
            score[l] = torch.cat([score[l], torch.zeros(1)]) + p.sum(0)
            if pos[l].numel() > cap:
                middle = (pos[l] >= a.n_sink) & (pos[l] + a.n_recent <= step)
                s = torch.where(middle, score[l], torch.full_like(score[l], float("inf")))
                m = s.min()
                # ties: the higher position goes
                victim = int(torch.nonzero(s == m).flatten()[-1])
                keep = torch.ones(pos[l].numel(), dtype=torch.bool)
                keep[victim] = False
                keys[l], pos[l], score[l] = keys[l][keep], pos[l][keep], score[l][keep]
                if a.layout == "expanded":
                    vals[l] = vals[l][keep]
                evicted += 1
    dt = time.perf_counter() - t0
    print("torch loop: %d steps x %d layers (%s, %d heads, cap %d): %.3f s, %.1f steps/s, %d evicted, %d threads"
          % (a.steps, a.layers, a.layout, H, cap, dt, a.steps / dt, evicted, torch.get_num_threads()))


if __name__ == "__main__":
    main()
