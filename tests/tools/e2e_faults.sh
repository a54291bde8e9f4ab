#!/usr/bin/env bash
# The tools' fault sweep (tests/tools/fault_sweep.sh, which says what each point must give) at a
# stride: FAULT_RUNS points per tool, the first, the last and evenly between (4 in the default
# run, 8 in the full run, VKH2O_TEST_FULL=1). Every point of every tool is swept by
# `bash scripts/vkh2o.sh faults` (a CI step); under test-sanitize this stride runs with
# LeakSanitizer on every tool run (VKH2O_LSAN_PRELOAD, which the step sets).
set -euo pipefail
if [ "${VKH2O_TEST_FULL:-0}" = 1 ]; then runs=8; else runs=4; fi
FAULT_RUNS=${FAULT_RUNS:-$runs} exec bash "$(dirname "$0")/fault_sweep.sh" "${1:-${VKH2O_BUILD_DIR:-build}}"
