#!/usr/bin/env python3
"""Perplexity against cache bytes on the committed model: a policy sweep a researcher starts from.

For each cache size (a fraction of the full FP16 cache), evict-only policies at that many tokens
(h2o, tova, streaming) and the one cache at that many bytes (uniform INT4 evicting to fit, tiers by
bytes FP16 -> INT8 -> INT4), each measured as vkh2o-eval measures it (vkh2o.eval), plotted as bits
per byte against the bytes the session's caches take, the full cache as a line.

    python3 python/examples/policy_sweep.py --out sweep.png            # ctx 256, 4 windows: ~1 min on lavapipe
    python3 python/examples/policy_sweep.py --ctx 64 --windows 1 --fracs 0.5,0.25 --out small.png
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "python"))   # run from the tree without installing

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import vkh2o  # noqa: E402
import vkh2o.eval as ev  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(SRC, "models", "tiny-mla"))
    ap.add_argument("--text", default=os.path.join(SRC, "models", "tiny-mla", "eval.txt"))
    ap.add_argument("--ctx", type=int, default=256, help="window (tokens)")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--fracs", default="0.5,0.25,0.125", help="cache sizes, fractions of the full cache")
    ap.add_argument("--configs", default="h2o,tova,streaming,int4,tiered",
                    help="which of h2o, tova, streaming (tokens), int4, tiered (bytes)")
    ap.add_argument("--out", default="policy_sweep.png")
    a = ap.parse_args()
    fracs = [float(f) for f in a.fracs.split(",")]
    text = open(a.text, "rb").read()
    known = {"h2o": ("h2o", dict(policy="h2o")), "tova": ("tova", dict(policy="tova")),
             "streaming": ("streaming", dict(policy="streaming")),
             "int4": ("h2o, INT4 in bytes", dict(policy="h2o", kv="int4")),
             "tiered": ("h2o, tiers by bytes", dict(policy="h2o", kv="tiered"))}
    try:
        configs = [known[c] for c in a.configs.split(",")]
    except KeyError as e:
        ap.error("--configs: %s is not one of %s" % (e, ", ".join(known)))
    with vkh2o.Context() as ctx:
        model = ev.load_model(ctx, a.model, ctx_len=a.ctx)
        full = ev.evaluate(model, text, ctx_len=a.ctx, windows=a.windows)
        print("%-22s %6s %10s %9s" % ("config", "size", "bytes", "bits/B"))
        print("%-22s %6s %10d %9.4f" % ("full", "100%", full["cache_bytes"], full["bits_per_byte"]))
        series = {}
        for name, kw in configs:
            for f in fracs:
                # sinks and recents scale with the cache, as vkh2o-eval --sweep does: at most a quarter each
                total = int(f * a.ctx + 1e-9)
                sr = dict(n_sink=min(4, total // 4), n_recent=min(16, total // 4))
                if "kv" in kw:   # the one cache at f of the full FP16 cache's bytes
                    row = ev.evaluate(model, text, ctx_len=a.ctx, windows=a.windows, bytes_frac=f, **sr, **kw)
                else:            # f of the window's tokens
                    row = ev.evaluate(model, text, ctx_len=a.ctx, windows=a.windows,
                                      budget=total - sr["n_sink"] - sr["n_recent"], **sr, **kw)
                series.setdefault(name, []).append((row["cache_bytes"], row["bits_per_byte"]))
                print("%-22s %5.1f%% %10d %9.4f" % (name, 100 * f, row["cache_bytes"], row["bits_per_byte"]))
        if ctx.validation_messages:
            sys.exit("policy_sweep: %d validation-layer messages" % ctx.validation_messages)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhline(full["bits_per_byte"], color="black", lw=1, ls="--", label="full cache")
    for name, pts in series.items():
        pts.sort()
        ax.plot([p[0] / 1024 for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xlabel("cache bytes, all layers (KiB)")
    ax.set_ylabel("bits per byte")
    ax.set_title("%s: ctx %d, %d windows" % (os.path.basename(os.path.normpath(a.model)), a.ctx, a.windows))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
