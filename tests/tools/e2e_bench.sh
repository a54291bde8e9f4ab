#!/usr/bin/env bash
# vkh2o-bench --quick: runs, prints well-formed JSON whose rows all name matmul or forward,
# --read adds the bandwidth rows, --topk the top-k rows, --decode / --policy-cost / --scaling give
# their JSON rows (refused and skipped ones with reasons) and a plot, and a bad flag exits 2.
set -euo pipefail
# (exit 77: ctest's SKIP_RETURN_CODE, so that a check that cannot run is reported as skipped)
command -v python3 > /dev/null || { echo "SKIP: e2e_bench reads the JSON with python3, which is not installed"; exit 77; }
bin=${1:-${VKH2O_BUILD_DIR:-.}}
bench="$bin/vkh2o-bench"
tmp=$(mktemp -d "$bin/e2e_bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bench" --quick --runs 2 --json > "$tmp/out.json" || fail "vkh2o-bench --quick --json exited $?"
head -c1 "$tmp/out.json" | grep -q '\[' || fail "JSON output does not start with an array"
tail -n1 "$tmp/out.json" | grep -q '\]' || fail "JSON output does not end the array"
names=$(grep -c '"name":' "$tmp/out.json")
[ "$names" -ge 4 ] || fail "only $names measurements"
for key in device median_ms gflops; do
    [ "$(grep -c "\"$key\":" "$tmp/out.json")" -eq "$names" ] || fail "not every row has $key"
done
if grep '"name":' "$tmp/out.json" | grep -v -e matmul -e forward; then
    fail "a row's name contains neither matmul nor forward"
fi
grep -q '"name":.*forward' "$tmp/out.json" || fail "no forward row"
grep -q '"name":.*matmul' "$tmp/out.json" || fail "no matmul row"
# every median is a positive number
if grep '"median_ms":' "$tmp/out.json" | grep -v -E '"median_ms":[[:space:]]*[0-9]*\.?[0-9]+(e[-+]?[0-9]+)?,' ; then
    fail "a median_ms is not a positive number"
fi
grep '"median_ms":' "$tmp/out.json" | grep -q -E ':[[:space:]]*0,' && fail "a median_ms is 0"

"$bench" --quick --runs 2 --read > "$tmp/out.txt" || fail "vkh2o-bench --read exited $?"
grep -q "read .*storage buffer.*GB/s" "$tmp/out.txt" || fail "no storage read row"
grep -q "read .*texel buffer.*GB/s" "$tmp/out.txt" || fail "no texel read row"

# --topk: the standalone top-k rows, both read forms, kept sets checked (exit 0 only then)
"$bench" --quick --runs 2 --topk 5000 > "$tmp/topk.txt" || fail "vkh2o-bench --topk exited $?"
grep -q "topk 5000 scores, k=156, storage reads, kept set checked" "$tmp/topk.txt" || fail "no storage top-k row"
grep -q "topk 5000 scores, k=156, \[texel view\], kept set checked.*the storage form" "$tmp/topk.txt" || fail "no texel top-k row"

# --decode, --policy-cost, --scaling (--quick): well-formed JSON with every group's rows, each row
# "ok" with a positive median or "refused" / "skipped" with a reason and a null median; the plot
# is an SVG. Timings are not checked. On a CPU device the 64K-token decode cache is refused
# (llvmpipe's loop limit), so a refused row must be there.
"$bench" --quick --runs 1 --decode --policy-cost --cache-len 65536 --scaling --scaling-max 64 --json \
    --plot "$tmp/scaling.svg" > "$tmp/modes.json" 2> "$tmp/modes.err" || { cat "$tmp/modes.err" >&2; fail "vkh2o-bench modes exited $?"; }
cpu=0
grep -q '"device":[[:space:]]*"llvmpipe' "$tmp/modes.json" && cpu=1
python3 - "$tmp/modes.json" "$cpu" <<'PY' || fail "the modes' JSON rows"
import json, sys
rows = json.load(open(sys.argv[1]))
cpu = sys.argv[2] == "1"
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
for g in ("decode", "policy", "scaling-forward", "scaling-decode", "scaling-h2o", "scaling-topk"):
    if g not in groups:
        bad("no %s rows" % g)
dec = [r for r in groups["decode"] if r["status"] == "ok"]
if sorted(r.get("param") for r in dec) != ["bf16", "cache step", "fp8", "read"]:
    bad("decode rows: %s" % [r.get("param") for r in dec])
for r in dec:
    if r.get("param") == "read":
        continue
    if not (r.get("bytes", 0) > 0 and r.get("read_fraction", 0) > 0):
        bad("decode row without bytes / read_fraction: %s" % r["name"])
pol = [r.get("param") for r in groups["policy"] if r["status"] == "ok"]
for p in ("none", "h2o sum", "h2o mean", "h2o decay", "tova", "streaming", "random"):
    if p not in pol:
        bad("no policy row %s" % p)
for r in groups["policy"]:   # timed by timestamps: the step's stages, each a part of the step
    if r["status"] == "ok" and r["timing"] == "gpu-timestamps":
        a, s = r.get("attention_ms"), r.get("score_select_compact_ms")
        if not (isinstance(a, (int, float)) and isinstance(s, (int, float)) and a > 0 and s > 0
                and a + s <= r["median_ms"] * 1.01):
            bad("policy row without its stages (attention %r, score + select + compact %r of %r ms): %s"
                % (a, s, r["median_ms"], r["name"]))
sizes = {(r["group"], r["size"], r.get("layers", 0)): r["status"] for g in groups.values() for r in g if g[0]["group"].startswith("scaling")}
want = {("scaling-forward", 16, 1): "ok", ("scaling-forward", 64, 1): "ok", ("scaling-decode", 64, 1): "ok",
        ("scaling-decode", 256, 1): "skipped", ("scaling-decode", 131072, 1): "skipped",
        ("scaling-h2o", 16, 4): "ok", ("scaling-h2o", 64, 1): "ok", ("scaling-topk", 64, 4): "ok"}
for k, v in want.items():
    if sizes.get(k) != v:
        bad("row %s: %s, expected %s" % (k, sizes.get(k), v))
if cpu and not any(r["status"] == "refused" for r in groups["decode"] + groups["policy"]):
    bad("no refused row for the 64K-token cache on a CPU device")
print("modes: %d rows, groups %s" % (len(rows), sorted(groups)))
PY
head -c 200 "$tmp/scaling.svg" | grep -q '<svg' || fail "--plot wrote no SVG"

set +e
"$bench" --frobnicate > "$tmp/bad.out" 2> "$tmp/bad.err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "bad flag exited $rc, expected 2"
grep -q -- "--frobnicate" "$tmp/bad.err" || fail "bad flag message does not name the flag"
echo "e2e_bench: ok ($names rows)"
