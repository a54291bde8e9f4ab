#!/usr/bin/env bash
# The tools' fault sweep (tests/tools/fault_sweep.sh, which says what each point must give) at a
# stride: in the default run one point in each of half of the tools (FAULT_RUNS=1 at a random (or VKH2O_TEST_SEED)
# FAULT_PHASE, printed, so a failure can be replayed: any point from the first to the last; the
# tools of the table in turn, demo / validate / bench at an even phase, eval / quant at an odd
# one, so that two runs cover every tool: each tool's fault-free run compiles its kernels, most
# of this test's time on lavapipe); in the full run (VKH2O_TEST_FULL=1) 8 points per tool of
# every tool, evenly spaced, the first and the last among them. FAULT_TOOLS, when set, names the
# tools instead. Every point of every tool is
# swept by `bash scripts/vkh2o.sh faults` (a CI step); under test-sanitize this stride runs with
# LeakSanitizer on every tool run (VKH2O_LSAN_PRELOAD, which the step sets).
set -euo pipefail
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then runs=8; phase=0; tools=""; else
    runs=1; phase=${VKH2O_TEST_SEED:-$RANDOM}
    if [ $((${FAULT_PHASE:-$phase} % 2)) = 0 ]; then tools="demo validate bench"; else tools="eval quant"; fi
fi
export FAULT_RUNS=${FAULT_RUNS:-$runs} FAULT_PHASE=${FAULT_PHASE:-$phase}
[ -z "$tools" ] || export FAULT_TOOLS=${FAULT_TOOLS:-$tools}
echo "e2e_faults: FAULT_RUNS=$FAULT_RUNS FAULT_PHASE=$FAULT_PHASE${FAULT_TOOLS:+ FAULT_TOOLS=\"$FAULT_TOOLS\"}"
exec bash "$(dirname "$0")/fault_sweep.sh" "${1:-${VKH2O_BUILD_DIR:-build}}"
