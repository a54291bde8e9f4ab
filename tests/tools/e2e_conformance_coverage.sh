#!/usr/bin/env bash
# Coverage of the conformance registry: every compute shader under shaders/ is dispatched by at
# least one case of vkh2o-conformance, as the case declares it (and the registry run checks the
# declaration: a case fails when the kernels it dispatched differ). A new shader without a case
# fails here. And ctest runs every op of the registry (conf.<op>, the list CMakeLists.txt reads
# from the families' case names, passed as VKH2O_CONFORMANCE_OPS): an op it missed, or one it
# lists that has no case, fails here too.
set -euo pipefail
bin=${1:-${VKH2O_BUILD_DIR:-.}}
src=${VKH2O_SOURCE_DIR:?VKH2O_SOURCE_DIR names the source tree}
"$bin/vkh2o-conformance" --list --shapes all > "$bin/e2e_conformance_coverage.list"
trap 'rm -f "$bin/e2e_conformance_coverage.list"' EXIT
covered=$(sed -n 's/^ *kernels: //p' "$bin/e2e_conformance_coverage.list" | tr ',' '\n' | sort -u)
missing=0
n=0
while IFS= read -r f; do
    k=$(basename "$f" .comp)
    n=$((n + 1))
    if ! grep -qx "$k" <<< "$covered"; then
        echo "FAIL: ${f#"$src"/} has no case in vkh2o-conformance (tools/conformance/)" >&2
        missing=$((missing + 1))
    fi
done < <(find "$src/shaders" -name '*.comp' | sort)
[ "$n" -gt 0 ] || { echo "FAIL: no shader found under $src/shaders" >&2; exit 1; }
# the registry's ops (a case line starts with its name) against the conf.<op> tests
ops=$(grep -E '^[a-z0-9_]+\.[a-z0-9_]+\.' "$bin/e2e_conformance_coverage.list" | cut -d' ' -f1 | cut -d. -f1-2 | sort -u)
tested=$(tr ',' '\n' <<< "${VKH2O_CONFORMANCE_OPS:?VKH2O_CONFORMANCE_OPS lists the conf.<op> tests (set by ctest)}" | grep . | sort -u)
[ -n "$ops" ] || { echo "FAIL: vkh2o-conformance --list shows no case" >&2; exit 1; }
for op in $ops; do
    grep -qx "$op" <<< "$tested" || { echo "FAIL: op $op has no ctest conf.$op (CMakeLists.txt reads the ops from the \"<concept>.<op>.%s\" names given to conf_add)" >&2; missing=$((missing + 1)); }
done
for op in $tested; do
    grep -qx "$op" <<< "$ops" || { echo "FAIL: ctest has conf.$op but the registry has no case of $op" >&2; missing=$((missing + 1)); }
done
[ "$missing" -eq 0 ] || exit 1
echo "e2e_conformance_coverage: all $n shaders have a case; ctest runs all $(wc -w <<< "$ops") ops (conf.<op>)"
