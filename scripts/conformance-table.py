#!/usr/bin/env python3
"""Markdown summary of vkh2o-conformance --json runs: one row per op (cases, passed, failed, not
supported, the worst error as a fraction of its bound) and, for a --mode perf run, the device's
roofline and per op the median ms, GB/s, GFLOP/s and the lowest and median fraction of the
roofline, then the cases furthest from their roofline. scripts/gpu-check.sh writes its summary
with it; docs/PERFORMANCE.md shows its lavapipe output.
    python3 scripts/conformance-table.py RUN.json [RUN.json ...]"""
import json
import statistics
import sys


def ops_table(d):
    ops = {}
    for c in d["cases"]:
        ops.setdefault(c["op"], []).append(c)
    print("| op | cases | pass | fail | not supported | could not run | worst error / bound |")
    print("|---|---|---|---|---|---|---|")
    for op, cs in ops.items():
        n = {s: sum(1 for c in cs if c["status"] == s) for s in ("PASS", "SUPPORTED", "FAIL", "NOT_SUPPORTED", "ERROR")}
        n["PASS"] += n["SUPPORTED"]
        ratios = [c["error"] / c["bound"] for c in cs if "error" in c and c.get("bound", 0) > 0]
        exact = [c for c in cs if "error" in c and c.get("bound") == 0]
        worst = "%.2g" % max(ratios) if ratios else ("exact" if exact and all(c["error"] == 0 for c in exact) else "-")
        print("| %s | %d | %d | %d | %d | %d | %s |" % (op, len(cs), n["PASS"], n["FAIL"], n["NOT_SUPPORTED"], n["ERROR"], worst))


def perf_table(d):
    r = d.get("roofline")
    if not r:
        return
    print("\nRoofline of %s: read %.2f GB/s (storage buffer), %.2f GB/s (texel buffer), FMA %.2f GFLOP/s; "
          "one dispatch %.3f ms.\n" % (d["device"]["name"], r["read_gbps"], r["read_texel_gbps"], r["gflops"],
                                        r.get("dispatch_ms", 0)))
    timed = [c for c in d["cases"] if c.get("ms")]
    ops = {}
    for c in timed:
        ops.setdefault(c["op"], []).append(c)
    print("| op | timed cases | median ms | median GB/s | median GFLOP/s | roofline fraction: lowest | median |")
    print("|---|---|---|---|---|---|---|")
    for op, cs in ops.items():
        fr = [c["roofline_fraction"] for c in cs if "roofline_fraction" in c]
        print("| %s | %d | %.3g | %.3g | %.3g | %s | %s |" % (
            op, len(cs), statistics.median(c["ms"] for c in cs), statistics.median(c["gbps"] for c in cs),
            statistics.median(c["gflops"] for c in cs), "%.2f" % min(fr) if fr else "-",
            "%.2f" % statistics.median(fr) if fr else "-"))
    # a case whose dispatches alone take half its time is launch-bound: listed apart
    launch = [c for c in timed if c.get("launch_ms", 0) >= 0.5 * c["ms"]]
    far = sorted((c for c in timed if "roofline_fraction" in c and c not in launch),
                 key=lambda c: c["roofline_fraction"])[:8]
    if launch:
        print("\n%d of %d timed cases are launch-bound (their dispatches x the one-dispatch time >= half their time)."
              % (len(launch), len(timed)))
    if far:
        print("\nFurthest from the roofline, launch-bound cases aside:\n")
        print("| case | ms | dispatches | GB/s | GFLOP/s | roofline ms | fraction |")
        print("|---|---|---|---|---|---|---|")
        for c in far:
            print("| %s | %.3g | %d | %.3g | %.3g | %.3g | %.3f |" % (
                c["name"], c["ms"], c.get("dispatches", 0), c["gbps"], c["gflops"], c["roofline_ms"], c["roofline_fraction"]))


def main():
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for path in sys.argv[1:]:
        d = json.load(open(path))
        s = d["summary"]
        print("### %s --mode %s on %s (%s)\n" % (d["tool"], d["mode"], d["device"].get("name", "?"), path))
        if "supported" in s:
            print("%d supported, %d not supported.\n" % (s["supported"], s["not_supported"]))
        else:
            print("%d passed, %d failed, %d not supported, %d could not run.\n"
                  % (s["pass"], s["fail"], s["not_supported"], s["error"]))
        ops_table(d)
        perf_table(d)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
