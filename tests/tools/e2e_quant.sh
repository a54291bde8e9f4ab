#!/usr/bin/env bash
# vkh2o-quant end to end, on the one KV cache (vkh2o/kvcache.h): a short random-data run writes
# CSV and JSON; every row's bytes equal the tokens per tier it reports times
# vkh2o_kvcache_token_bytes (the header's Kimi figures with the default groups), its tokens held
# plus evicted the tokens seen; the FP16 row (the full cache, run again) has error 0 and ratio 1;
# the ladders hold their fractions of the middle tokens exactly; the tiers-by-bytes rows fit
# their budgets; error grows INT8 < INT4 < INT2. Then --group, --weights (a small synthetic
# layer through the layer's prefill and decode on the cache), --score-mode, --kivi, --bench
# and the refusals (retired flags with their reason, flags that do not apply).
# Each run is a dozen caches, and compiling their kernels is most of its time on lavapipe: the
# default run (the README's test command) measures part of the rows (--configs: of the uniform
# ones, balanced and tiers by bytes at 25 % with and without int2 every other one, int8 / int2 /
# bytes-25% or int4 / balanced / bytes-25%+int2 as the seed turns, printed, VKH2O_TEST_SEED=N
# repeats it; --weights int8 and int2 or int4 and bytes-25% as the seed turns, so that two runs
# run every precision on the layer) and with the first half times fp16 against int4 only;
# --group, the other score modes, the other rows and budgets and --bench's other rows are the full
# run's (VKH2O_TEST_FULL=1, CI's test-full).
set -euo pipefail
FULL=${VKH2O_TEST_FULL:-0}
BUILD="${1:-${VKH2O_BUILD_DIR:-build}}"
TOOL="$BUILD/vkh2o-quant"
[ -x "$TOOL" ] || { echo "missing $TOOL"; exit 1; }
# (exit 77: ctest's SKIP_RETURN_CODE, so that a check that cannot run is reported as skipped)
command -v python3 > /dev/null || { echo "SKIP: e2e_quant reads the tables with python3, which is not installed"; exit 77; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# the default run's table: every other one of the uniform rows, balanced and tiers by bytes at 25 %
# (--configs; which half turns with the seed); the full run every row
rows_flag=()
half=
if [ "$FULL" != 1 ]; then
    seed=${VKH2O_TEST_SEED:-$(date +%s)}
    echo "e2e_quant: seed $seed (VKH2O_TEST_SEED=$seed repeats this run's rows)"
    if [ $((seed % 2)) = 0 ]; then half='int8,int2,bytes-25%'; else half='int4,balanced,bytes-25%+int2'; fi
    rows_flag=(--configs "$half")
fi
"$TOOL" --tokens 384 --heads 8 --seed 7 --kivi "${rows_flag[@]}" --csv "$TMP/q.csv" --json "$TMP/q.json" 2> "$TMP/q.err" | tee "$TMP/out.txt"
# stderr is not a terminal here: no progress line, no message
[ ! -s "$TMP/q.err" ] || { cat "$TMP/q.err"; echo "progress or messages on a pipe"; exit 1; }

cat > "$TMP/check.py" <<'PY'
import csv, json, math, sys
def check(path, n_final, top, shape_bytes=None, source="random"):
    rows = json.load(open(path))
    assert isinstance(rows, list) and rows, "JSON is not a non-empty array"
    by = {r["config"]: r for r in rows}
    assert len(by) == len(rows), "a configuration twice"
    fp16 = by["fp16"]
    assert fp16["kind"] == "uniform" and fp16["tiers"] == "fp16"
    for r in rows:
        assert r["data"] == source, r
        for k in ["bytes", "bytes_ratio", "nmse", "max_rel_err", "device_bytes"]:
            assert isinstance(r[k], (int, float)) and math.isfinite(r[k]), (k, r)
        tiers = ["fp16", "int8", "int4", "int2"]
        counted = sum(r[t] * r["token_bytes_" + t] for t in tiers)
        assert r["bytes"] == counted, f'{r["config"]}: bytes {r["bytes"]} != counts x token bytes {counted}'
        assert sum(r[t] for t in tiers) == r["tokens_held"], r
        assert r["tokens_held"] + r["evicted"] == n_final, r
        assert r["fp16"] >= min(top, r["tokens_held"]), f'{r["config"]}: sinks and recents not all FP16'
        assert abs(r["bytes_ratio"] - r["bytes"] / fp16["bytes"]) < 1e-6, r
        assert r["device_bytes"] >= r["bytes"], r
        if shape_bytes:
            assert [r["token_bytes_" + t] for t in tiers] == shape_bytes, (r["config"], shape_bytes)
        if r["kind"] == "bytes":
            # the held tokens and room for one more FP16 token fit in the budget
            assert r["bytes"] + r["token_bytes_fp16"] <= r["capacity_bytes"], r
    assert fp16["nmse"] == 0 and fp16["max_rel_err"] == 0 and fp16["bytes_ratio"] == 1, fp16
    assert fp16["evicted"] == 0 and fp16["bytes"] == n_final * fp16["token_bytes_fp16"]
    return rows, by
PY

python3 - "$TMP" "$FULL" "$half" <<'PY'
import csv, json, sys
sys.path.insert(0, sys.argv[1])
from check import check
d, full = sys.argv[1], sys.argv[2] == "1"
n_final, top = 384 + 16, 16 + 32
rows, by = check(f"{d}/q.json", n_final, top, shape_bytes=[1160, 592, 304, 224])
want = ["fp16", "int8", "int4", "int2", "conservative", "balanced", "aggressive"]
for p in ["50", "25", "12.5"]:
    want += [f"bytes-{p}%", f"bytes-{p}%+int2"]
if not full:   # the default run's half of the rows (in the table's order), beside fp16
    want = [c for c in want if c == "fp16" or c in sys.argv[3].split(",")]
assert [r["config"] for r in rows] == want, [r["config"] for r in rows]
# uniform: every token kept, error grows with fewer bits, bytes fall
u = [by[p] for p in ["fp16", "int8", "int4", "int2"] if p in by]
assert len(u) >= 2 and all(r["evicted"] == 0 for r in u)
assert all(a["bytes"] > b["bytes"] for a, b in zip(u, u[1:])), [r["bytes"] for r in u]
assert u[1]["nmse"] > 0 and all(a["nmse"] < b["nmse"] for a, b in zip(u, u[1:])), [r["nmse"] for r in u]
# the ladders hold their fractions of the middle tokens exactly (every token seen by the end)
mid = n_final - top
rnd = lambda f: int(f * mid + 0.5)
if "balanced" in by:
    b = by["balanced"]
    assert (b["fp16"], b["int8"], b["int4"]) == (top + rnd(0.25), rnd(0.5), mid - rnd(0.25) - rnd(0.5)), b
if full:
    c, a = by["conservative"], by["aggressive"]
    assert (c["fp16"], c["int8"], c["evicted"]) == (top + rnd(0.5), mid - rnd(0.5), 0), c
    assert (a["fp16"], a["int8"], a["int4"]) == (top + rnd(0.1), rnd(0.3), rnd(0.4)), a
    assert a["evicted"] == mid - rnd(0.1) - rnd(0.3) - rnd(0.4), a
    assert c["bytes"] > b["bytes"] > a["bytes"], (c["bytes"], b["bytes"], a["bytes"])
# tiers by bytes: within budget, fewer bytes with a smaller one
for p in ["50", "25", "12.5"]:
    c = f"bytes-{p}%"
    if not full and c not in by:   # the default run's other half: the row with int2 at that budget
        c += "+int2"
    if c in by:
        r = by[c]
        assert abs(r["capacity_bytes"] - float(p) / 100 * by["fp16"]["bytes"]) <= 1, r
if full:
    assert by["bytes-50%"]["bytes"] > by["bytes-25%"]["bytes"] > by["bytes-12.5%"]["bytes"]
assert "bytes-25%+int2" not in by or by["bytes-25%+int2"]["int2"] > 0
assert "bytes-25%" not in by or by["bytes-25%"]["int2"] == 0
n_csv = list(csv.DictReader(open(f"{d}/q.csv")))
assert len(n_csv) == len(rows) and [r["config"] for r in n_csv] == want, "CSV rows differ from JSON's"
assert all(int(x["bytes"]) == y["bytes"] for x, y in zip(n_csv, rows))
print("table ok:", {r["config"]: (r["bytes"], "%.2e" % r["nmse"]) for r in rows})
PY
grep -q "^host-side measurement (--kivi)" "$TMP/out.txt"
[ "$(grep -cE '^  [842] +(32|64|128) ' "$TMP/out.txt")" -eq 9 ] || { echo "--kivi: expected 9 rows"; exit 1; }

# --group: INT4 in groups of 32 costs more bytes per token and errs less than the whole c_kv
if [ "$FULL" = 1 ]; then
"$TOOL" --tokens 384 --heads 8 --seed 7 --group int4=32 --byte-budgets 50 --json "$TMP/g.json" --quiet > /dev/null
python3 - "$TMP" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from check import check
d = sys.argv[1]
_, g = check(f"{d}/g.json", 400, 48)
_, q = check(f"{d}/q.json", 400, 48)
assert g["int4"]["group_int4"] == 32 and q["int4"]["group_int4"] == 512
assert g["int4"]["token_bytes_int4"] > q["int4"]["token_bytes_int4"], (g["int4"], q["int4"])
assert g["int4"]["nmse"] < q["int4"]["nmse"], (g["int4"]["nmse"], q["int4"]["nmse"])
assert all(g["int8"][k] == q["int8"][k] for k in ["bytes", "nmse", "int8", "group_int8"]), "--group int4=32 changed the int8 row"
print("groups ok")
PY
fi

# --weights: a small synthetic MLA layer (vkh2o-mkshard): the layer's prefill (rows and attention
# mass) and decode steps on each cache, the error on the layer's output
MK="$BUILD/vkh2o-mkshard"
[ -x "$MK" ] || { echo "missing $MK"; exit 1; }
"$MK" --out "$TMP/small.safetensors" --preset small --seed 5 > /dev/null
budgets=(--byte-budgets 50,25)
# (the default run: half of its rows, int8 and int2 or int4 and bytes-25%, turning with the seed)
wcfg=
if [ "$FULL" != 1 ]; then
    if [ $((seed % 2)) = 0 ]; then wcfg='int8,int2'; else wcfg='int4,bytes-25%'; fi
    budgets=(--byte-budgets 25 --configs "$wcfg")
fi
W=("$TOOL" --weights "$TMP/small.safetensors" --seq-len 96 --decode 4 --sinks 4 --recents 8 "${budgets[@]}" --seed 3)
"${W[@]}" --json "$TMP/w.json" | tee "$TMP/w.txt"
grep -q "4 heads, kv_lora 72, rope 16" "$TMP/w.txt"
modes=()
[ "$FULL" = 1 ] && modes=(tova "decay --decay 0.5")
for m in "${modes[@]}"; do
    "${W[@]}" --score-mode $m --json "$TMP/w-${m%% *}.json" --quiet > /dev/null
done
python3 - "$TMP" "$FULL" "$wcfg" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from check import check
d = sys.argv[1]
rows, by = check(f"{d}/w.json", 100, 12, source="weights")
if sys.argv[3]:   # the default run's half of the rows: fp16 and those asked
    assert sorted(by) == sorted(["fp16"] + sys.argv[3].split(",")), sorted(by)
    u = [by[p] for p in ["int8", "int4", "int2"] if p in by]   # error grows with fewer bits
    assert u[0]["nmse"] > 0 and all(a["nmse"] < b["nmse"] for a, b in zip(u, u[1:])), rows
else:
    assert by["int8"]["nmse"] < by["int4"]["nmse"] < by["int2"]["nmse"], rows
if sys.argv[2] == "1":   # the other score modes (the full run)
    for m in ["tova", "decay"]:
        _, o = check(f"{d}/w-{m}.json", 100, 12, source="weights")
        for k in ["fp16", "int8", "int4", "int2"]:   # uniform rows do not rank tokens
            assert o[k]["bytes"] == by[k]["bytes"], (m, k)
    tova = check(f"{d}/w-tova.json", 100, 12, source="weights")[1]
    assert any(tova[k]["nmse"] != by[k]["nmse"] for k in by if by[k]["kind"] != "uniform"), "tova ranks as sum does"
print("weights ok:", {k: "%.2e" % r["nmse"] for k, r in by.items()})
PY

# refusals: exit 2 and one line naming the flag
refused() {   # <text the message must have> <args...>
    local want=$1
    shift
    set +e
    "$TOOL" "$@" > /dev/null 2> "$TMP/err.txt"; rc=$?
    set -e
    [ "$rc" -eq 2 ] || { echo "$*: exit $rc, want 2"; cat "$TMP/err.txt"; exit 1; }
    grep -qF -- "$want" "$TMP/err.txt" || { echo "$*: message lacks '$want'"; cat "$TMP/err.txt"; exit 1; }
}
for f in --block --budget --route-every --layout --bench-read --bench-policies --profile; do
    refused "$f is retired" "$f" 1
done
refused "--group" --group 0
refused "--group" --group int3=8
refused "--group" --group int4=600                      # above kv_lora_rank, not the whole row
refused "--byte-budgets" --tokens 64 --heads 2          # 12.5 % cannot hold the sinks and recents
refused "--tokens" --tokens 40                          # no middle tokens past 16 sinks + 32 recents
refused "--weights" --weights "$TMP/small.safetensors" --bench
refused "--seq-len" --seq-len 64
refused "--decay" --decay 0.5
refused "--reps" --reps 3
refused "--bench-configs" --bench --bench-configs nope
refused "--bench-configs" --bench --bench-configs int4,int4
refused "--csv" --bench --csv "$TMP/b.csv"
set +e
"$TOOL" --weights "$TMP/none.safetensors" > /dev/null 2> "$TMP/err.txt"; rc=$?
set -e
[ "$rc" -eq 1 ] || { echo "--weights missing file: exit $rc, want 1"; exit 1; }
grep -q "none.safetensors" "$TMP/err.txt" || { echo "--weights missing file: the message does not name it"; cat "$TMP/err.txt"; exit 1; }
# (the help into a file first: grep -q leaving a pipe early would kill the tool with SIGPIPE)
"$TOOL" --help > "$TMP/help.txt"
grep -q "KIVI" "$TMP/help.txt" || { echo "--help does not mention KIVI"; exit 1; }
grep -q "route-every (the one cache" "$TMP/help.txt" || { echo "--help does not say why --route-every was retired"; exit 1; }

# --bench: fp16 and the default configurations (the default run: int4, with an even seed, beside
# the --weights half of int8 and int2), one row each; stderr not a terminal: no progress
configs=(fp16 int8 int4 int2 balanced 'bytes-25%')
bench_only=()
[ "$FULL" = 1 ] || { configs=(fp16 int4); bench_only=(--bench-configs int4); }
if [ "$FULL" = 1 ] || [ $((seed % 2)) = 0 ]; then
"$TOOL" --bench --bench-tokens 512 --heads 2 --reps 1 "${bench_only[@]}" > "$TMP/bench.txt" 2> "$TMP/bench.err" ||
    { echo "--bench failed:"; cat "$TMP/bench.txt" "$TMP/bench.err"; exit 1; }
[ ! -s "$TMP/bench.err" ] || { echo "progress or messages on a pipe:"; cat "$TMP/bench.err"; exit 1; }
for c in "${configs[@]}"; do
    grep -qE "^ +2 +$c +[0-9.]+ " "$TMP/bench.txt" || { cat "$TMP/bench.txt"; echo "bench: no $c row"; exit 1; }
done
fi
if [ "$FULL" = 1 ]; then
"$TOOL" --bench --bench-tokens 512 --heads 1 --reps 2 --bench-configs 'aggressive,bytes-12.5%+int2' --quiet > "$TMP/bench2.txt" 2> "$TMP/bench2.err" ||
    { echo "--bench --bench-configs failed:"; cat "$TMP/bench2.txt" "$TMP/bench2.err"; exit 1; }
python3 - "$TMP/bench2.txt" <<'PY'
import sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 8 and f[0] == "1":
        rows[f[1]] = f
assert list(rows) == ["fp16", "aggressive", "bytes-12.5%+int2"], rows
for c, f in rows.items():   # structure only: timings are never asserted
    assert float(f[2]) > 0 and float(f[5]) > 0, f
assert float(rows["fp16"][6]) == 1 and float(rows["bytes-12.5%+int2"][6]) < 0.13, rows
print("bench ok")
PY
fi
echo "e2e_quant: ok"
