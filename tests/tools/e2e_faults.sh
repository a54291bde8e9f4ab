#!/usr/bin/env bash
# The tools' fault sweep (tests/tools/fault_sweep.sh, which says what each point must give) at a
# stride: in the default run one point per tool that changes from run to run (FAULT_RUNS=1 at a
# random FAULT_PHASE, printed, so a failure can be replayed: any point from the first to the
# last); in the full run (VKH2O_TEST_FULL=1) 8 points per tool, evenly spaced, the first and the
# last among them. Every point of every tool is
# swept by `bash scripts/vkh2o.sh faults` (a CI step); under test-sanitize this stride runs with
# LeakSanitizer on every tool run (VKH2O_LSAN_PRELOAD, which the step sets).
set -euo pipefail
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then runs=8; phase=0; else runs=1; phase=$RANDOM; fi
export FAULT_RUNS=${FAULT_RUNS:-$runs} FAULT_PHASE=${FAULT_PHASE:-$phase}
echo "e2e_faults: FAULT_RUNS=$FAULT_RUNS FAULT_PHASE=$FAULT_PHASE"
exec bash "$(dirname "$0")/fault_sweep.sh" "${1:-${VKH2O_BUILD_DIR:-build}}"
