#!/usr/bin/env bash
# The one-command GPU check, what to run when a GPU machine is lent: builds in Release, prints
# the device, runs vkh2o-conformance --mode test (every kernel's cases against the CPU
# references, both shape sets, validation layer on) and --mode perf (each case timed with GPU
# timestamps against this device's roofline, measured in the same run), then the decode
# benchmarks; leaves their JSON, the logs and one summary table (summary.md) in OUTDIR. A
# discrete GPU should finish in under 8 minutes (the script prints the total time). It refuses
# to run on a CPU device (lavapipe) unless --allow-cpu is given, which CI uses so that the script
# cannot rot.
#
#   bash scripts/gpu-check.sh OUTDIR [--allow-cpu] [--device N]
#
# Environment: BUILD_DIR (default build-gpu-check), JOBS (default nproc), VKH2O_SKIP_APT=1.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; }
OUT=""
ALLOW_CPU=0
DEVICE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --allow-cpu) ALLOW_CPU=1 ;;
        --device) [ $# -ge 2 ] || { echo "gpu-check: --device needs a value" >&2; exit 2; }; DEVICE=$2; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "gpu-check: unknown option '$1'" >&2; usage >&2; exit 2 ;;
        *) [ -z "$OUT" ] || { echo "gpu-check: one OUTDIR only" >&2; exit 2; }; OUT=$1 ;;
    esac
    shift
done
[ -n "$OUT" ] || { usage >&2; exit 2; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD_DIR:-build-gpu-check}
export JOBS=${JOBS:-$(nproc)}
[ -n "$DEVICE" ] && export VKH2O_DEVICE=$DEVICE
t0=$(date +%s)
step() { echo "== gpu-check [$(( $(date +%s) - t0 )) s]: $*"; }

step "build (Release) into $BUILD"
BUILD_DIR=$BUILD bash scripts/vkh2o.sh build > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "gpu-check: FAILED: build" >&2; exit 1; }

step "device"
"$BUILD/vkh2o-info" | tee "$OUT/info.txt"
chosen_type=$(awk '/^  \[[0-9]+\] /{name=substr($0, index($0, "] ") + 2)} /^    type /{sub(/^    type +/, ""); types[name]=$0}
                   /^chosen: /{sub(/^chosen: /, ""); print types[$0]}' "$OUT/info.txt")
echo "gpu-check: the chosen device is of type: ${chosen_type:-unknown}"
if [ "$chosen_type" = CPU ] && [ "$ALLOW_CPU" != 1 ]; then
    echo "gpu-check: FAILED: the device is a CPU (lavapipe?), not a GPU; is the GPU's Vulkan ICD installed and visible" >&2
    echo "           (VK_ICD_FILENAMES / VK_DRIVER_FILES)? Pass --allow-cpu to run on a CPU device anyway." >&2
    exit 1
fi

run_conf() {   # run_conf NAME ARGS...: vkh2o-conformance with its JSON in OUT/NAME.json, output in OUT/NAME.txt
    local name=$1; shift
    step "$name: vkh2o-conformance $*"
    if ! "$BUILD/vkh2o-conformance" --quiet --json "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1; then
        tail -40 "$OUT/$name.txt"
        echo "gpu-check: FAILED: $name (full output: $OUT/$name.txt)" >&2
        exit 1
    fi
    tail -1 "$OUT/$name.txt"
}
# every case, both shape sets (the CPU shapes are NOT_SUPPORTED on a GPU), validation layer on
VKH2O_VALIDATION=1 run_conf conformance-test --mode test --shapes all
# the shapes this device's kernels take, timed against the roofline
perf_shapes=gpu
[ "$chosen_type" = CPU ] && perf_shapes=cpu
run_conf conformance-perf --mode perf --shapes "$perf_shapes"

run() {   # run NAME CMD...: stdout to OUT/NAME, stderr to OUT/NAME.err
    local name=$1; shift
    step "$name: $*"
    if ! "$@" > "$OUT/$name" 2> "$OUT/$name.err"; then
        cat "$OUT/$name.err" >&2
        echo "gpu-check: FAILED: $name" >&2
        exit 1
    fi
}
# the decode step (BF16 / FP8) and the per-policy costs at 4096 kept tokens, and the one KV
# cache's decode step per precision beside the H2O cache; on a CPU device (CI's lavapipe run)
# shorter caches and fewer runs keep the step bounded (the full grid is for GPUs)
if [ "$chosen_type" = CPU ]; then
    run bench-decode.json "$BUILD/vkh2o-bench" --json --decode --policy-cost --cache-len 1024 --runs 2
    run bench-kv-decode.json "$BUILD/vkh2o-bench" --json --kv-decode --cache-len 256 --runs 1
else
    run bench-decode.json "$BUILD/vkh2o-bench" --json --decode --policy-cost --cache-len 4096
    run bench-kv-decode.json "$BUILD/vkh2o-bench" --json --kv-decode --cache-len 4096
fi
step "summary"
{
    echo "# gpu-check on $(sed -n 's/^chosen: //p' "$OUT/info.txt")"
    echo
    python3 scripts/conformance-table.py "$OUT/conformance-test.json" "$OUT/conformance-perf.json"
    echo "### The decode benchmarks"
    echo
    python3 scripts/perf-tables.py "$OUT/bench-decode.json" "$OUT/bench-kv-decode.json"
} > "$OUT/summary.md"
cat "$OUT/summary.md"
total=$(( $(date +%s) - t0 ))
step "done in $total s: summary.md, the JSON and the logs in $OUT"
[ "$chosen_type" = CPU ] || [ "$total" -le 480 ] || echo "gpu-check: note: $total s, over the 8 minutes this check should take on a GPU" >&2
ls -l "$OUT"
