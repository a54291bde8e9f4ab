#!/usr/bin/env bash
# The GPU check for an offline node, both halves (a CI step, not a ctest suite: it downloads
# .debs): scripts/gpu-check.sh --prepare into a new folder (reusing BUILD_DIR's build), the
# folder moved to another path, then DIR/gpu-check.sh --prebuilt DIR OUT --allow-cpu in a clean
# environment: `env -i` with PATH=SHIMS:/usr/bin:/bin and a fresh HOME, run from /, where SHIMS
# holds apt-get, apt, dpkg, sudo, cmake, ninja, glslangValidator, cc and gcc stand-ins that
# record a call and fail. lavapipe's ICD (installed system-wide) is the node's driver; the system
# also has the loader, cJSON, cmocka and the layer, so the run proves with the dynamic linker's
# own trace (LD_DEBUG=libs) that every libvulkan.so.1, libcjson.so.1, libcmocka.so.0 and
# libVkLayer_khronos_validation.so any process of the run loaded came from the moved folder,
# and that nothing ran a stand-in. Then bad input, each one line on stderr and exit 1: a
# missing folder, one not prepared, one prepared for another architecture, one built against a
# newer glibc, VK_DRIVER_FILES naming no file, a driver file with no device behind it (lavapipe
# installed, yet not found: VK_DRIVER_FILES honoured); and --prepare into a non-empty folder,
# which leaves the folder as it was.
#
#   bash tests/tools/gpucheck_prebuilt.sh [BUILD_DIR]     # default build; .ci/run runs it
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${1:-build}
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)

echo "-- prepare (BUILD_DIR=$BUILD) into $tmp/prep"
BUILD_DIR=$BUILD bash scripts/gpu-check.sh --prepare "$tmp/prep" > "$tmp/prepare.log" 2>&1 ||
    { cat "$tmp/prepare.log"; fail "--prepare"; }
tail -3 "$tmp/prepare.log"
[ -f "$tmp/prep/vkh2o-prepared.txt" ] || fail "--prepare wrote no vkh2o-prepared.txt"
for d in libvulkan1 libcjson1 libcmocka0 vulkan-validationlayers; do
    ls "$tmp/prep/debs/${d}_"*.deb > /dev/null 2>&1 || fail "--prepare left no $d .deb in debs/"
done

# the folder goes somewhere else: nothing may point back at where it was made
mkdir -p "$tmp/elsewhere/node"
mv "$tmp/prep" "$tmp/elsewhere/node/vkh2o check"
DIR="$tmp/elsewhere/node/vkh2o check"
OUT="$tmp/out"

mkdir -p "$tmp/shims" "$tmp/home" "$tmp/ld"
for s in apt-get apt dpkg sudo cmake ninja glslangValidator cc gcc; do
    printf '#!/bin/sh\necho "%s $*" >> %s/shim-calls\nexit 1\n' "$s" "$tmp" > "$tmp/shims/$s"
    chmod +x "$tmp/shims/$s"
done
clean() { (cd / && env -i PATH="$tmp/shims:/usr/bin:/bin" HOME="$tmp/home" "$@"); }

echo "-- --prebuilt from the moved folder, clean environment (suites test_config, test_rmsnorm)"
rc=0
clean LD_DEBUG=libs LD_DEBUG_OUTPUT="$tmp/ld/trace" bash "$DIR/gpu-check.sh" --prebuilt "$DIR" "$OUT" \
    --allow-cpu --tests '^test_(config|rmsnorm)$' > "$tmp/prebuilt.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$tmp/prebuilt.log"; fail "--prebuilt exited $rc"; }
grep '^gpu-check: \(the device\|Vulkan\)' "$tmp/prebuilt.log"
grep -q "^gpu-check: the device: llvmpipe .*(type CPU, driver llvmpipe" "$tmp/prebuilt.log" ||
    fail "--prebuilt did not name the device it found"
[ ! -e "$tmp/shim-calls" ] || { cat "$tmp/shim-calls"; fail "--prebuilt ran a build or package tool"; }
for f in summary.md info.txt conformance-test.json conformance-perf.json bench-decode.json bench-kv-decode.json tests/summary.txt; do
    [ -s "$OUT/$f" ] || fail "--prebuilt left no $f"
done
grep -q '^# gpu-check on llvmpipe' "$OUT/summary.md" || fail "summary.md has no heading naming the device"
grep -q '^| op | cases | pass' "$OUT/summary.md" || fail "summary.md has no conformance table"
[ "$(grep -c ': ok (' "$OUT/tests/summary.txt")" = 2 ] || { cat "$OUT/tests/summary.txt"; fail "the two suites did not both pass"; }
python3 - "$OUT/conformance-test.json" <<'EOF' || fail "conformance-test.json"
import json, sys
d = json.load(open(sys.argv[1]))
bad = [c["name"] for c in d["cases"] if c["status"] not in ("PASS", "SUPPORTED")]
# on a CPU device gpu-check runs the decode and model-session ops only, every case of each
ops = sorted(set(c["op"] for c in d["cases"]))
if bad: sys.exit("cases not passed: %s" % bad)
if ops != ["lm.session", "mla.decode"]: sys.exit("ops run: %s, not lm.session and mla.decode" % ops)
if len(d["cases"]) < 4: sys.exit("only %d cases" % len(d["cases"]))
EOF
! grep -rqF "$ROOT" "$OUT" || fail "the run's output names the source tree $ROOT: $(grep -rlF "$ROOT" "$OUT" | head -3)"

# which file each library came from, in every process of the run: "calling init: PATH"
for lib in libvulkan.so.1 libcjson.so.1 libcmocka.so.0 libVkLayer_khronos_validation.so; do
    paths=$(cat "$tmp"/ld/trace.* | sed -n "s/^[[:space:]]*[0-9]*:[[:space:]]*calling init: //p" | grep -F "/$lib" | sort -u || true)
    [ -n "$paths" ] || fail "no process of the run loaded $lib"
    outside=$(printf '%s\n' "$paths" | grep -vF "$DIR/prefix/" || true)
    [ -z "$outside" ] || fail "$lib loaded from outside the prepared folder: $outside"
    echo "$lib: $paths"
done

echo "-- bad input: one line, exit 1"
expect_refusal() {   # expect_refusal WHAT PATTERN CMD...: exit 1, one line on stderr matching PATTERN
    local what=$1 pat=$2 rc=0; shift 2
    clean "$@" > "$tmp/bad.out" 2> "$tmp/bad.err" || rc=$?
    [ "$rc" = 1 ] || { cat "$tmp/bad.out" "$tmp/bad.err"; fail "$what: exit $rc, not 1"; }
    [ "$(wc -l < "$tmp/bad.err")" = 1 ] || { cat "$tmp/bad.err"; fail "$what: not one line on stderr"; }
    grep -q -- "$pat" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "$what: the message does not say '$pat'"; }
    echo "$what: $(cat "$tmp/bad.err")"
}
G=$DIR/gpu-check.sh
expect_refusal "missing folder" "$tmp/nowhere does not exist" bash "$G" --prebuilt "$tmp/nowhere" "$tmp/o"
mkdir -p "$tmp/plain"
expect_refusal "not prepared" "is not a prepared folder" bash "$G" --prebuilt "$tmp/plain" "$tmp/o"
mkdir -p "$tmp/arch" "$tmp/glibc"
sed 's/^arch .*/arch riscv128/' "$DIR/vkh2o-prepared.txt" > "$tmp/arch/vkh2o-prepared.txt"
expect_refusal "another architecture" "prepared for riscv128, this machine is $(uname -m)" bash "$G" --prebuilt "$tmp/arch" "$tmp/o"
sed 's/^glibc .*/glibc 99.1/' "$DIR/vkh2o-prepared.txt" > "$tmp/glibc/vkh2o-prepared.txt"
expect_refusal "a newer glibc" "built against glibc 99.1" bash "$G" --prebuilt "$tmp/glibc" "$tmp/o"
expect_refusal "VK_DRIVER_FILES naming nothing" "VK_DRIVER_FILES=$tmp/none.json names no file" \
    VK_DRIVER_FILES="$tmp/none.json" bash "$G" --prebuilt "$DIR" "$tmp/o"
printf '{"file_format_version": "1.0.0", "ICD": {"library_path": "%s/libnone.so", "api_version": "1.2.0"}}\n' "$tmp" > "$tmp/noicd.json"
expect_refusal "no device behind the driver file" "no usable Vulkan device with the driver files $tmp/noicd.json" \
    VK_DRIVER_FILES="$tmp/noicd.json" bash "$G" --prebuilt "$DIR" "$tmp/o"
[ ! -e "$tmp/shim-calls" ] || { cat "$tmp/shim-calls"; fail "a refused run ran a build or package tool"; }
echo keep > "$tmp/plain/mine.txt"
rc=0; BUILD_DIR=$BUILD bash scripts/gpu-check.sh --prepare "$tmp/plain" > /dev/null 2> "$tmp/bad.err" || rc=$?
[ "$rc" = 1 ] && grep -q "is not empty" "$tmp/bad.err" || { cat "$tmp/bad.err"; fail "--prepare into a non-empty folder: exit $rc"; }
[ "$(ls -A "$tmp/plain")" = mine.txt ] && [ "$(cat "$tmp/plain/mine.txt")" = keep ] || fail "--prepare changed a non-empty folder"
echo "--prepare into a non-empty folder: $(cat "$tmp/bad.err")"
echo "gpucheck_prebuilt: ok ($(( $(date +%s) - t0 )) s)"
