#!/usr/bin/python3
"""Markdown table of the one KV cache at byte capacities (vkh2o-eval --byte-sweep --json, or several
--json files of single --kv rows; docs/QUALITY.md "At a byte capacity" is made from it).

usage: scripts/byte-table.py FILE.json [FILE.json ...]
Rows are grouped by capacity (kv_capacity: the fraction of the full FP16 cache's bytes a row was
given; a cache that needs less, such as INT4 holding every token, holds less), best perplexity first;
"vs full" compares with the full cache of the same file set (the forward: policy full, no --kv).
The recurrence is the passage's bits/byte at its recurrence, the mean over its three depths, and
its change against the full cache's recurrence; passkey compressed and streamed."""
import json
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    rows = []
    for f in sys.argv[1:]:
        rows += json.load(open(f))
    full = [r for r in rows if r["policy"] == "full" and r["kv_quant"] == "none"][0]
    # the base of the capacities: the full FP16 cache's bytes (2 bytes per latent number, every
    # position, every layer; vkh2o-eval writes it on the forward's row as fp16_bytes; files from
    # before it have the same figure as the forward's cache_bytes)
    fp16 = float(full.get("fp16_bytes", full["cache_bytes"]))
    fr = full.get("recall_second_bits")

    def val(v, fmt):
        return "-" if v is None else fmt % v

    print("| capacity | policy | cache | tokens held | bytes held | ppl/byte | vs full | recurrence bits/byte "
          "(vs full) | early / middle / late | passkey | streamed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    keyed = []
    for r in rows:
        if not r["kv_quant"].startswith("kv-"):
            continue
        cap = r["cache_bytes"] / fp16
        asked = r.get("kv_capacity", 1.0 if r["policy"] == "full" else cap)   # the capacity the row was given
        keyed.append((-asked, r["ppl"] if r["ppl"] is not None else 1e9, r, cap, asked))
    for _, _, r, cap, asked in sorted(keyed, key=lambda k: (k[0], k[1])):
        rec = r.get("recall_second_bits")
        bd = r.get("recall_by_depth") or {}
        depths = " / ".join("%.2f" % bd[d]["second_bits"] for d in ("early", "middle", "late") if d in bd) or "-"
        print("| %s | %s | %s | %d | %.1f %% | %s | %s | %s | %s | %s | %s |" % (
            "100 %" if r["policy"] == "full" else "%.2f %%" % (100.0 * asked),
            r["policy"], r["kv_quant"][3:], r["cache_tokens"], 100.0 * cap, val(r["ppl"], "%.4f"),
            "-" if r["ppl"] is None else "%+.2f %%" % (100.0 * (r["ppl"] / full["ppl"] - 1.0)),
            "-" if rec is None else "%.3f (%+.1f %%)" % (rec, 100.0 * (rec / fr - 1.0)) if fr else "%.3f" % rec,
            depths, val(r["passkey_acc"], "%.2f"), val(r["passkey_stream_acc"], "%.2f")))
    print()
    print("Full cache (forward): ppl/byte %.4f, recurrence %s bits/byte, passkey %s / %s streamed." % (
        full["ppl"], val(fr, "%.3f"), val(full["passkey_acc"], "%.2f"), val(full["passkey_stream_acc"], "%.2f")))


if __name__ == "__main__":
    main()
