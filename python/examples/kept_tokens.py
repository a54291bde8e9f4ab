#!/usr/bin/env python3
"""Which tokens a cache kept, and at which tier, after a prompt: notebook-sized.

The committed model's first attention layer reads a prompt (its bytes embedded and normed as the
model does) into a tiered KV cache through the layer's prefill; the cache keeps the sinks and the
recents at FP16 and ranks the middle tokens by their attention mass into FP16, INT8 and INT4 pools,
evicting the rest. Then a few tokens are decoded one at a time, each step scoring, demoting and
evicting. After each, the prompt is printed with a line under it: F fp16, 8 int8, 4 int4, 2 int2,
. evicted; and the heaviest hitters with their scores.

    python3 python/examples/kept_tokens.py
    python3 python/examples/kept_tokens.py --capacity 24 --tiers 4,4,0,0 --decode 8 --text "The pass key is 12345. ..."
"""
import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(SRC, "python"))   # run from the tree without installing

import vkh2o  # noqa: E402

MARK = {"fp16": "F", "int8": "8", "int4": "4", "int2": "2"}
PROMPT = ("The grass is green. The sky is blue. The pass key is 71432. Remember it. "
          "The sun is yellow. Here we go. What is the pass key?")


def embed(st, layer, tokens, eps):
    """The layer's input: embedding rows, RMS-normed with the layer's input_layernorm (as the model does)."""
    x = st["model.embed_tokens.weight"][np.frombuffer(tokens, np.uint8)].astype(np.float64)
    w = st["model.layers.%d.input_layernorm.weight" % layer]
    return (x / np.sqrt((x * x).mean(1, keepdims=True) + eps) * w).astype(np.float32)


def show(text, snap, title):
    tier_at = {int(p): t for p, t in zip(snap.positions, snap.tier_names)}
    counts = {t: int((np.array(snap.tier_names) == t).sum()) for t in MARK if t in snap.tier_names}
    print("%s: %d of %d tokens held (%s)" % (title, len(snap), len(text),
                                             ", ".join("%s %d" % kv for kv in counts.items())))
    for i in range(0, len(text), 64):
        print("  " + "".join(chr(c) if 32 <= c < 127 else "?" for c in text[i:i + 64]))
        print("  " + "".join(MARK[tier_at[p]] if p in tier_at else "." for p in range(i, min(i + 64, len(text)))))
    top = np.argsort(-snap.scores, kind="stable")[:8]
    print("  heaviest: " + ", ".join("%d %r %.2f" % (snap.positions[k], chr(text[snap.positions[k]]), snap.scores[k])
                                     for k in top))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=os.path.join(SRC, "models", "tiny-mla"))
    ap.add_argument("--layer", type=int, default=0)
    ap.add_argument("--text", default=PROMPT)
    ap.add_argument("--capacity", type=int, default=48, help="tokens the cache holds")
    ap.add_argument("--decode", type=int, default=16, help="tokens decoded after the prompt (the text's, repeated)")
    ap.add_argument("--tiers", default="8,16,0,0", help="middle tokens at FP16, INT8, INT4, INT2 (0: the rest)")
    a = ap.parse_args()
    text = a.text.encode()
    extra = (text * (1 + a.decode // max(len(text), 1)))[:a.decode]
    tiers = [int(x) for x in a.tiers.split(",")]
    with vkh2o.Context() as ctx:
        layer = vkh2o.MLALayer(ctx, a.model, layer=a.layer, max_seq_len=len(text))
        st = vkh2o.SafeTensors(os.path.join(a.model, "model.safetensors"))
        eps = layer.config["rms_norm_eps"]
        cache = layer.kvcache(max_tokens=len(text) + len(extra), capacity_tokens=a.capacity, n_sink=4, n_recent=8,
                              policy="h2o", score_mode="sum", precision="tiered", tier_tokens=tiers)
        print("cache: %s, %d bytes per layer (FP16 %d, INT8 %d, INT4 %d bytes a token)" % (
            cache, cache.plan_bytes, cache.token_bytes("fp16"), cache.token_bytes("int8"), cache.token_bytes("int4")))
        layer.prefill(cache, embed(st, a.layer, text, eps))
        show(text, cache.snapshot(), "after the %d-byte prompt" % len(text))
        if extra:
            layer.decode(cache, embed(st, a.layer, extra, eps))
            s = cache.stats()
            show(text + extra, cache.snapshot(), "after %d decoded tokens (%d demoted from FP16, %d evicted in all)" % (
                len(extra), s["demoted"][0], s["evicted"]))
        if ctx.validation_messages:
            sys.exit("kept_tokens: %d validation-layer messages" % ctx.validation_messages)


if __name__ == "__main__":
    main()
