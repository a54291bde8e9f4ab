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
# seed: every case compiles its own kernels, most of the time on a fresh machine), a quarter of
# an op that has at least 20 (--shard K/4; kvcache.step an eighth, K/8: its 30 cases reach 6
# kernels and each case compiles its own variants of them) plus, for each of the op's kernels that
# part would leave out, the first case after it that dispatches it (so every kernel keeps a case);
# the full run every case.
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
sel=$op
what=
if [ "${VKH2O_TEST_FULL:-0}" != 1 ]; then
    list=$("$bin/vkh2o-conformance" -o "$op" --shapes "$shapes" --list "${extra[@]}")
    n=$(tail -n 1 <<<"$list" | cut -d' ' -f1)
    if [ "$n" -ge 20 ]; then
        # case i (0-based, in list order) is in the part when i % parts == k; a kernel the part
        # lacks brings its first case from k on (wrapping round)
        parts=4
        [ "$op" = kvcache.step ] && parts=8
        k=$((seed % parts))
        names=$(awk -v k="$k" -v n="$n" -v parts="$parts" '
            /^    kernels: / { split(substr($0, 15), ks, ","); for (j in ks) { kern[i - 1, ks[j]] = 1; all[ks[j]] = 1 }; next }
            /^[^ ]/ && NF > 1 && !/^[0-9]+ cases?$/ { name[i++] = $1 }
            function take(c,   x) { pick[c] = 1; for (x in all) if ((c, x) in kern) have[x] = 1 }
            END {
                for (c = 0; c < n; c++) if (c % parts == k) take(c)
                for (x in all) if (!(x in have))
                    for (d = 0; d < n; d++) { c = (k + d) % n; if ((c, x) in kern) { take(c); break } }
                sep = ""; for (c = 0; c < n; c++) if (c in pick) { printf "%s%s", sep, name[c]; sep = "," }
            }' <<<"$list")
        sel=$names
        what=", cases --shard $k/$parts of $n and a case for each kernel it lacks: $(tr ',' '\n' <<<"$names" | wc -l) cases"
    elif [ "$n" -ge 4 ]; then
        part=(--shard "$((seed % 2))/2") && what=", cases --shard $((seed % 2))/2 of $n"
    fi
fi
echo "conf.$op: seed $seed (rerun with VKH2O_TEST_SEED=$seed), shapes $shapes$what"
VKH2O_VALIDATION=1 "$bin/vkh2o-conformance" -o "$sel" --shapes "$shapes" --seed "$seed" --quiet "${part[@]}" "${extra[@]}"
