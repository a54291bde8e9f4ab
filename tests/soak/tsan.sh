#!/usr/bin/env bash
# ThreadSanitizer: 4 threads, each with its own context, model (models/tiny-mla) and model
# session (a 64-token H2O kvcache at INT4), decode S steps at once (scripts/vkh2o.sh test-tsan;
# the build: -DVKH2O_TSAN=ON). Every thread's checkpoints must equal thread 0's, and TSan must
# report nothing: halt_on_error, exit code 66 on a report. Suppressions: tests/tsan.supp (what
# each one covers and why is written there). First a probe: the same binary with
# --tsan-race-probe, a deliberate race in instrumented code, must be reported (exit 66, a report
# naming race_probe), so that options or suppressions that silence every report fail this script.
#   tsan.sh <tsan-build-dir> [steps (300)]
set -euo pipefail
BUILD="${1:-build-tsan}"
STEPS="${2:-300}"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:suppressions=$ROOT/tests/tsan.supp${TSAN_EXTRA_OPTIONS:+:$TSAN_EXTRA_OPTIONS}"
t0=$(date +%s)
prc=0
"$BUILD/soak_session" --model "$ROOT/models/tiny-mla" --threads 2 --steps 128 --tsan-race-probe --quiet \
    > "$TMP/p.txt" 2> "$TMP/p.err" || prc=$?
if [ "$prc" != 66 ] || ! grep -q 'WARNING: ThreadSanitizer: data race' "$TMP/p.err" || ! grep -q 'race_probe' "$TMP/p.err"; then
    cat "$TMP/p.err"
    echo "tsan FAIL: the deliberate race (--tsan-race-probe) was not reported (exit $prc, 66 expected)"
    exit 1
fi
rc=0
# --rss-slack 65536: under TSan the process holds ~2.4 GB (its shadow and its own metadata, which
# grow by 1-5 MiB over these steps whatever the program does); the host memory's flatness is
# the plain soak's check (scripts/vkh2o.sh soak, 4 MiB), here only a gross leak is caught
"$BUILD/soak_session" --model "$ROOT/models/tiny-mla" --threads 4 --steps "$STEPS" --precision int4 --rss-slack 65536 \
    --checkpoint-every $(( STEPS / 10 > 0 ? STEPS / 10 : 1 )) --quiet > "$TMP/t.txt" 2> "$TMP/t.err" || rc=$?
cat "$TMP/t.txt"
if [ "$rc" != 0 ] || grep -q 'WARNING: ThreadSanitizer' "$TMP/t.err"; then
    cat "$TMP/t.err"
    echo "tsan FAIL: soak_session --threads 4 exited $rc"
    exit 1
fi
grep -qx 'soak ok' "$TMP/t.txt" || { echo "tsan FAIL: no 'soak ok'"; exit 1; }
echo "tsan: the deliberate race reported; 4 threads x $STEPS decode steps, no report, $(( $(date +%s) - t0 )) s"
