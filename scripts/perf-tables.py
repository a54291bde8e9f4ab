#!/usr/bin/env python3
"""Markdown tables from vkh2o-bench --json output (--decode, --policy-cost, --kv-decode, --scaling rows), as
docs/PERFORMANCE.md shows them:  python3 scripts/perf-tables.py decode.json [scaling.json ...]"""
import json
import sys


def ms(r):
    return "%.1f" % r["median_ms"] if r.get("median_ms") is not None else "-"


def num(r, key, fmt, scale=1.0):
    """a measured field of an ok row, formatted; '-' when the row did not run or lacks it"""
    return fmt % (scale * r[key]) if r.get("status") == "ok" and r.get(key) is not None else "-"


def status(r):
    if r.get("status") == "ok":
        return "ok" + (" (%s)" % r["reason"] if r.get("reason") else "")
    return "%s: %s" % (r["status"], r.get("reason", ""))


def main():
    rows = []
    for path in sys.argv[1:]:
        rows += json.load(open(path))
    read = [r for r in rows if r["name"].startswith("read ")]
    if read:
        print("| read probe | ms | GB/s |\n|---|---|---|")
        for r in read:
            print("| %s | %.2f | %.2f |" % (r["name"], r["median_ms"], r["gbps"]))
        print()
    g = lambda name: [r for r in rows if r.get("group") == name]
    if g("decode"):
        print("| decode step | ms | MB moved | MB minimum | GB/s | of read bandwidth | GFLOP/s | status |\n"
              "|---|---|---|---|---|---|---|---|")
        for r in g("decode"):
            print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["name"], ms(r), num(r, "bytes", "%.1f", 1e-6), num(r, "bytes_min", "%.1f", 1e-6), num(r, "gbps", "%.2f"),
                num(r, "read_fraction", "%.0f %%", 100), "%.2f" % r["gflops"] if r.get("gflops") else "-", status(r)))
        print()
    if g("policy"):
        # each configuration's reference: the full cache's row of the same name prefix
        refs = {r["name"].split(": ")[0]: r for r in g("policy") if r["status"] == "ok" and r.get("param") == "none"}
        print("| policy (cache step at the cap) | ms | the policy vs the full cache's step, ms | share of the step | status |\n"
              "|---|---|---|---|---|")
        for r in g("policy"):
            ok = r["status"] == "ok"
            ref = refs.get(r["name"].split(": ")[0])
            d = r["median_ms"] - ref["median_ms"] if ok and ref and r.get("param") != "none" else None
            print("| %s | %s | %s | %s | %s |" % (
                r["name"], ms(r), "%.2f" % d if d is not None else "-",
                "%.0f %%" % (100 * d / r["median_ms"]) if d is not None else "-", status(r)))
        print()
    if g("kv-decode"):
        print("| kv-decode step | ms | speed vs fp16 | MB moved | MB minimum | status |\n|---|---|---|---|---|---|")
        for r in g("kv-decode"):
            print("| %s | %s | %s | %s | %s | %s |" % (
                r["name"], ms(r), num(r, "ratio_vs_fp16", "%.2fx"), num(r, "bytes", "%.1f", 1e-6),
                num(r, "bytes_min", "%.1f", 1e-6), status(r)))
        print()
    # the forward and decode scaling rows: size, time, a rate and a share
    for grp, head, rate, fmt, share in (
            ("scaling-forward", "forward, S | ms | GFLOP/s | attention's share", "gflops", "%.1f", "attention_share"),
            ("scaling-decode", "decode, cache tokens | ms | GB/s | of read bandwidth", "gbps", "%.2f", "read_fraction")):
        if not g(grp):
            continue
        print("| %s | status |\n|---|---|---|---|---|" % head)
        for r in g(grp):
            print("| %d | %s | %s | %s | %s |" % (r["size"], ms(r), num(r, rate, fmt), num(r, share, "%.0f %%", 100),
                                                 status(r)))
        print()
    for grp, title in (("scaling-h2o", "kvcache step, H2O (all layers, one token each), ms"),
                       ("scaling-prefill", "prefill selection (32 x budget tokens into the cap, once per layer), ms")):
        rs = g(grp)
        if not rs:
            continue
        layers = sorted({r["layers"] for r in rs})
        budgets = sorted({r["size"] for r in rs})
        print("| %s: budget \\ layers | %s |\n|---|%s" % (title, " | ".join(str(l) for l in layers), "---|" * len(layers)))
        notes = []
        for b in budgets:
            cells = []
            for l in layers:
                r = [x for x in rs if x["size"] == b and x["layers"] == l]
                if not r:
                    cells.append("")
                elif r[0]["status"] == "ok":
                    cells.append(ms(r[0]))
                else:
                    cells.append(r[0]["status"])
                    if r[0]["reason"] not in notes:
                        notes.append(r[0]["reason"])
            print("| %d | %s |" % (b, " | ".join(cells)))
        for n in notes:
            print("\n%s" % n)
        print()


if __name__ == "__main__":
    main()
