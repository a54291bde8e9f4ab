#!/usr/bin/env bash
# The libraries define only the public API: every global symbol of the static archive and
# every dynamic symbol the shared library defines must be a function declared with VKH2O_API
# in include/ (no vk* function pointers, no private vkh2o_* helpers, nothing else), and every
# declared function must be there. Neither may need a vk* symbol from elsewhere (the library
# opens the loader itself, it never links it).
# Usage: tests/core/check_symbols.sh <include-dir> <libvkh2o.a> <libvkh2o.so>
set -euo pipefail
inc=$1; static=$2; shared=$3
# (exit 77: ctest's SKIP_RETURN_CODE, so that a check that cannot run is reported as skipped)
command -v nm > /dev/null || { echo "SKIP: no nm (binutils) to read the libraries' symbols"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# "VKH2O_API <return type> name(" on one line (the house style of every declaration)
grep -rhE '^[[:space:]]*VKH2O_API[[:space:]]' "$inc" | sed -E 's/^[^(]*[ *]([A-Za-z_][A-Za-z0-9_]*)\(.*/\1/' | sort -u > "$tmp/api"
n_api=$(wc -l < "$tmp/api")
[ "$n_api" -gt 50 ] || { echo "only $n_api VKH2O_API declarations found in $inc: the pattern is broken"; exit 1; }
status=0
check() {   # <label> <file of defined symbols> <file of undefined symbols>
    local label=$1 defined=$2 undefined=$3
    local extra missing vk
    extra=$(comm -13 "$tmp/api" "$defined")
    missing=$(comm -23 "$tmp/api" "$defined")
    vk=$(grep -E '^vk[A-Z]' "$undefined" || true)
    if [ -n "$extra" ]; then
        echo "$label: defines $(echo "$extra" | wc -l) symbols outside the public API:"; echo "$extra" | head -20 | sed 's/^/    /'; status=1
    fi
    if [ -n "$missing" ]; then
        echo "$label: lacks declared API functions:"; echo "$missing" | sed 's/^/    /'; status=1
    fi
    if [ -n "$vk" ]; then
        echo "$label: needs Vulkan loader symbols:"; echo "$vk" | head -20 | sed 's/^/    /'; status=1
    fi
    [ -n "$extra$missing$vk" ] || echo "$label: $(wc -l < "$defined") symbols defined, all public vkh2o_* API ($n_api declared)"
}
nm -g --defined-only "$static" | awk 'NF == 3 { print $3 }' | sort -u > "$tmp/static_def"
nm -g --undefined-only "$static" | awk '{ print $NF }' | sort -u > "$tmp/static_undef"
check "$(basename "$static")" "$tmp/static_def" "$tmp/static_undef"
nm -D --defined-only "$shared" | awk 'NF == 3 { print $3 }' | sed 's/@.*//' | sort -u > "$tmp/shared_def"
nm -D --undefined-only "$shared" | awk '{ print $NF }' | sed 's/@.*//' | sort -u > "$tmp/shared_undef"
check "$(basename "$shared")" "$tmp/shared_def" "$tmp/shared_undef"
exit $status
