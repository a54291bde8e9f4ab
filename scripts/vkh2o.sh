#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine:
#   scripts/vkh2o.sh demo [demo flags]   install packages, build, run vkh2o-demo
#   scripts/vkh2o.sh test                install packages, build, run the whole test suite
#   scripts/vkh2o.sh test-sanitize       the same under AddressSanitizer + UBSan (build-asan/)
#   scripts/vkh2o.sh test-gpu-shapes     the suite again with the kernel shapes a GPU gets
#                                        (VKH2O_GPU_SHAPES=1: GPU variants run on lavapipe)
#   scripts/vkh2o.sh deps | build        just the packages / just the build
# Environment: BUILD_DIR (default build), JOBS (default: nproc), VKH2O_SKIP_APT=1 to skip apt.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake ninja-build gcc pkg-config libvulkan-dev glslang-tools libcmocka-dev
          mesa-vulkan-drivers vulkan-validationlayers libcjson-dev)
JOBS=${JOBS:-$(nproc)}

deps() {
    [ "${VKH2O_SKIP_APT:-0}" = 1 ] && return 0
    local missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "vkh2o: installing ${missing[*]}" >&2
    local sudo=()
    [ "$(id -u)" -ne 0 ] && sudo=(sudo)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

build() {   # build <dir> [cmake args...]
    local dir=$1; shift
    cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

run_tests() {   # run_tests <dir>
    # The harness turns a missing device into a failure (no silent skips) and runs every GPU
    # test with the Khronos validation layer on; any validation warning or error fails.
    (cd "$1" && VKH2O_REQUIRE_DEVICE=1 ctest --output-on-failure -j "$JOBS" --timeout 1200)
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
    deps) deps ;;
    build) deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release ;;
    demo)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        "${BUILD_DIR:-build}/vkh2o-demo" "$@" ;;
    test)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        run_tests "${BUILD_DIR:-build}" ;;
    test-gpu-shapes)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        VKH2O_GPU_SHAPES=1 run_tests "${BUILD_DIR:-build}" ;;
    test-sanitize)
        deps; build "${BUILD_DIR:-build-asan}" -DCMAKE_BUILD_TYPE=Debug -DVKH2O_SANITIZE=ON -DVKH2O_BUILD_TOOLS=ON
        # leaks inside the Vulkan driver/loader/layer are not ours: suppress them by library
        export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
        export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1"
        export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
        run_tests "${BUILD_DIR:-build-asan}" ;;
    *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; [ "$cmd" = help ] || exit 2 ;;
esac
