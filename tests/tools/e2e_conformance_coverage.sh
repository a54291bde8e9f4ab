#!/usr/bin/env bash
# Coverage of the conformance registry: every compute shader under shaders/ is dispatched by at
# least one case of
# vkh2o-conformance, as the case declares it (and the registry run checks the declaration: a
# case fails when the kernels it dispatched differ). A new shader without a case fails here.
set -euo pipefail
bin=${1:-${VKH2O_BUILD_DIR:-.}}
src=${VKH2O_SOURCE_DIR:?VKH2O_SOURCE_DIR names the source tree}
covered=$("$bin/vkh2o-conformance" --list --shapes all | sed -n 's/^ *kernels: //p' | tr ',' '\n' | sort -u)
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
[ "$missing" -eq 0 ] || exit 1
echo "e2e_conformance_coverage: all $n shaders have a case"
