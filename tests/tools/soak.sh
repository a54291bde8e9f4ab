#!/usr/bin/env bash
# Soak: long runs that must leave memory where it was (scripts/vkh2o.sh soak; CI runs the
# defaults, docs/ROBUSTNESS.md the long local form).
#   soak.sh <build-dir> [validate-steps (20000)] [quant-decode-steps (256)] [quant-passes (3)]
#           [session-steps (20000)]
# 1. vkh2o-validate for N steps with the validation layer on: the seed's four PASS lines (the
#    cache at its cap from step cap on, one eviction per layer and step), no FAIL, no validation
#    message, device bytes and buffer count equal after the cap was reached and at the end,
#    host RSS grown by at most RSS_SLACK_KIB (default 4096: glibc and lavapipe grow it in one-time
#    steps, +1000 KiB by 150k steps and no more by 200k; a per-step leak of 5+ bytes exceeds it
#    by a million steps).
# 2. vkh2o-quant --weights on a small synthetic layer: D decode steps per run on each
#    configuration of the one KV cache (demoting or evicting at every step once its pools or
#    bytes are full), the whole table measured P times; every run of passes 3.. must end with the
#    device memory of its pass-2 run, nothing may be left after teardown, RSS as above.
# 3. soak_session (tests/soak/soak_session.c) on the committed model (models/tiny-mla): a model
#    session generating S tokens under a 64-token H2O kvcache at INT4 (validation off, the full
#    replay), then S / 4 at TIERED with the validation layer on: device bytes and buffers equal
#    at every checkpoint from the warm point (2 x 64 steps) on, RSS as above, every layer at its
#    cap, the logits at every checkpoint bit-identical to a replay session over the same tokens.
set -euo pipefail
BUILD="${1:-build}"
STEPS="${2:-20000}"
DECODE="${3:-256}"
PASSES="${4:-3}"
SESSION="${5:-20000}"
SLACK="${RSS_SLACK_KIB:-4096}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "soak FAIL: $*"; exit 1; }

# "...memory: host RSS a -> b KiB (+d KiB); device x -> y bytes in n -> m buffers (peak p)"
check_mem_line() {   # <file> <what>
    local line
    line=$(grep -E 'memory: host RSS [0-9]+ -> [0-9]+ KiB' "$1" | tail -n 1) || fail "$2: no memory line"
    echo "$2: $line"
    local d x y n m
    d=$(sed -E 's/.*\(([+-][0-9]+) KiB\).*/\1/' <<<"$line")
    x=$(sed -E 's/.*device ([0-9]+) -> ([0-9]+) bytes.*/\1/' <<<"$line")
    y=$(sed -E 's/.*device ([0-9]+) -> ([0-9]+) bytes.*/\2/' <<<"$line")
    n=$(sed -E 's/.* in ([0-9]+) -> ([0-9]+) buffers.*/\1/' <<<"$line")
    m=$(sed -E 's/.* in ([0-9]+) -> ([0-9]+) buffers.*/\2/' <<<"$line")
    [ "$x" = "$y" ] && [ "$n" = "$m" ] || fail "$2: device memory moved ($x -> $y bytes, $n -> $m buffers)"
    [ "${d#+}" -le "$SLACK" ] || fail "$2: host RSS grew by $d KiB (slack $SLACK KiB)"
}

t0=$(date +%s)
"$BUILD/vkh2o-validate" --steps "$STEPS" --validation --quiet > "$TMP/v.txt" 2> "$TMP/v.err" ||
    { cat "$TMP/v.txt" "$TMP/v.err"; fail "vkh2o-validate --steps $STEPS"; }
[ "$(grep -c '^\[B1\] PASS' "$TMP/v.txt")" = 4 ] || { cat "$TMP/v.txt"; fail "validate: expected 4 PASS lines"; }
! grep -q 'FAIL' "$TMP/v.txt" || { cat "$TMP/v.txt"; fail "validate: a FAIL line"; }
grep -qx '\[B1\] validation messages: 0' "$TMP/v.txt" || fail "validate: validation messages"
[ ! -s "$TMP/v.err" ] || { cat "$TMP/v.err"; fail "validate: stderr not empty"; }
grep -E '^\[B1\] (done|final state)' "$TMP/v.txt"
check_mem_line "$TMP/v.txt" "validate $STEPS steps"
echo "validate soak: $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
"$BUILD/vkh2o-mkshard" --out "$TMP/small.safetensors" --preset small --seed 5 > /dev/null
VKH2O_VALIDATION=1 "$BUILD/vkh2o-quant" --weights "$TMP/small.safetensors" --seq-len 96 --decode "$DECODE" \
    --sinks 4 --recents 8 --byte-budgets 50,25 --seed 3 --passes "$PASSES" --quiet > "$TMP/q.txt" 2> "$TMP/q.err" ||
    { cat "$TMP/q.txt" "$TMP/q.err"; fail "vkh2o-quant --decode $DECODE --passes $PASSES"; }
[ ! -s "$TMP/q.err" ] || { cat "$TMP/q.err"; fail "quant: stderr not empty (validation messages go there)"; }
grep -E "^memory: $PASSES passes of [0-9]+ decode runs x $DECODE steps; .*: 0$" "$TMP/q.txt" ||
    { cat "$TMP/q.txt"; fail "quant: device memory differs between passes"; }
grep -qx '  after teardown: 0 device bytes in 0 buffers' "$TMP/q.txt" || fail "quant: buffers left after teardown"
check_mem_line "$TMP/q.txt" "quant $PASSES x decode $DECODE"
echo "quant soak: $(( $(date +%s) - t0 )) s"

MODEL="$(cd "$(dirname "$0")/../.." && pwd)/models/tiny-mla"
for run in "int4 $SESSION" "tiered $(( SESSION / 4 > 0 ? SESSION / 4 : 1 )) --validation"; do
    set -- $run
    prec=$1; steps=$2; shift 2
    t0=$(date +%s)
    "$BUILD/soak_session" --model "$MODEL" --steps "$steps" --precision "$prec" --quiet "$@" \
        > "$TMP/s.txt" 2> "$TMP/s.err" || { cat "$TMP/s.txt" "$TMP/s.err"; fail "soak_session $prec $steps steps"; }
    [ ! -s "$TMP/s.err" ] || { cat "$TMP/s.err"; fail "session $prec: stderr not empty (validation messages go there)"; }
    grep -qx 'soak ok' "$TMP/s.txt" || { cat "$TMP/s.txt"; fail "session $prec: no 'soak ok'"; }
    grep -E '^(soak:|replay:)' "$TMP/s.txt"
    check_mem_line "$TMP/s.txt" "session $prec $steps steps"
    echo "session soak ($prec): $(( $(date +%s) - t0 )) s"
done
echo "soak ok"
