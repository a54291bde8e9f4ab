#!/usr/bin/python3
"""Markdown tables of a vkh2o-eval --sweep --json file (docs/QUALITY.md is made from them).

usage: scripts/sweep-table.py SWEEP.json
Prints: perplexity, the recurring passage (with --recall) and passkey per policy and cache size
(relative change against the full cache), then the rows sorted by cache bytes (eviction against
quantisation at equal bytes)."""
import json
import sys


def pct(v, base):
    return "%+.2f %%" % (100.0 * (v / base - 1.0))


def acc(v):
    return "-" if v is None else "%.2f" % v


def recall(r):
    """bits/byte of the recurrence against the passage's first occurrence ('-': not run)"""
    first, second = r.get("recall_first_bits"), r.get("recall_second_bits")
    if first is None or second is None:
        return "-"
    return "%.2f (%+.0f %%)" % (second, 100.0 * (second / first - 1.0))


def depths(r, key):
    d = r.get(key)   # {"depth": accuracy, ...}, absent when the test did not run
    return " ".join("%.1f" % v for v in d.values()) if d else "-"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = json.load(open(sys.argv[1]))
    full = [r for r in rows if r["policy"] == "full" and r["kv_quant"] == "none"][0]
    ctx = full["ctx"]
    print("| policy | cache | tokens | bits/byte | ppl/byte | vs full | recurrence bits/byte (vs 1st) "
          "| passkey (compressed) | by depth | passkey (streamed) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["kv_quant"] != "none":
            continue
        share = "100 %" if r["policy"] == "full" else "%.1f %%" % (100.0 * r["cache_tokens"] / ctx)
        ppl = r["ppl"]
        print("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            r["policy"], share, r["cache_tokens"],
            "-" if r["bits_per_byte"] is None else "%.4f" % r["bits_per_byte"],
            "-" if ppl is None else "%.4f" % ppl,
            "-" if ppl is None or r["policy"] == "full" else pct(ppl, full["ppl"]), recall(r),
            acc(r["passkey_acc"]), depths(r, "passkey_by_depth"), acc(r["passkey_stream_acc"])))
    print()
    print("| configuration | cache bytes | vs full bytes | ppl/byte | vs full | recurrence bits/byte (vs 1st) "
          "| passkey (compressed) | passkey (streamed) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["cache_bytes"], r["policy"])):
        if r["ppl"] is None:
            continue
        name = r["policy"] if r["kv_quant"] == "none" else "quantised: " + r["kv_quant"]
        if r["kv_quant"] == "none" and r["policy"] != "full":
            name += " %.1f %%" % (100.0 * r["cache_tokens"] / ctx)
        print("| %s | %d | %.1f %% | %.4f | %s | %s | %s | %s |" % (
            name, r["cache_bytes"], 100.0 * r["cache_bytes"] / full["cache_bytes"], r["ppl"],
            "-" if r is full else pct(r["ppl"], full["ppl"]), recall(r), acc(r["passkey_acc"]), acc(r["passkey_stream_acc"])))


if __name__ == "__main__":
    main()
