#!/usr/bin/env bash
# vkh2o-validate end to end: the seed's 1000-step configuration reproduces the document's figures
# exactly (progress lines at steps 100/150/950, max_cache=84 expected_cap=84 over_cap=0, 3664
# eviction events, four PASS lines, exit 0); --check passes for both layouts and all three
# policies (and the mean score mode) on short runs; the CSV has one row per step; the memory
# table has the seed's Kimi figures; the top-k benchmark checks its result; bad flags and bad
# budgets exit with 2 and a message.
set -euo pipefail
BUILD="${1:-${VKH2O_BUILD_DIR:-build}}"
TOOL="$BUILD/vkh2o-validate"
[ -x "$TOOL" ] || { echo "missing $TOOL"; exit 1; }
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" "$1" || fail "'$2' not in $(basename "$1")"; }

# ---- the seed configuration ----
"$TOOL" --steps 1000 --budget 64 --n-sink 4 --n-recent 16 --layers 4 --heads 4 --qk-dim 192 --v-dim 128 \
    --out-csv "$TMP/seed.csv" | tee "$TMP/seed.txt"
has "$TMP/seed.txt" "[B1] running 1000 simulated generation steps..."
has "$TMP/seed.txt" "  [step     0/1000] max=    1  avg=1.0   events=0"
has "$TMP/seed.txt" "  [step    50/1000] max=   51  avg=51.0  events=0"
has "$TMP/seed.txt" "  [step   100/1000] max=   84  avg=84.0  events=68"
has "$TMP/seed.txt" "  [step   150/1000] max=   84  avg=84.0  events=268"
has "$TMP/seed.txt" "  [step   950/1000] max=   84  avg=84.0  events=3468"
has "$TMP/seed.txt" "[B1] final state: max_cache=84  expected_cap=84  over_cap=0"
has "$TMP/seed.txt" "[B1] PASS: 3664 eviction events triggered correctly"
grep -qE '^\[B1\] done: 1000 steps in [0-9.]+s \([0-9.]+ steps/sec\)' "$TMP/seed.txt" || fail "no rate line"
[ "$(grep -c '^\[B1\] PASS' "$TMP/seed.txt")" = 4 ] || fail "expected 4 PASS lines"
! grep -q FAIL "$TMP/seed.txt" || fail "a FAIL line"
[ "$(wc -l < "$TMP/seed.csv")" = 1001 ] || fail "CSV should have a header and 1000 rows"
head -1 "$TMP/seed.csv" | grep -qx "step,size_l0,size_l1,size_l2,size_l3,events,evicted,wall_s" || fail "CSV header"
grep -q '^100,84,84,84,84,68,4,' "$TMP/seed.csv" || fail "CSV row of step 100"
grep -q '^83,84,84,84,84,0,0,' "$TMP/seed.csv" || fail "CSV row of step 83"
grep -q '^999,84,84,84,84,3664,4,' "$TMP/seed.csv" || fail "CSV row of step 999"

# ---- --check: both layouts, all policies (short runs, small cap) ----
for layout in expanded latent; do
    for policy in h2o streaming random; do
        "$TOOL" --steps 70 --budget 24 --n-sink 2 --n-recent 8 --layers 2 --heads 2 --qk-dim 96 --v-dim 64 --kv-lora 128 \
            --layout "$layout" --policy "$policy" --seed 11 --check --quiet > "$TMP/c.txt" || { cat "$TMP/c.txt"; fail "--check $layout $policy"; }
        has "$TMP/c.txt" "[B1] PASS: --check: 70 steps x 2 layers match the CPU simulation"
        has "$TMP/c.txt" "[B1] PASS: 72 eviction events"
        echo "check $layout $policy: ok"
    done
done
"$TOOL" --steps 60 --budget 16 --n-sink 2 --n-recent 4 --layers 1 --heads 3 --qk-dim 72 --v-dim 40 --score-mode mean \
    --storage fp32 --check --quiet > "$TMP/m.txt" || { cat "$TMP/m.txt"; fail "--check mean fp32"; }
has "$TMP/m.txt" "PASS: --check"
for mode in decay tova; do   # decayed scores and TOVA, both layouts
    for layout in expanded latent; do
        "$TOOL" --steps 80 --budget 12 --n-sink 2 --n-recent 4 --layers 2 --heads 3 --qk-dim 72 --v-dim 40 --kv-lora 48 \
            --layout $layout --score-mode $mode --check --quiet > "$TMP/m.txt" || { cat "$TMP/m.txt"; fail "--check $mode $layout"; }
        has "$TMP/m.txt" "PASS: --check"
    done
done

# ---- memory table (Kimi, 32K context) ----
"$TOOL" --memory | tee "$TMP/mem.txt"
has "$TMP/mem.txt" "Full cache at 32768 context"
has "$TMP/mem.txt" "81.87 GB"
has "$TMP/mem.txt" "0.21 GB"
has "$TMP/mem.txt" "10.28 GB"
has "$TMP/mem.txt" "2.303 GB"

# ---- bad flags ----
set +e
"$TOOL" --policy lru > "$TMP/o" 2> "$TMP/e"; rc=$?
set -e
[ $rc = 2 ] || fail "--policy lru: exit $rc"
has "$TMP/e" "is not one of"
set +e
"$TOOL" --budget 0 > "$TMP/o" 2> "$TMP/e"; rc=$?
set -e
[ $rc = 2 ] || fail "--budget 0: exit $rc"
has "$TMP/e" "budget is 0"
set +e
"$TOOL" --frobnicate > "$TMP/o" 2> "$TMP/e"; rc=$?
set -e
[ $rc = 2 ] || fail "--frobnicate: exit $rc"
has "$TMP/e" "unknown option"
set +e
"$TOOL" --steps -5 > "$TMP/o" 2> "$TMP/e"; rc=$?
set -e
[ $rc = 2 ] || fail "--steps -5: exit $rc"
echo "e2e_validate: all ok"
