#!/usr/bin/env bash
# The one-command GPU check: builds in Release, prints the device, runs the whole conformance
# suite on it with the validation layer on, then the benchmarks, writing every log and JSON
# into OUTDIR. Meant for a machine with a real GPU (a discrete one should finish in well under
# 8 minutes); it refuses to run on a CPU device (lavapipe) unless --allow-cpu is given, which CI
# uses so that the script cannot rot.
#
#   bash scripts/gpu-check.sh OUTDIR [--allow-cpu] [--device N]
#
# Environment: BUILD_DIR (default build-gpu-check), JOBS (default nproc), VKH2O_SKIP_APT=1.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }
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

step "conformance suite (ctest, validation layer on, device required)"
if ! (cd "$BUILD" && VKH2O_REQUIRE_DEVICE=1 ctest --output-on-failure -j "$JOBS" --timeout 1200) > "$OUT/ctest.log" 2>&1; then
    tail -60 "$OUT/ctest.log"
    echo "gpu-check: FAILED: conformance suite (full log: $OUT/ctest.log)" >&2
    exit 1
fi
tail -3 "$OUT/ctest.log"

run() {   # run NAME CMD...: stdout to OUT/NAME, stderr to OUT/NAME.err
    local name=$1; shift
    step "$name: $*"
    if ! "$@" > "$OUT/$name" 2> "$OUT/$name.err"; then
        cat "$OUT/$name.err" >&2
        echo "gpu-check: FAILED: $name" >&2
        exit 1
    fi
}
run bench.json "$BUILD/vkh2o-bench" --json --read
# the decode step (BF16 / FP8) and the per-policy costs at 4096 kept tokens, and the scaling
# tables with their plot; on a CPU device (CI's lavapipe run) a reduced grid and fewer runs keep
# the step bounded (lavapipe runs the 4096-token step too, but slowly: the full grid is for GPUs)
# (and the one KV cache's decode step per precision beside the H2O cache)
if [ "$chosen_type" = CPU ]; then
    run bench-decode.json "$BUILD/vkh2o-bench" --json --decode --policy-cost --cache-len 1024 --runs 2
    run bench-kv-decode.json "$BUILD/vkh2o-bench" --json --kv-decode --cache-len 256 --runs 1
    run bench-scaling.json "$BUILD/vkh2o-bench" --json --scaling --scaling-max 512 --runs 1 --plot "$OUT/scaling.svg"
else
    run bench-decode.json "$BUILD/vkh2o-bench" --json --decode --policy-cost --cache-len 4096
    run bench-kv-decode.json "$BUILD/vkh2o-bench" --json --kv-decode --cache-len 4096
    run bench-scaling.json "$BUILD/vkh2o-bench" --json --scaling --runs 3 --plot "$OUT/scaling.svg"
fi
run validate.txt "$BUILD/vkh2o-validate" --quiet
run quant-bench.txt "$BUILD/vkh2o-quant" --bench --quiet
run demo.txt "$BUILD/vkh2o-demo" --quiet
step "done: logs and JSON in $OUT"
ls -l "$OUT"
