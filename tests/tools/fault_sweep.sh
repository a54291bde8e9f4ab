#!/usr/bin/env bash
# Fault sweep of the tools: every injection point of one small run of each tool fails in turn.
#
#   bash tests/tools/fault_sweep.sh [BUILD_DIR]          # every point of every tool in TOOLS
#   FAULT_TOOLS="eval quant" FAULT_STRIDE=5 bash tests/tools/fault_sweep.sh build
#   FAULT_RUNS=8 bash tests/tools/fault_sweep.sh build    # 8 points per tool (e2e_faults.sh)
#   FAULT_RUNS=48 FAULT_PHASE=17 bash tests/tools/fault_sweep.sh build   # the stride from point 1 + 17 mod S
#   FAULT_TOOLS=bench FAULT_POINTS="15 64" bash tests/tools/fault_sweep.sh build   # those points
#
# The library's fault hook (src/core/fault.c) counts the injection points of a context (every
# host allocation made for it, the model readers' included, and every Vulkan create/allocate
# call) and with VKH2O_FAULT_AT=N fails the N-th as if out of memory; with the variable set it
# prints "vkh2o-fault: points host H vulkan V; ..." on stderr when the context is destroyed.
# For each tool in the table below: one run with VKH2O_FAULT_AT=0 counts the points and gives
# the reference outputs; then for N = 1, 1 + S, 1 + 2S, ... and the last point (S =
# FAULT_STRIDE, default 1: every point; or FAULT_RUNS points per tool; FAULT_RUNS=1: the one point
# 1 + FAULT_PHASE mod the tool's points) the run with VKH2O_FAULT_AT=N must give
#   exit 0 with every compared output (after the row's filter) byte-identical to the
#      reference's: the tool got round the failure (a timestamp pool or a debug messenger that
#      could not be made only costs that feature), or
#   exit 1 with a last line (the fault report aside) that says out of host/device memory and
#      names the failed point (the function or the Vulkan call the report says it fired at);
# and in both cases: the fault fired, no signal, no hang (FAULT_TIMEOUT s, default 120), no
# sanitizer report (under the ASan build LeakSanitizer checks every run for leaks), and no
# validation message (the layer is on: it also reports objects left at vkDestroyDevice).
# Points run FAULT_JOBS at a time (default $JOBS, else 2). Under ASan set VKH2O_LSAN_PRELOAD
# (scripts/vkh2o.sh test-sanitize does): the tools then run with it preloaded.
#
# The table: one row per tool, fields separated by '|':
#   name | compared outputs | filter | command line
#   - command line: the tool and its options; @IN@ is a directory of inputs the SETUP commands
#     made (shared by every run), @OUT@ an empty directory of this run's own
#   - compared outputs: 'stdout' and/or files under @OUT@ (*.safetensors compared whole); '-'
#     compares nothing (exit status and message only)
#   - filter: a command (no '|' in it) each compared output goes through first, to drop what
#     differs between identical runs (timings): 'cat' for none; csv_drop RE drops the CSV
#     columns whose header matches the extended regex RE; json_drop RE drops the JSON lines whose
#     key matches RE, json_keep RE keeps only those; json_names RE keeps the "name" lines but
#     those matching RE (vkh2o-bench: which rows it measured, not their timings, and not the
#     per-stage rows that only GPU timestamps give: a timestamp pool it could not make drops them)
# Keep the runs small: a full sweep of every row runs in CI (scripts/vkh2o.sh faults).
SETUP=(
    'vkh2o-mkshard --out @IN@/tiny.safetensors --preset tiny --quiet'
)
TOOLS=(
    'demo     | demo.csv out.safetensors | cat | vkh2o-demo --weights @IN@/tiny.safetensors --seq-len 16 --budget 4 --n-sink 2 --n-recent 4 --runs 1 --csv @OUT@/demo.csv --out @OUT@/out.safetensors --quiet'
    'eval     | stdout eval.csv | cat | vkh2o-eval --weights @SRC@/models/tiny-mla --text @SRC@/models/tiny-mla/heldout.txt --ctx 16 --windows 1 --policy h2o --budget 4 --n-sink 2 --n-recent 4 --csv @OUT@/eval.csv --quiet'
    'validate | steps.csv | csv_drop ^wall | vkh2o-validate --steps 20 --budget 4 --n-sink 2 --n-recent 4 --layers 2 --heads 2 --qk-dim 16 --kv-lora 16 --out-csv @OUT@/steps.csv --quiet'
    'quant    | quant.csv | csv_drop _ms$ | vkh2o-quant --tokens 64 --heads 2 --decode 4 --sinks 4 --recents 8 --byte-budgets 50 --csv @OUT@/quant.csv --quiet'
    'bench    | stdout | json_names stage: | vkh2o-bench --quick --runs 1 --json'
)
set -euo pipefail

csv_drop() {
    awk -F, -v re="$1" 'NR == 1 { for (i = 1; i <= NF; i++) keep[i] = $i !~ re }
        { o = ""; n = 0; for (i = 1; i <= NF; i++) if (keep[i]) { o = o (n++ ? "," : "") $i }; print o }'
}
json_key() { sed -n 's/^[[:space:]]*"\([^"]*\)"[[:space:]]*:.*/\1/p'; }
json_drop() { while IFS= read -r l; do json_key <<<"$l" | grep -qE "$1" || printf '%s\n' "$l"; done; }
json_keep() { while IFS= read -r l; do ! json_key <<<"$l" | grep -qE "$1" || printf '%s\n' "$l"; done; }
json_names() { json_keep '^name$' | { grep -vE -- "$1" || true; }; }

field() { echo "$1" | cut -d'|' -f"$2" | sed 's/^ *//; s/ *$//'; }
expand() { sed "s|@IN@|$IN|g; s|@OUT@|$2|g; s|@SRC@|$SRC|g" <<<"$1"; }

# One run of row $1 with VKH2O_FAULT_AT=$2 into directory $3 (stdout, stderr, rc).
run_one() {
    local row=$1 n=$2 dir=$3 cmd
    rm -rf "$dir"; mkdir -p "$dir/out"
    cmd=$(expand "$(field "$row" 4)" "$dir/out")
    local -a argv
    read -r -a argv <<<"$cmd"
    argv[0]="$BUILD/${argv[0]}"
    set +e
    VKH2O_FAULT_AT=$n timeout -k 5 "$TIMEOUT" "${PRELOAD[@]}" "${argv[@]}" >"$dir/stdout" 2>"$dir/stderr"
    echo $? >"$dir/rc"
    set -e
}

# Compared outputs of the run in $2 (row $1), filtered, concatenated with a header per output.
outputs_of() {
    local row=$1 dir=$2 filter o f
    filter=$(field "$row" 3)
    for o in $(field "$row" 2); do
        [ "$o" = - ] && continue
        if [ "$o" = stdout ]; then f="$dir/stdout"; else f="$dir/out/$o"; fi
        echo "==== $o"
        if [ ! -f "$f" ]; then echo "(missing)"; continue; fi
        case "$o" in
            *.safetensors|*.bin) cksum <"$f" ;;
            *) eval "$filter" <"$f" ;;
        esac
    done
}

# Checks point $2 of row $1 (tool name $3); prints "ok exit0", "ok exit1" or "FAIL ...".
check_point() {
    local row=$1 n=$2 name=$3 dir="$WORK/$3.$2" rc why="" what last
    run_one "$row" "$n" "$dir"
    rc=$(cat "$dir/rc")
    what=$(sed -n 's/^vkh2o-fault: .*fired at \(.*\)$/\1/p' "$dir/stderr" | head -1)
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="hang (no exit in ${TIMEOUT} s)"
    elif [ "$rc" -ge 128 ]; then why="killed by signal $((rc - 128))"
    elif grep -qE 'AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:' "$dir/stderr"; then
        why="sanitizer report"
    elif grep -qE 'vulkan: |Validation (Error|Warning)|VUID-' "$dir/stdout" "$dir/stderr"; then why="validation message"
    elif [ -z "$what" ]; then why="the fault did not fire (the run is not deterministic?)"
    elif [ "$rc" -eq 0 ]; then
        outputs_of "$row" "$dir" >"$dir/compared"
        cmp -s "$dir/compared" "$WORK/$name.ref/compared" ||
            why="exit 0 with outputs unlike the fault-free run's: $(diff "$WORK/$name.ref/compared" "$dir/compared" | sed -n 2p || true)"
    elif [ "$rc" -ne 1 ]; then why="exit status $rc (1 expected)"
    else
        last=$(grep -v '^vkh2o-fault: ' "$dir/stderr" | tail -1)
        if ! grep -qiE 'out of (host |device )?memory|OUT_OF_(HOST|DEVICE)_MEMORY' <<<"$last"; then
            why="last line does not say out of memory: $last"
        elif ! grep -qF -- "$what" <<<"$last"; then
            why="last line does not name the failed point ($what): $last"
        fi
    fi
    if [ -n "$why" ]; then
        echo "FAIL point $n (fired at ${what:-?}): $why"
        grep -E 'SUMMARY|ERROR|#[0-9]+ |VUID|error' "$dir/stderr" | head -12 | sed 's/^/    /'
    else
        if [ "$rc" -eq 0 ]; then echo "ok exit0 $n $what"; else echo "ok exit1 $n"; fi
        rm -rf "$dir"
    fi
}

if [ "${1:-}" = --point ]; then
    # internal: one point, run by xargs from the main loop below
    BUILD=$2 IN=$3 WORK=$4 SRC=$5 TIMEOUT=$6; name=$7; n=$8
    PRELOAD=()
    [ -n "${VKH2O_LSAN_PRELOAD:-}" ] && PRELOAD=(env "LD_PRELOAD=$VKH2O_LSAN_PRELOAD")
    for row in "${TOOLS[@]}"; do
        [ "$(field "$row" 1)" = "$name" ] && check_point "$row" "$n" "$name"
    done
    exit 0
fi

BUILD=$(cd "${1:-${VKH2O_BUILD_DIR:-build}}" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
TIMEOUT=${FAULT_TIMEOUT:-120}
JOBS=${FAULT_JOBS:-${JOBS:-2}}
WANT=${FAULT_TOOLS:-$(for row in "${TOOLS[@]}"; do field "$row" 1; done)}
export VKH2O_VALIDATION=1
export VKH2O_FAULT_MODE=${VKH2O_FAULT_MODE:-all}
PRELOAD=()
[ -n "${VKH2O_LSAN_PRELOAD:-}" ] && PRELOAD=(env "LD_PRELOAD=$VKH2O_LSAN_PRELOAD")
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
IN=$TMP/in WORK=$TMP/work
mkdir -p "$IN" "$WORK"
for s in "${SETUP[@]}"; do
    read -r -a argv <<<"$(expand "$s" "$IN")"
    argv[0]="$BUILD/${argv[0]}"
    "${argv[@]}" || { echo "FAIL: setup: $s"; exit 1; }
done

bad=0
summary=()
for name in $WANT; do
    row=""
    for r in "${TOOLS[@]}"; do [ "$(field "$r" 1)" = "$name" ] && row=$r; done
    [ -n "$row" ] || { echo "FAIL: no tool '$name' in the table"; exit 1; }
    t0=$(date +%s)
    run_one "$row" 0 "$WORK/$name.ref"
    if [ "$(cat "$WORK/$name.ref/rc")" != 0 ]; then
        cat "$WORK/$name.ref/stderr"; echo "FAIL: $name without a fault"; exit 1
    fi
    outputs_of "$row" "$WORK/$name.ref" >"$WORK/$name.ref/compared"
    # a second fault-free run: the compared outputs must not differ between identical runs (not
    # with FAULT_RUNS=1, the README test's one point per tool: every other sweep checks it)
    if [ "${FAULT_RUNS:-}" != 1 ]; then
        run_one "$row" 0 "$WORK/$name.ref2"
        outputs_of "$row" "$WORK/$name.ref2" >"$WORK/$name.ref2/compared"
        cmp -s "$WORK/$name.ref/compared" "$WORK/$name.ref2/compared" ||
            { diff "$WORK/$name.ref/compared" "$WORK/$name.ref2/compared" | head; echo "FAIL: $name: two fault-free runs differ (filter the timings)"; exit 1; }
    fi
    # each context counts its own points; a tool with several contexts fails the N-th of each
    read -r T H V < <(sed -n 's/^vkh2o-fault: points host \([0-9]*\) vulkan \([0-9]*\);.*/\1 \2/p' "$WORK/$name.ref/stderr" |
        awk '{ t = $1 + $2; if (t > m) { m = t; h = $1; v = $2 } } END { print m + 0, h + 0, v + 0 }')
    [ "$T" -gt 0 ] || { cat "$WORK/$name.ref/stderr"; echo "FAIL: $name: no injection points counted"; exit 1; }
    one=0   # FAULT_RUNS=1: the one point 1 + FAULT_PHASE mod T (the stride is then T)
    if [ -n "${FAULT_STRIDE:-}" ] || [ -z "${FAULT_RUNS:-}" ]; then STRIDE=${FAULT_STRIDE:-1}
    elif [ "$FAULT_RUNS" = 1 ]; then STRIDE=$T; one=1
    else STRIDE=$(( (T + FAULT_RUNS - 3) / (FAULT_RUNS > 2 ? FAULT_RUNS - 1 : 1) )); fi
    [ "$STRIDE" -ge 1 ] || STRIDE=1
    if [ -n "${FAULT_POINTS:-}" ]; then tr ' ' '\n' <<<"$FAULT_POINTS" | grep . >"$WORK/$name.points"
    elif [ $one = 1 ]; then echo $((1 + ${FAULT_PHASE:-0} % T)) >"$WORK/$name.points"
    else { echo 1; seq $((1 + ${FAULT_PHASE:-0} % STRIDE)) "$STRIDE" "$T"; echo "$T"; } | sort -nu >"$WORK/$name.points"; fi
    # a point whose check itself died prints no verdict: counted as failed below
    xargs -P "$JOBS" -I{} bash "$0" --point "$BUILD" "$IN" "$WORK" "$SRC" "$TIMEOUT" "$name" {} \
        <"$WORK/$name.points" >"$WORK/$name.results" || true
    swept=$(wc -l <"$WORK/$name.points")
    verdicts=$(grep -cE "^(ok |FAIL)" "$WORK/$name.results" || true)
    [ "$verdicts" -eq "$swept" ] || echo "FAIL $((swept - verdicts)) points without a verdict (the check died)" >>"$WORK/$name.results"
    exit0=$(grep -c '^ok exit0' "$WORK/$name.results" || true)
    failed=$(( swept - $(grep -c '^ok ' "$WORK/$name.results" || true) ))
    grep -v '^ok ' "$WORK/$name.results" | sed "s/^/vkh2o-$name: /" || true
    did_without=$(awk '/^ok exit0/ { printf "%s%s", n++ ? ", " : ": ", $4 }' "$WORK/$name.results")
    line="vkh2o-$name: $T points (host $H, vulkan $V), stride $STRIDE phase ${FAULT_PHASE:-0}: $swept swept, $((swept - failed)) survived ($exit0 of them exit 0 with the same outputs$did_without), $(($(date +%s) - t0)) s"
    echo "$line"
    summary+=("$line")
    bad=$((bad + failed))
done
echo "---- fault sweep ($SECONDS s)"
printf '%s\n' "${summary[@]}"
[ $bad -eq 0 ] || { echo "FAIL: $bad points not survived"; exit 1; }
echo "ok"
