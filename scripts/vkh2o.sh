#!/usr/bin/env bash
# One entry point for a fresh Debian 12 machine:
#   scripts/vkh2o.sh demo [demo flags]   install packages, build, run vkh2o-demo
#   scripts/vkh2o.sh test                install packages, build, run the test suite: every
#                                        suite, the long grids and sweeps in part (minutes)
#   scripts/vkh2o.sh test-full           the same with every grid and sweep whole
#                                        (VKH2O_TEST_FULL=1; CI runs this)
#   scripts/vkh2o.sh test-sanitize       the same under AddressSanitizer + UBSan (build-asan/)
#   scripts/vkh2o.sh test-gpu-shapes     the suite again with the kernel shapes a GPU gets
#                                        (VKH2O_GPU_SHAPES=1: GPU variants run on lavapipe)
#   scripts/vkh2o.sh test-sync           the multi-step suites and tool runs with the layer's
#                                        synchronisation validation on (VK_LAYER_ENABLES)
#   scripts/vkh2o.sh test-vendor         the decode path and a model session under the layer's
#                                        best practices with its NVIDIA and AMD checks
#   scripts/vkh2o.sh test-baseline       the GPU suites without push descriptors or optional
#                                        features (VKH2O_TEST_BASELINE=1), in the GPU shapes
#   scripts/vkh2o.sh memcheck            the CPU-only suites under valgrind memcheck
#   scripts/vkh2o.sh fuzz [seconds]      libFuzzer targets (clang, build-fuzz/), each for
#                                        [seconds] (default 60) on tests/fuzz/corpus
#   scripts/vkh2o.sh fuzz-corpus         regenerate the seed corpus in tests/fuzz/corpus
#   scripts/vkh2o.sh soak [N] [D] [P] [S]  vkh2o-validate N steps (10000), vkh2o-quant decode D
#                                        (256) x P passes (3), a model session S steps (10000):
#                                        memory flat, no validation message, replay identical
#   scripts/vkh2o.sh test-tsan [S]       4 threads, each its own context and model session, S
#                                        decode steps (300) at once under ThreadSanitizer (build-tsan/)
#   scripts/vkh2o.sh faults              about 48 injection points of one small run of each tool
#                                        (tests/tools/fault_sweep.sh) and of a model session
#                                        (test_model_faults); FAULT_STRIDE=1 VKH2O_FAULT_SWEEP=1: all
#   scripts/vkh2o.sh deps | build        just the packages / just the build
#   scripts/vkh2o.sh python              the build, then `import vkh2o` for /usr/bin/python3: the
#                                        package in python/ linked into site-packages (docs/PYTHON.md)
# On a machine with a GPU: bash scripts/gpu-check.sh OUTDIR builds, then runs vkh2o-conformance
# (every kernel against its CPU reference, then timed against the device's roofline) and the
# decode benchmark, leaving OUTDIR/summary.md and the JSON (under 8 minutes on a discrete GPU).
# For an offline GPU node: gpu-check.sh --prepare DIR here, then DIR/gpu-check.sh --prebuilt DIR
# OUTDIR there (the tools, suites and runtime packages in DIR; no build, no apt-get).
# Environment: BUILD_DIR (default build), JOBS (default: nproc), VKH2O_SKIP_APT=1 to skip apt,
# VKH2O_TEST_FULL=1 the whole grids and sweeps in every test command (CI sets it).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(cmake ninja-build gcc pkg-config python3 libvulkan-dev glslang-tools libcmocka-dev
          mesa-vulkan-drivers vulkan-validationlayers libcjson-dev
          python3-cffi python3-numpy python3-pytest python3-matplotlib)   # the Python package (python/)
EXTRA_PACKAGES=()   # per command: clang for fuzz, valgrind for memcheck
JOBS=${JOBS:-$(nproc)}
FUZZ_TARGETS=(safetensors index config fp8 model)

deps() {
    [ "${VKH2O_SKIP_APT:-0}" = 1 ] && return 0
    local missing=()
    for p in "${PACKAGES[@]}" "${EXTRA_PACKAGES[@]}"; do
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

run_tests() {   # run_tests <dir> [ctest arguments]
    # The harness turns a missing device into a failure (no silent skips) and runs every GPU
    # test with the Khronos validation layer on; any validation warning or error fails.
    # Compiling pipelines (LLVM, on lavapipe) is most of a first run's time: Mesa's shader disk
    # cache lets the suites share what one of them compiled. It lives under ~/.cache, which a
    # fresh machine may not have writable; then the build directory holds it.
    local cache=()
    if [ -z "${MESA_SHADER_CACHE_DIR:-}" ] && ! { mkdir -p "${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}" 2>/dev/null &&
                                                  [ -w "${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}" ]; }; then
        cache=(MESA_SHADER_CACHE_DIR="$(cd "$1" && pwd)/mesa-shader-cache")
    fi
    local dir=$1; shift
    (cd "$dir" && env "${cache[@]}" VKH2O_REQUIRE_DEVICE=1 ctest --output-on-failure -j "$JOBS" --timeout 1200 "$@")
}

build_fuzz() {
    EXTRA_PACKAGES=(clang); deps
    build "${BUILD_DIR:-build-fuzz}" -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVKH2O_FUZZ=ON \
          -DVKH2O_BUILD_TESTS=OFF -DVKH2O_BUILD_TOOLS=OFF
}

# fuzz <seconds>: every target for that long on a scratch copy of its committed corpus, $JOBS
# targets at a time (each libFuzzer run is one process on one core; new inputs go to the scratch
# directory; FUZZ_KEEP=<dir> keeps them in <dir>/<target> for merging). A crash, leak, hang
# (-timeout) or broken contract fails the run with the input saved as fuzz-artifacts/<target>/.
fuzz_one() {
    local t=$1 secs=$2 dir=$3 work art log
    work=$(mktemp -d); art="$PWD/fuzz-artifacts/$t"; log="$work.log"
    export VKH2O_FUZZ_DIR; VKH2O_FUZZ_DIR=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
    mkdir -p "$art"
    set +e
    "$dir/fuzz_$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -dict=tests/fuzz/json.dict -artifact_prefix="$art/" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
    local r=$?
    set -e
    local execs cov ft corp
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
    ft=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "$log" | tail -1 | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
    corp=$(find "$work" "tests/fuzz/corpus/$t" -type f | wc -l)
    printf 'fuzz_%-12s %6ss  %9s execs  cov %5s  ft %6s  corpus %5s  %s\n' "$t" "$secs" "${execs:-?}" \
        "${cov:-?}" "${ft:-?}" "$corp" "$([ $r -eq 0 ] && echo ok || echo FAILED)"
    [ $r -eq 0 ] || grep -E 'ERROR|SUMMARY|contract|Test unit written|artifact' "$log" | head -20 >&2
    if [ -n "${FUZZ_KEEP:-}" ]; then mkdir -p "$FUZZ_KEEP/$t"; cp -n "$work"/* "$FUZZ_KEEP/$t/" 2>/dev/null || true; fi
    rm -rf "$work" "$log" "$VKH2O_FUZZ_DIR"
    rmdir "$art" 2>/dev/null || true
    return $r
}
fuzz() {
    local secs=${1:-60} dir=${BUILD_DIR:-build-fuzz} rc=0 pids=() t
    export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
    for t in "${FUZZ_TARGETS[@]}"; do
        fuzz_one "$t" "$secs" "$dir" &
        pids+=($!)
        if [ ${#pids[@]} -ge "${JOBS:-2}" ]; then
            wait "${pids[0]}" || rc=1
            pids=("${pids[@]:1}")
        fi
    done
    for t in "${pids[@]}"; do wait "$t" || rc=1; done
    return $rc
}

# install_python <build dir>: the package in python/ where /usr/bin/python3 finds it (a vkh2o.pth in
# its site-packages, or the user's when not root), bound to this build's shared library (recorded
# in python/vkh2o/_libpath.txt; VKH2O_LIBRARY and VKH2O_INCLUDE_DIR override the library and the
# headers at run time). Offline: nothing is fetched.
install_python() {
    local dir lib site
    dir=$(cd "$1" && pwd)
    for lib in "$dir/libvkh2o.so" "$dir/embed/libvkh2o.so" ""; do [ -z "$lib" ] || [ -f "$lib" ] && break; done
    [ -n "$lib" ] || { echo "vkh2o: no libvkh2o.so in $dir (configure with -DBUILD_SHARED_LIBS=ON or with the tests on)" >&2; return 1; }
    echo "$lib" > python/vkh2o/_libpath.txt
    if [ "$(id -u)" -eq 0 ]; then
        site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
    else
        site=$(/usr/bin/python3 -m site --user-site)
    fi
    mkdir -p "$site"
    echo "$PWD/python" > "$site/vkh2o.pth"
    (cd / && /usr/bin/python3 -c 'import vkh2o; print("vkh2o: import vkh2o works (%s, headers %s)" % (vkh2o.LIBRARY_PATH, vkh2o._ffi.include_dir()))')
    echo "vkh2o: $site/vkh2o.pth -> $PWD/python; the tests: /usr/bin/python3 -m pytest python/tests"
}

cmd=${1:-help}
[ $# -gt 0 ] && shift
case "$cmd" in
    deps) deps ;;
    build) deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release ;;
    python) deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release; install_python "${BUILD_DIR:-build}" ;;
    demo)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        "${BUILD_DIR:-build}/vkh2o-demo" "$@" ;;
    test)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # On lavapipe most of a first run is LLVM compiling the kernels: the default run has it
        # skip its optimisation passes (GALLIVM_PERF=nopt: the same kernels and results, slower
        # code, 20-23 % less time in the compile-bound suites); test-full and CI's other steps
        # test the optimised code. A GPU driver ignores the variable.
        GALLIVM_PERF=${GALLIVM_PERF-nopt} run_tests "${BUILD_DIR:-build}" ;;
    test-full)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # FULL_ONLY=1 (CI, after `test`): less the suites that have no full run, which would
        # repeat `test` exactly (the tool suites that do not read VKH2O_TEST_FULL, the README
        # example, the docs check, the symbol and embedding checks)
        if [ "${FULL_ONLY:-0}" = 1 ]; then
            VKH2O_TEST_FULL=1 run_tests "${BUILD_DIR:-build}" -E '^(e2e_public_api|e2e_mkshard|e2e_conformance|e2e_conformance_coverage|e2e_eval_text|readme_example|docs_check|symbols|embed_app_static|embed_app_shared)$'
        else
            VKH2O_TEST_FULL=1 run_tests "${BUILD_DIR:-build}"
        fi ;;
    test-gpu-shapes)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # (less the suites whose work does not depend on the kernel shapes or that run the
        # library's kernels again through a tool: flags, docs, the README example, the quality
        # sweeps and the Python package)
        VKH2O_GPU_SHAPES=1 run_tests "${BUILD_DIR:-build}" -E '^(e2e_bad_flags|docs_check|readme_example|e2e_quant|e2e_eval|python)$' ;;
    test-sanitize)
        deps; build "${BUILD_DIR:-build-asan}" -DCMAKE_BUILD_TYPE=Debug -DVKH2O_SANITIZE=ON -DVKH2O_BUILD_TOOLS=ON
        # Leak checks on. The Vulkan loader unloads the driver (lavapipe) when an instance is
        # destroyed; an allocation the driver keeps for the process would then be reported from
        # an "<unknown module>" that tests/lsan.supp cannot name. Preloading the driver keeps it
        # mapped, so the suppressions match (it exports only vk_icd* entry points; the validation
        # layer is not preloaded: its exported vk* functions would interpose on the loader's and
        # it crashes). The preload goes to the test programs through ctest, not to the e2e
        # scripts, where every bash and python process would load LLVM with it: e2e_faults puts
        # it ($VKH2O_LSAN_PRELOAD) on the tools it runs. VKH2O_DETECT_LEAKS=0 turns leak checks off.
        local_preload=$(ldconfig -p 2>/dev/null | awk '/libvulkan_lvp\.so / && !f { print $NF; f = 1 }')
        export VKH2O_LSAN_PRELOAD=$local_preload
        export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
        export ASAN_OPTIONS="detect_leaks=${VKH2O_DETECT_LEAKS:-1}:abort_on_error=1:allocator_may_return_null=1:verify_asan_link_order=0"
        export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
        # The default run's grids (the whole ones ran in the plain build), and the two
        # allocation-failure sweeps at about 24 and 8 points (test_faults, test_model_faults):
        # each point compiles every kernel again, through the sanitizer's allocator (the plain
        # build's faults step sweeps about 48 of each).
        local_asan() { (cd "${BUILD_DIR:-build-asan}" && LD_PRELOAD=$local_preload VKH2O_REQUIRE_DEVICE=1 VKH2O_TEST_FULL=0 \
            ctest --output-on-failure -j "$JOBS" --timeout 1800 "$@"); }
        # test_kvcache and test_model build dozens of caches and sessions, each compiling its
        # kernels, which under the sanitizer's allocator takes 10-15 minutes apiece; their host
        # paths run here through the cache's other suites, test_decode, test_session_finite and
        # the model session sweep.
        VKH2O_FAULT_RUNS=24 local_asan -E '^(e2e_.*|conf\..*|test_model_faults|test_kvcache|test_model)$'
        VKH2O_FAULT_RUNS=8 local_asan -R '^test_model_faults$'
        # The tools under ASan: their fault sweep (leak checks on every error path), the small
        # suites and the conformance cases of the step; the long tool suites (quality sweeps,
        # flags, bench, the Kimi layout, the prefill and forward grids) ran in the plain build
        # and drive library paths the suites above ran under ASan.
        # Every process of those scripts gets tests/common/nodlclose.c preloaded (a dlclose that
        # does nothing: the driver stays mapped after the tools destroy their instances, so an
        # allocation it keeps is named and suppressed, not reported from an "<unknown module>";
        # seen on AMD EPYC machines, where lavapipe keeps 128 bytes per load).
        local_shim=$(cd "${BUILD_DIR:-build-asan}" && pwd)/nodlclose.so
        cc -O2 -shared -fPIC -o "$local_shim" tests/common/nodlclose.c
        (cd "${BUILD_DIR:-build-asan}" && LD_PRELOAD=$local_shim VKH2O_REQUIRE_DEVICE=1 VKH2O_TEST_FULL=0 ctest --output-on-failure -j "$JOBS" --timeout 1200 \
            -R '^(e2e_|conf\.)' -E '^(e2e_quant|e2e_eval|e2e_bad_flags|e2e_bench|e2e_kimi_layout|conf\.kvcache\.prefill|conf\.mla\.forward)$') ;;
    test-sync)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # test_syncval first proves the variable switches the checks on (a known hazard is
        # reported); then the layer, its decode, the KV cache (steps, prefills and their
        # selection, a recording replayed, batched steps; the registry's layer forward and cache
        # steps, conf.mla.forward and conf.kvcache.step), the demo, and short validate / quant
        # runs, with no message allowed
        export VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
        (cd "${BUILD_DIR:-build}" && VKH2O_REQUIRE_DEVICE=1 ctest --output-on-failure -j "$JOBS" --timeout 1200 \
            -R '^(test_syncval|test_mla|test_decode|test_demo|test_kvcache|conf\.kvcache\.prefill|test_kvcache_steps|conf\.mla\.forward|conf\.kvcache\.step)$')
        bash tests/tools/soak.sh "${BUILD_DIR:-build}" 2000 48 3 400 ;;
    test-vendor)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # Best practices plus the NVIDIA- and AMD-specific checks (VK_LAYER_ENABLES, ':'-separated
        # for this layer version); the message IDs in tests/core/bestpractices.filter are dropped
        # by the layer (each justified in docs/ROBUSTNESS.md), every other warning fails. test_vendorchecks
        # first proves the checks are on and that the filter drops those IDs only. The suites: the
        # decode path on the one cache (test_decode, test_kvcache), a model session (test_model),
        # the buffers' memory blocks (test_memory).
        export VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_BEST_PRACTICES_EXT:VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_NVIDIA:VALIDATION_CHECK_ENABLE_VENDOR_SPECIFIC_AMD
        VK_LAYER_MESSAGE_ID_FILTER=$(grep -v '^#' tests/core/bestpractices.filter | grep . | paste -sd:)
        export VK_LAYER_MESSAGE_ID_FILTER
        (cd "${BUILD_DIR:-build}" && VKH2O_REQUIRE_DEVICE=1 ctest --output-on-failure -j "$JOBS" --timeout 1200 \
            -R '^(test_vendorchecks|test_decode|test_kvcache|conf\.kvcache\.prefill|test_model|test_memory|conf\.kvcache\.step|conf\.lm\.forward)$') ;;
    test-baseline)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # Push descriptors, 16-bit and 8-bit storage and float16 off (VKH2O_CONTEXT_BASELINE_ONLY):
        # descriptor sets from the arena of pools, the 32-bit kernel variants; with the GPU shapes,
        # the combination a GPU without push descriptors gets. The suites that dispatch kernels,
        # less the two longest grids (test_matmul, test_mla: their kernels are the ones test_decode
        # and test_model run).
        (cd "${BUILD_DIR:-build}" && VKH2O_TEST_BASELINE=1 VKH2O_GPU_SHAPES=1 VKH2O_REQUIRE_DEVICE=1 \
            ctest --output-on-failure -j "$JOBS" --timeout 1200 \
            -R '^(test_recording|test_kvcache|conf\.kvcache\.prefill|test_kvcache_steps|test_lm_kernels|test_model|test_attention|test_decode|test_obs_window|test_rmsnorm|test_rope|test_demo|test_memory|conf\.kvcache\.step|conf\.lm\.forward)$') ;;
    memcheck)
        EXTRA_PACKAGES=(valgrind); deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # CPU-only suites: no Vulkan driver in the process, so every report is ours
        for t in test_config test_safetensors test_json_strict test_dtype test_weights test_synthetic; do
            (cd "${BUILD_DIR:-build}" && valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
                --errors-for-leak-kinds=definite,indirect --track-origins=yes -q "./$t" > /dev/null) ||
                { echo "memcheck: $t failed" >&2; exit 1; }
            echo "memcheck $t: clean"
        done ;;
    fuzz) build_fuzz; fuzz "${1:-60}" ;;
    soak)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        bash tests/tools/soak.sh "${BUILD_DIR:-build}" "${1:-10000}" "${2:-256}" "${3:-3}" "${4:-10000}" ;;
    test-tsan)
        deps; build "${BUILD_DIR:-build-tsan}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVKH2O_TSAN=ON -DVKH2O_BUILD_TOOLS=OFF
        bash tests/soak/tsan.sh "${BUILD_DIR:-build-tsan}" "${1:-300}" ;;
    faults)
        deps; build "${BUILD_DIR:-build}" -DCMAKE_BUILD_TYPE=Release
        # About 48 points of each tool's run and of the model session, at a stride whose phase
        # changes from run to run (printed; FAULT_PHASE=P repeats it): every point of them all
        # is ~1,400 tool runs and ~600 sessions, most of an hour here, each point compiling its
        # kernels again. Every point: FAULT_STRIDE=1 VKH2O_FAULT_SWEEP=1 bash scripts/vkh2o.sh faults.
        phase=${FAULT_PHASE:-$RANDOM}
        echo "faults: FAULT_PHASE=$phase"
        FAULT_JOBS=$JOBS FAULT_RUNS=${FAULT_RUNS:-48} FAULT_PHASE=$phase bash tests/tools/fault_sweep.sh "${BUILD_DIR:-build}"
        (cd "${BUILD_DIR:-build}" && VKH2O_FAULT_SWEEP=${VKH2O_FAULT_SWEEP:-0} VKH2O_FAULT_RUNS=${VKH2O_FAULT_RUNS:-48} \
            VKH2O_REQUIRE_DEVICE=1 ctest --output-on-failure --timeout 1800 -R '^test_model_faults$') ;;
    fuzz-corpus) build_fuzz; "${BUILD_DIR:-build-fuzz}/vkh2o-fuzz-corpus" tests/fuzz/corpus ;;
    *) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; [ "$cmd" = help ] || exit 2 ;;
esac
