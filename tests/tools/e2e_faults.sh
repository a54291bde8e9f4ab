#!/usr/bin/env bash
# The tools' fault sweep (tests/tools/fault_sweep.sh, which says what each point must give) at a
# stride: in the default run the first point, the last and one between them that changes from
# run to run (FAULT_RUNS=2 at a random FAULT_PHASE, printed, so a failure can be replayed); in
# the full run (VKH2O_TEST_FULL=1) 8 points per tool, evenly spaced. Every point of every tool is
# swept by `bash scripts/vkh2o.sh faults` (a CI step); under test-sanitize this stride runs with
# LeakSanitizer on every tool run (VKH2O_LSAN_PRELOAD, which the step sets).
set -euo pipefail
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then runs=8; phase=0; else runs=2; phase=$RANDOM; fi
export FAULT_RUNS=${FAULT_RUNS:-$runs} FAULT_PHASE=${FAULT_PHASE:-$phase}
echo "e2e_faults: FAULT_RUNS=$FAULT_RUNS FAULT_PHASE=$FAULT_PHASE"
exec bash "$(dirname "$0")/fault_sweep.sh" "${1:-${VKH2O_BUILD_DIR:-build}}"
