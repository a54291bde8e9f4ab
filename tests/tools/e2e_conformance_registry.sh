#!/usr/bin/env bash
# The conformance registry in test mode with the CPU kernel shapes, under the validation layer:
# every case of vkh2o-conformance (tools/conformance/) against its reference, each dispatching
# exactly the kernels it declares; a validation message fails the case. The GPU shapes run in
# the full grid (VKH2O_TEST_FULL=1) and in scripts/gpu-check.sh.
set -euo pipefail
bin=${1:-${VKH2O_BUILD_DIR:-.}}
shapes=cpu
[ "${VKH2O_TEST_FULL:-0}" = 1 ] && shapes=all
VKH2O_VALIDATION=1 "$bin/vkh2o-conformance" --shapes "$shapes" --quiet
