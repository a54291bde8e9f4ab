#!/usr/bin/env bash
# The conformance registry in test mode with the CPU kernel shapes, under the validation layer:
# every case of vkh2o-conformance (tools/conformance/) against its reference, each dispatching
# exactly the kernels it declares; a validation message fails the case. Fresh random inputs each
# run (VKH2O_TEST_SEED replays one; the seed is printed). The GPU shapes run too in the full grid
# (VKH2O_TEST_FULL=1), and in scripts/gpu-check.sh.
set -euo pipefail
bin=${1:-${VKH2O_BUILD_DIR:-.}}
shapes=cpu
[ "${VKH2O_TEST_FULL:-0}" = 1 ] && shapes=all
# under VKH2O_GPU_SHAPES=1 (scripts/vkh2o.sh test-gpu-shapes) every context takes the GPU shapes:
# the GPU-shape cases are what that run is for (the CPU-shape ones would be NOT_SUPPORTED)
[ "${VKH2O_GPU_SHAPES:-0}" = 1 ] && shapes=gpu
seed=${VKH2O_TEST_SEED:-$(( $(date +%s%N) % 1000000000000 ))}
echo "e2e_conformance_registry: seed $seed (rerun with VKH2O_TEST_SEED=$seed)"
VKH2O_VALIDATION=1 "$bin/vkh2o-conformance" --shapes "$shapes" --seed "$seed" --quiet
