#!/usr/bin/env bash
# vkh2o-bench --quick: runs, prints well-formed JSON whose rows all name the forward,
# --read adds the bandwidth rows, --decode / --policy-cost / --kv-decode / --scaling give their
# JSON rows on the one KV cache (refused and skipped ones with reasons; bytes by stage beside the
# minimum) and a plot, the retired --topk is refused, and a bad flag exits 2.
# (The single kernels and each matmul form are timed by vkh2o-conformance --mode perf.)
set -euo pipefail
# (exit 77: ctest's SKIP_RETURN_CODE, so that a check that cannot run is reported as skipped)
command -v python3 > /dev/null || { echo "SKIP: e2e_bench reads the JSON with python3, which is not installed"; exit 77; }
bin=${1:-${VKH2O_BUILD_DIR:-.}}
bench="$bin/vkh2o-bench"
tmp=$(mktemp -d "$bin/e2e_bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# The default run (the README's test command) takes one of two halves, turning with the seed
# (printed; VKH2O_TEST_SEED=N repeats it), each a fraction of the kernels lavapipe compiles: an even
# seed the forward rows (JSON), --read's text rows and --decode; an odd one --kv-decode (its eight
# caches: about two thirds of this test's time) with the read rows in its JSON. The full run
# (VKH2O_TEST_FULL=1) runs both halves and --policy-cost and --scaling.
full=${VKH2O_TEST_FULL:-0}
half=both
if [ "$full" != 1 ]; then
    seed=${VKH2O_TEST_SEED:-$(date +%s)}
    if [ $((seed % 2)) = 0 ]; then half=forward; else half=kv; fi
    echo "e2e_bench: seed $seed (VKH2O_TEST_SEED=$seed repeats this run's half: $half)"
fi

names=0
if [ "$half" != kv ]; then
"$bench" --quick --runs 2 --json > "$tmp/out.json" || fail "vkh2o-bench --quick --json exited $?"
head -c1 "$tmp/out.json" | grep -q '\[' || fail "JSON output does not start with an array"
tail -n1 "$tmp/out.json" | grep -q '\]' || fail "JSON output does not end the array"
names=$(grep -c '"name":' "$tmp/out.json")
[ "$names" -ge 1 ] || fail "no measurement"
for key in device median_ms gflops; do
    [ "$(grep -c "\"$key\":" "$tmp/out.json")" -eq "$names" ] || fail "not every row has $key"
done
if grep '"name":' "$tmp/out.json" | grep -v -e forward; then
    fail "a row's name does not name the forward"
fi
grep -q '"name":.*forward' "$tmp/out.json" || fail "no forward row"
# every median is a positive number
if grep '"median_ms":' "$tmp/out.json" | grep -v -E '"median_ms":[[:space:]]*[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?,' ; then
    fail "a median_ms is not a positive number"
fi
grep '"median_ms":' "$tmp/out.json" | grep -q -E ':[[:space:]]*0,' && fail "a median_ms is 0"

"$bench" --quick --runs 2 --read > "$tmp/out.txt" || fail "vkh2o-bench --read exited $?"
grep -q "read .*storage buffer.*GB/s" "$tmp/out.txt" || fail "no storage read row"
grep -q "read .*texel buffer.*GB/s" "$tmp/out.txt" || fail "no texel read row"
fi

# --topk (the old H2O cache's top-k kernel) is retired: the one cache's prefill selection is timed
# by --scaling ("scaling-prefill")
if "$bench" --quick --topk 5000 > "$tmp/topk.txt" 2>&1; then fail "--topk accepted"; fi

# --decode, --policy-cost, --kv-decode, --scaling (--quick): well-formed JSON with every group's rows, each row
# "ok" with a positive median or "refused" / "skipped" with a reason and a null median; the plot
# is an SVG; the decode rows carry the dispatches of one step (14 for the layer, 3 for the cache
# step). Timings are not checked. --policy-cost and --scaling (a dozen more caches and layers whose
# kernels lavapipe compiles) run in the full run (VKH2O_TEST_FULL=1, CI's test-full).
# (the default run: --decode with the forward's half, --kv-decode with the other)
more=()
[ "$full" = 1 ] && more=(--policy-cost --scaling --scaling-max 64 --plot "$tmp/scaling.svg")
case $half in forward) modes=(--decode) ;; kv) modes=(--kv-decode) ;; *) modes=(--decode --kv-decode) ;; esac
"$bench" --quick --runs 1 "${modes[@]}" --cache-len 256 "${more[@]}" --json \
    > "$tmp/modes.json" 2> "$tmp/modes.err" || { cat "$tmp/modes.err" >&2; fail "vkh2o-bench modes exited $?"; }
python3 - "$tmp/modes.json" "$full" "$half" <<'PY' || fail "the modes' JSON rows"
import json, sys
rows = json.load(open(sys.argv[1]))
full = sys.argv[2] == "1"
want = {"forward": ("decode",), "kv": ("kv-decode",)}.get(sys.argv[3], ("decode", "kv-decode"))
def bad(msg):
    print("FAIL:", msg, file=sys.stderr)
    sys.exit(1)
groups = {}
for r in rows:
    if "group" not in r:
        if not r["name"].startswith("read "):
            bad("a row outside the modes: %s" % r["name"])
        continue
    groups.setdefault(r["group"], []).append(r)
    st = r.get("status")
    if st == "ok":
        if not (isinstance(r["median_ms"], (int, float)) and r["median_ms"] > 0):
            bad("ok row without a positive median: %s" % r["name"])
    elif st in ("refused", "skipped"):
        if r["median_ms"] is not None or not r.get("reason"):
            bad("%s row without a reason or with a median: %s" % (st, r["name"]))
    else:
        bad("unknown status %r: %s" % (st, r["name"]))
# the modes' runs also measure the read rows (the kv-decode half's only read rows)
reads = [r["name"] for r in rows if "group" not in r]
if not (any("storage buffer" in n for n in reads) and any("texel buffer" in n for n in reads)):
    bad("no storage and texel read rows beside the modes: %s" % reads)
for g in want + (("policy", "scaling-forward", "scaling-decode", "scaling-h2o", "scaling-prefill") if full else ()):
    if g not in groups:
        bad("no %s rows" % g)
dec = [r for r in groups.get("decode", []) if r["status"] == "ok"]
if "decode" in want and sorted(r.get("param") for r in dec) != ["bf16", "cache step", "fp8", "read"]:
    bad("decode rows: %s" % [r.get("param") for r in dec])
for r in dec:
    if r.get("param") == "read":
        continue
    if not (r.get("bytes", 0) > 0 and r.get("read_fraction", 0) > 0):
        bad("decode row without bytes / read_fraction: %s" % r["name"])
    if not (0 < r.get("bytes_min", 0) <= r["bytes"] and "minimum" in r.get("stages", "")):
        bad("decode row without its stages and minimum (%r of %r): %s" % (r.get("bytes_min"), r["bytes"], r["name"]))
    # the stated dispatches of a step (the cache's: at most 3, attend, combine, select; the
    # layer's: its projections around them)
    want_disp = 3 if r.get("param") == "cache step" else 14
    if r.get("dispatches") != want_disp or "record_us" in r or "kernel_lookups" in r:
        bad("decode row without its %d dispatches (%r): %s" % (want_disp, r.get("dispatches"), r["name"]))
    # and its pipeline barriers as recorded: the cache step's one after each of its dispatches,
    # the layer's 13 (a change to either should change this on purpose)
    want_bar = 3 if r.get("param") == "cache step" else 13
    if r.get("barriers") != want_bar:
        bad("decode row without its %d barriers (%r): %s" % (want_bar, r.get("barriers"), r["name"]))
pol = [r.get("param") for r in groups.get("policy", []) if r["status"] == "ok"]
for p in ("none", "h2o sum", "h2o mean", "h2o decay", "tova", "streaming", "random") if full else ():
    if p not in pol:
        bad("no policy row %s" % p)
for r in groups.get("policy", []):   # every policy row beside the full cache: the difference's share of the step
    if r["status"] == "ok" and r.get("param") != "none":
        s = r.get("policy_share")
        if not (isinstance(s, (int, float)) and s < 1):
            bad("policy row without its share against the full cache (%r): %s" % (s, r["name"]))
    if "attention_ms" in r or "select_compact_share" in r:
        bad("the old cache's stage fields in a policy row: %s" % r["name"])
kvd = groups.get("kv-decode", [])
if any(r["status"] == "ok" for r in kvd):
    got = sorted(r.get("param") for r in kvd if r["status"] == "ok")
    if got != sorted(["fp16", "int8", "int4", "int2", "tiered fp16>int8>int4", "tiers by bytes fp16>int8>int4 at 25 %",
                      "the full cache (no eviction)", "fp16 h2o keeping 25 % of the tokens"]):
        bad("kv-decode rows: %s" % got)
    for r in kvd:
        if not (r["ratio_vs_fp16"] > 0 and 0 < r["bytes_min"] <= r["bytes"]) or "ratio_vs_h2o_cache" in r:
            bad("kv-decode row without ratio_vs_fp16 / bytes: %s" % r["name"])
        if r["param"] == "fp16" and abs(r["ratio_vs_fp16"] - 1) > 1e-9:
            bad("the fp16 row's ratio is not 1: %s" % r["ratio_vs_fp16"])
    q = {r["param"]: r["bytes_min"] for r in kvd}   # fewer bytes at each lower precision
    if not q["fp16"] > q["int8"] > q["int4"] > q["int2"]:
        bad("kv-decode minimum bytes not falling with the precision: %s" % q)
    if not q["fp16 h2o keeping 25 % of the tokens"] < q["fp16"]:
        bad("kv-decode: the cache keeping a quarter of the tokens reads no fewer bytes than the FP16 one: %s" % q)
sizes = {(r["group"], r["size"], r.get("layers", 0)): r["status"] for g in groups.values() for r in g if g[0]["group"].startswith("scaling")}
want = {("scaling-forward", 16, 1): "ok", ("scaling-forward", 64, 1): "ok", ("scaling-decode", 64, 1): "ok",
        ("scaling-decode", 256, 1): "skipped", ("scaling-decode", 131072, 1): "skipped",
        ("scaling-h2o", 16, 4): "ok", ("scaling-h2o", 64, 1): "ok", ("scaling-prefill", 64, 4): "ok"}
for k, v in want.items() if full else ():
    if sizes.get(k) != v:
        bad("row %s: %s, expected %s" % (k, sizes.get(k), v))
print("modes: %d rows, groups %s" % (len(rows), sorted(groups)))
PY
[ "$full" != 1 ] || head -c 200 "$tmp/scaling.svg" | grep -q '<svg' || fail "--plot wrote no SVG"

# a length the device refuses is a refused row with the library's reason (on lavapipe the
# 1M-token cache's arena is above its maxStorageBufferRange of 128 MiB), exit 0
if grep -q '"device":[[:space:]]*"llvmpipe' "$tmp/modes.json"; then
    "$bench" --quick --runs 1 --kv-decode --cache-len 1048576 --json > "$tmp/refused.json" || fail "--kv-decode 1048576 exited $?"
    python3 - "$tmp/refused.json" <<'PY' || fail "the refused row"
import json, sys
rows = [r for r in json.load(open(sys.argv[1])) if r.get("group") == "kv-decode"]
if not (len(rows) == 1 and rows[0]["status"] == "refused" and "maxStorageBufferRange" in rows[0]["reason"] and rows[0]["median_ms"] is None):
    print("FAIL: %s" % rows, file=sys.stderr)
    sys.exit(1)
PY
fi

set +e
"$bench" --frobnicate > "$tmp/bad.out" 2> "$tmp/bad.err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "bad flag exited $rc, expected 2"
grep -q -- "--frobnicate" "$tmp/bad.err" || fail "bad flag message does not name the flag"
echo "e2e_bench: ok ($half; $names forward rows)"
