#!/usr/bin/env bash
# ctest's conf.<op>: one op of the conformance registry (vkh2o-conformance, tools/conformance/)
# in test mode under the validation layer: every case of the op against its reference, fresh
# random inputs each run (VKH2O_TEST_SEED replays one; the seed is printed), outputs poisoned,
# each case dispatching exactly the kernels it declares; a validation message fails the case.
# The shape set: the CPU kernel shapes; both sets in the full run (VKH2O_TEST_FULL=1); the GPU
# shapes alone under VKH2O_GPU_SHAPES=1 (scripts/vkh2o.sh test-gpu-shapes: every context takes
# them, so the CPU-shape cases would be NOT_SUPPORTED). VKH2O_TEST_BASELINE=1 (test-baseline)
# runs them on a context without push descriptors and the optional features (--baseline).
# The default run takes half of the cases of an op that has at least 4 (--shard K/2, K from the
# seed: every case compiles its own kernels, most of the time on a fresh machine); the full run
# every case.
# Usage: conformance_op.sh BUILD_DIR OP   (the test list comes from CMakeLists.txt)
set -euo pipefail
bin=${1:?build directory}
op=${2:?op, e.g. mla.forward}
shapes=cpu
[ "${VKH2O_TEST_FULL:-0}" = 1 ] && shapes=all
[ "${VKH2O_GPU_SHAPES:-0}" = 1 ] && shapes=gpu
extra=()
[ "${VKH2O_TEST_BASELINE:-0}" = 1 ] && extra+=(--baseline)
seed=${VKH2O_TEST_SEED:-$(( $(date +%s%N) % 1000000000000 ))}
part=()
what=
if [ "${VKH2O_TEST_FULL:-0}" != 1 ]; then
    n=$("$bin/vkh2o-conformance" -o "$op" --shapes "$shapes" --list "${extra[@]}" | tail -n 1 | cut -d' ' -f1)
    [ "$n" -ge 4 ] && part=(--shard "$((seed % 2))/2") && what=", cases --shard $((seed % 2))/2 of $n"
fi
echo "conf.$op: seed $seed (rerun with VKH2O_TEST_SEED=$seed), shapes $shapes$what"
VKH2O_VALIDATION=1 "$bin/vkh2o-conformance" -o "$op" --shapes "$shapes" --seed "$seed" --quiet "${part[@]}" "${extra[@]}"
