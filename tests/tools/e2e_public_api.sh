#!/usr/bin/env bash
# The tools and the CPU references are clients of the public API (issue 9, item 6): their object
# files call no vkh2o_* function that include/vkh2o*.h does not declare VKH2O_API, and their
# sources (tools/common/, each tool's own modules in tools/<tool>/, ref/) include no private
# header.
set -euo pipefail
bin=${1:-${VKH2O_BUILD_DIR:-.}}
src=${VKH2O_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() { echo "FAIL: $*" >&2; exit 1; }
# (exit 77: ctest's SKIP_RETURN_CODE, so that a check that cannot run is reported as skipped)
command -v nm > /dev/null || { echo "SKIP: e2e_public_api: no nm (binutils) to read the object files"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -ho 'VKH2O_API[^(]*(' "$src"/include/vkh2o.h "$src"/include/vkh2o/*.h | grep -o 'vkh2o_[a-z0-9_]*($' | tr -d '(' |
    sort -u > "$tmp/public"
[ "$(wc -l < "$tmp/public")" -gt 50 ] || fail "found only $(wc -l < "$tmp/public") public functions in the headers"
checked=0
for dir in "$bin"/CMakeFiles/vkh2o-*.dir "$bin"/CMakeFiles/vkh2o_ref.dir; do
    name=$(basename "$dir" .dir)
    objs=$(find "$dir" -name '*.o')
    [ -n "$objs" ] || fail "$name: no object files in $dir"
    # shellcheck disable=SC2086
    nm -u $objs | awk '{print $NF}' | grep '^vkh2o_' | sort -u | comm -23 - "$tmp/public" > "$tmp/private" || true
    for s in $(cat "$tmp/private"); do
        fail "$name calls the private $s"
    done
    checked=$((checked + 1))
done
[ $checked -ge 6 ] || fail "only $checked targets checked"
# sources: no private header outside the declared exceptions
for f in "$src"/tools/*/* "$src"/ref/* "$src"/tools/vkh2o-*.c; do
    [ -f "$f" ] || continue
    if grep -nE '#include +"[a-z_]*internal\.h"' "$f"; then fail "$f includes a private header"; fi
done
echo "e2e_public_api: ok ($checked targets use only public vkh2o_* functions and public headers)"
