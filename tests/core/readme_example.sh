#!/usr/bin/env bash
# The README's embedding example, so that it cannot rot: the first ```c block of README.md is
# compiled against the library as an application would (the public header, the built library
# and what it links) and run from the source tree with the validation layer on. It must exit 0,
# print the prompt and what it generated and the cache's bytes, and say nothing on stderr.
# Usage: readme_example.sh SOURCE_DIR BUILD_DIR CC LIBRARY [LINK_FLAGS...]
set -uo pipefail
src=$1 build=$2 cc=$3 lib=$4
shift 4
fail() { echo "FAIL: readme_example: $*" >&2; exit 1; }
work=$build/readme_example
mkdir -p "$work"
awk '/^```c[[:space:]]*$/ { on = 1; next } on && /^```/ { exit } on' "$src/README.md" > "$work/example.c"
lines=$(grep -c '' "$work/example.c")
[ "$lines" -gt 0 ] || fail "README.md has no \`\`\`c block"
echo "readme_example: README.md's C example, $lines lines"
rpath=()
case "$lib" in *.so*) rpath=("-Wl,-rpath,$(dirname "$lib")") ;; esac
"$cc" -std=c11 -Wall -Wextra -Werror -I"$src/include" "$work/example.c" -o "$work/example" "$lib" "${rpath[@]}" "$@" \
    2> "$work/cc.log" || { cat "$work/cc.log" >&2; fail "it does not compile"; }
rc=0
(cd "$src" && VKH2O_VALIDATION=1 ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" timeout 300 "$work/example") > "$work/stdout" 2> "$work/stderr" || rc=$?
cat "$work/stdout"
if [ $rc -ne 0 ] && grep -q 'no Vulkan 1.2 device' "$work/stdout" && [ "${VKH2O_REQUIRE_DEVICE:-0}" != 1 ]; then
    echo "SKIP: readme_example: compiled; no Vulkan 1.2 device to run it on"
    exit 77
fi
[ $rc -eq 0 ] || { cat "$work/stderr" >&2; fail "exit $rc"; }
[ ! -s "$work/stderr" ] || { cat "$work/stderr" >&2; fail "it printed on stderr (a validation message?)"; }
grep -q 'bytes of cache$' "$work/stdout" || fail "no cache bytes in its output"
echo "readme_example: ok"
