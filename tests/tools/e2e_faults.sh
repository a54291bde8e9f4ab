#!/usr/bin/env bash
# Allocation-failure sweep of the tools (issue 12: every allocation failure survived).
# The library's fault hook (src/core/fault.c) makes the N-th injection point of a context fail
# as if out of memory: every host allocation made for a context and every Vulkan
# create/allocate call (instance, device, command pool and buffers, fences, query pools,
# buffers, memory, views, descriptor set layouts, pools and sets, pipeline layouts, shader
# modules, pipelines). VKH2O_FAULT_AT=0 only counts them ("vkh2o-fault: points host H vulkan V"
# on stderr at context destroy); VKH2O_FAULT_AT=N fails the N-th.
#
# For a small vkh2o-demo run (tiny synthetic shard), a small vkh2o-quant run and a short
# vkh2o-validate run, with the validation layer on, each swept point must give:
#   the fault fired ("fired at" in the report line);
#   no crash (no signal, no sanitizer report), no hang (FAULT_TIMEOUT s, default 120);
#   exit 1 with a last line that says out of memory, or exit 0 (the tool got round it: a
#   timestamp pool or debug messenger that could not be made only costs that feature);
#   no validation message (the layer also reports objects not destroyed at vkDestroyDevice).
# In the ASan build (scripts/vkh2o.sh test-sanitize) LeakSanitizer checks that nothing leaks;
# the tools then run with LD_PRELOAD=$VKH2O_LSAN_PRELOAD (the driver, kept mapped so that
# tests/lsan.supp can name its allocations; the step sets it).
#
# Points swept: 1, 1 + S, 1 + 2S, ... and the last, where the stride S is FAULT_STRIDE, or by
# default the smallest that keeps each tool to FAULT_RUNS runs (8 in the full run, VKH2O_TEST_FULL=1;
# 4 by default). FAULT_STRIDE=1
# sweeps every point (slow on lavapipe: see docs/HACKING.md). FAULT_TOOLS picks tools.
set -euo pipefail
BUILD="${1:-${VKH2O_BUILD_DIR:-build}}"
for t in vkh2o-demo vkh2o-quant vkh2o-validate vkh2o-mkshard; do
    [ -x "$BUILD/$t" ] || { echo "missing $BUILD/$t"; exit 1; }
done
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
# the full run (VKH2O_TEST_FULL=1, scripts/vkh2o.sh test-full) 8 points per tool, the default 4
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then RUNS=${FAULT_RUNS:-8}; else RUNS=${FAULT_RUNS:-4}; fi
TIMEOUT=${FAULT_TIMEOUT:-120}
TOOLS=${FAULT_TOOLS:-"demo quant validate"}
export VKH2O_VALIDATION=1
export VKH2O_FAULT_MODE=${VKH2O_FAULT_MODE:-all}
PRELOAD=()
[ -n "${VKH2O_LSAN_PRELOAD:-}" ] && PRELOAD=(env "LD_PRELOAD=$VKH2O_LSAN_PRELOAD")

"$BUILD/vkh2o-mkshard" --out "$TMP/tiny.safetensors" --preset tiny --quiet

args_of() {
    case $1 in
        demo) echo "--weights $TMP/tiny.safetensors --runs 1 --seq-len 16 --budget 4 --n-sink 2 --n-recent 4 --quiet" ;;
        quant) echo "--tokens 64 --heads 2 --decode 4 --sinks 4 --recents 8 --byte-budgets 50 --quiet" ;;
        validate) echo "--steps 24 --budget 4 --n-sink 2 --n-recent 4 --layers 2 --heads 2 --qk-dim 16 --kv-lora 16 --quiet" ;;
    esac
}

bad=0
summary=()
for tool in $TOOLS; do
    bin="$BUILD/vkh2o-$tool"
    # shellcheck disable=SC2046
    VKH2O_FAULT_AT=0 "${PRELOAD[@]}" "$bin" $(args_of "$tool") >"$TMP/count.out" 2>"$TMP/count.err" ||
        { cat "$TMP/count.err"; echo "FAIL: $tool without a fault"; exit 1; }
    # each context counts its own points; a tool with several contexts fails the N-th of each
    total=$(sed -n 's/^vkh2o-fault: points host \([0-9]*\) vulkan \([0-9]*\);.*/\1 \2/p' "$TMP/count.err" |
            awk '{ t = $1 + $2; if (t > m) { m = t; h = $1; v = $2 } } END { print m + 0, h + 0, v + 0 }')
    read -r T H V <<<"$total"
    [ "$T" -gt 0 ] || { cat "$TMP/count.err"; echo "FAIL: $tool: no injection points counted"; exit 1; }
    S=${FAULT_STRIDE:-$(( (T + RUNS - 2) / (RUNS > 1 ? RUNS - 1 : 1) ))}
    [ "$S" -ge 1 ] || S=1
    points=$(seq 1 "$S" "$T"; echo "$T")
    swept=0; survived=0; degraded=0
    for n in $(echo "$points" | sort -nu); do
        swept=$((swept + 1))
        set +e
        # shellcheck disable=SC2046
        VKH2O_FAULT_AT=$n timeout -k 5 "$TIMEOUT" "${PRELOAD[@]}" "$bin" $(args_of "$tool") >"$TMP/out" 2>"$TMP/err"
        rc=$?
        set -e
        why=""
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then why="hang (no exit in ${TIMEOUT} s)"
        elif [ $rc -ge 128 ]; then why="killed by signal $((rc - 128))"
        elif grep -qE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$TMP/err"; then
            why="sanitizer report"
        elif grep -qE 'vulkan: |Validation (Error|Warning)|VUID-' "$TMP/out" "$TMP/err"; then why="validation message"
        elif ! grep -q '^vkh2o-fault: .*fired at' "$TMP/err"; then why="the fault did not fire (the run is not deterministic?)"
        elif [ $rc -eq 0 ]; then degraded=$((degraded + 1))
        elif [ $rc -ne 1 ]; then why="exit status $rc (1 expected)"
        else
            last=$(grep -v '^vkh2o-fault: ' "$TMP/err" | tail -1)
            echo "$last" | grep -qiE 'out of (host |device )?memory|OUT_OF_(HOST|DEVICE)_MEMORY' ||
                why="last line does not say out of memory: $last"
        fi
        if [ -n "$why" ]; then
            bad=$((bad + 1))
            echo "FAIL: vkh2o-$tool, point $n: $why"
            grep -E 'fired at|SUMMARY|ERROR|error|#[0-9] ' "$TMP/err" | head -20 | sed 's/^/    /'
        else
            survived=$((survived + 1))
        fi
    done
    line="vkh2o-$tool: $T injection points (host $H, vulkan $V), stride $S: $swept swept, $survived survived ($degraded of them exit 0)"
    echo "$line"
    summary+=("$line")
done
echo "---- fault sweep"
printf '%s\n' "${summary[@]}"
[ $bad -eq 0 ] || { echo "FAIL: $bad points not survived"; exit 1; }
echo "ok"
