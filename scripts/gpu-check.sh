#!/usr/bin/env bash
# The one-command GPU check, what to run when a GPU machine is lent: builds in Release, prints
# the device, runs vkh2o-conformance --mode test (every kernel's cases against the CPU
# references, both shape sets, validation layer on) and --mode perf (each case timed with GPU
# timestamps against this device's roofline, measured in the same run), then the decode
# benchmarks; leaves their JSON, the logs and one summary table (summary.md) in OUTDIR. A
# discrete GPU should finish in under 8 minutes (the script prints the total time). It refuses
# to run on a CPU device (lavapipe) unless --allow-cpu is given, which CI uses so that the script
# cannot rot.
#
#   bash scripts/gpu-check.sh OUTDIR [--allow-cpu] [--device N] [--tests REGEX]
#   bash scripts/gpu-check.sh --prepare DIR
#   bash DIR/gpu-check.sh --prebuilt DIR OUTDIR [--allow-cpu] [--device N] [--tests REGEX]
#
# For a GPU node with no network and no package manager (a compiler, CMake and an NVIDIA
# driver with its Vulkan ICD file, nothing else): --prepare DIR, on a connected Debian/Ubuntu
# machine of the same architecture, builds, then puts the tools, the test suites, this script
# and the summary scripts into the new folder DIR with the runtime packages (apt-get download
# of libvulkan1, libcjson1, libcmocka0, vulkan-validationlayers) unpacked into DIR/prefix.
# Copy DIR anywhere on the node; --prebuilt DIR OUTDIR runs the same check from DIR alone (no
# build, no apt-get): the loader, cJSON, cmocka and the validation layer come from DIR/prefix
# (LD_LIBRARY_PATH, VK_LAYER_PATH); the driver from VK_DRIVER_FILES / VK_ICD_FILENAMES when set,
# else from the loader's standard folders (/etc/vulkan/icd.d, /usr/share/vulkan/icd.d, ...) and
# /usr/local/nvidia/share/vulkan/icd.d (added as VK_ADD_DRIVER_FILES); it names the device it
# found. --tests REGEX also runs the cmocka suites whose names match (`.` for all) with
# VKH2O_REQUIRE_DEVICE=1, each one's output in OUTDIR/tests/ (in either mode).
#
# Environment: BUILD_DIR (default build-gpu-check), JOBS (default nproc), VKH2O_SKIP_APT=1.
set -euo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
CALLER=$PWD

usage() { sed -n '2,28p' "$SELF" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-check: $*" >&2; exit 1; }
bad() { echo "gpu-check: $*" >&2; exit 2; }
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$CALLER/$1" ;; esac; }

MODE=check
DRIVERS=""
ARGS=()
ALLOW_CPU=0
DEVICE=""
TESTS=""
while [ $# -gt 0 ]; do
    case "$1" in
        --allow-cpu) ALLOW_CPU=1 ;;
        --device) [ $# -ge 2 ] || bad "--device needs a value"; DEVICE=$2; shift ;;
        --tests) [ $# -ge 2 ] || bad "--tests needs a regular expression (. for every suite)"; TESTS=$2; shift ;;
        --prepare) [ "$MODE" = check ] || bad "one of --prepare / --prebuilt only"; MODE=prepare ;;
        --prebuilt) [ "$MODE" = check ] || bad "one of --prepare / --prebuilt only"; MODE=prebuilt ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "gpu-check: unknown option '$1'" >&2; usage >&2; exit 2 ;;
        *) ARGS+=("$1") ;;
    esac
    shift
done
case "$MODE" in
    check)    [ ${#ARGS[@]} -eq 1 ] || { usage >&2; exit 2; }; OUT=$(abspath "${ARGS[0]}") ;;
    prepare)  [ ${#ARGS[@]} -eq 1 ] || bad "--prepare takes one folder: --prepare DIR"
              [ "$ALLOW_CPU$DEVICE$TESTS" = 0 ] || bad "--allow-cpu, --device and --tests go with the run (--prebuilt), not --prepare"
              PREP=$(abspath "${ARGS[0]}") ;;
    prebuilt) [ ${#ARGS[@]} -eq 2 ] || bad "--prebuilt takes the prepared folder and the output folder: --prebuilt DIR OUTDIR"
              PREP=$(abspath "${ARGS[0]}"); OUT=$(abspath "${ARGS[1]}") ;;
esac
if [ -n "$TESTS" ]; then
    rc=0; printf '' | grep -Eq -- "$TESTS" 2>/dev/null || rc=$?
    [ "$rc" -le 1 ] || bad "--tests '$TESTS' is not a valid extended regular expression"
fi
[ -n "$DEVICE" ] && export VKH2O_DEVICE=$DEVICE
t0=$(date +%s)
step() { echo "== gpu-check [$(( $(date +%s) - t0 )) s]: $*"; }

# The prepared folder's record, one `key value` a line; --prebuilt checks the node against it.
MANIFEST=vkh2o-prepared.txt
# The runtime packages: the loader the library opens, the tools' JSON library, the suites'
# test library and the layer that VKH2O_VALIDATION / the suites switch on.
PREP_PACKAGES=(libvulkan1 libcjson1 libcmocka0 vulkan-validationlayers)
PREP_LIBS=(libvulkan.so.1 libcjson.so.1 libcmocka.so.0 libVkLayer_khronos_validation.so)
glibc_version() { getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}'; }

source_root() {   # cd to the source tree this script is in (not a prepared folder's copy)
    cd "$(dirname "$SELF")/.."
    [ -f CMakeLists.txt ] && [ -f scripts/vkh2o.sh ] ||
        die "$SELF is not in a vkh2o source tree: building (and --prepare) needs the source; a prepared folder runs with --prebuilt DIR OUTDIR"
}
build_release() {   # build_release: the Release build in BUILD (repository root as cwd)
    step "build (Release) into $BUILD"
    BUILD_DIR=$BUILD bash scripts/vkh2o.sh build > "$1" 2>&1 || { tail -40 "$1"; die "FAILED: build (log: $1)"; }
}

# ---- --prepare DIR: build, then a self-contained folder for an offline node ----
prepare() {
    local dir=$PREP
    PREP_EXISTED=0
    if [ -e "$dir" ]; then
        PREP_EXISTED=1
        [ -d "$dir" ] || die "$dir exists and is not a folder: --prepare makes a new folder"
        [ -z "$(ls -A "$dir")" ] || die "$dir exists and is not empty: --prepare writes a new folder (nothing is overwritten)"
    fi
    command -v apt-get > /dev/null && command -v dpkg-deb > /dev/null ||
        die "--prepare needs apt-get and dpkg-deb (a Debian or Ubuntu machine with the network)"
    source_root
    BUILD=${BUILD_DIR:-build-gpu-check}
    export JOBS=${JOBS:-$(nproc)}
    local log; log=$(mktemp)
    build_release "$log"
    rm -f "$log"
    [ -x "$BUILD/vkh2o-conformance" ] && [ -x "$BUILD/test_decode" ] ||
        die "$BUILD has no vkh2o-conformance or test suites (built with VKH2O_BUILD_TOOLS / VKH2O_BUILD_TESTS off?)"
    # from here on a failure removes what was written: DIR was new or empty
    mkdir -p "$dir" || die "cannot create $dir"
    trap 'if [ "$PREP_EXISTED" = 1 ]; then find "$PREP" -mindepth 1 -delete; else rm -rf "$PREP"; fi' EXIT

    step "copy the tools, the suites and their data into $dir"
    mkdir -p "$dir/bin" "$dir/tests" "$dir/scripts" "$dir/data/models" "$dir/data/tests/core" "$dir/debs" "$dir/prefix"
    local f n_tools=0 n_tests=0
    for f in "$BUILD"/vkh2o-*; do
        [ -f "$f" ] && [ -x "$f" ] || continue
        cp "$f" "$dir/bin/"; n_tools=$((n_tools + 1))
    done
    for f in "$BUILD"/test_*; do
        [ -f "$f" ] && [ -x "$f" ] || continue
        cp "$f" "$dir/tests/"; n_tests=$((n_tests + 1))
    done
    # what the suites read from the source tree (VKH2O_SOURCE_DIR): the quality model and the
    # best-practices filter
    cp -r models/tiny-mla "$dir/data/models/"
    cp tests/core/bestpractices.filter "$dir/data/tests/core/"
    cp "$SELF" "$dir/gpu-check.sh"
    cp scripts/conformance-table.py scripts/perf-tables.py "$dir/scripts/"

    step "apt-get download ${PREP_PACKAGES[*]} into $dir/debs"
    (cd "$dir/debs" && apt-get download "${PREP_PACKAGES[@]}") > "$dir/debs/download.log" 2>&1 ||
        { tail -5 "$dir/debs/download.log" >&2; die "FAILED: apt-get download ${PREP_PACKAGES[*]} (needs the network; log: $dir/debs/download.log)"; }
    rm -f "$dir/debs/download.log"
    local deb pkgs=()
    for deb in "$dir"/debs/*.deb; do
        dpkg-deb -x "$deb" "$dir/prefix" || die "FAILED: dpkg-deb -x $deb"
        pkgs+=("$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version) $(dpkg-deb -f "$deb" Architecture)")
    done
    rm -rf "$dir/prefix/usr/share/doc"
    local libvk libdir
    libvk=$(cd "$dir/prefix" && find . -name libvulkan.so.1 | head -1)
    [ -n "$libvk" ] || die "FAILED: libvulkan1's package has no libvulkan.so.1"
    libdir=$(dirname "${libvk#./}")
    for f in "${PREP_LIBS[@]}"; do
        [ -e "$dir/prefix/$libdir/$f" ] || die "FAILED: $f is not in $dir/prefix/$libdir after unpacking"
    done
    # the layer's manifest names its library by file name, which the dynamic linker would look
    # up; a path relative to the manifest (the loader resolves it from the manifest's folder)
    # keeps the layer inside DIR wherever DIR is copied
    local json rel
    json=$(cd "$dir/prefix" && find . -name VkLayer_khronos_validation.json | head -1)
    [ -n "$json" ] || die "FAILED: vulkan-validationlayers' package has no VkLayer_khronos_validation.json"
    json=${json#./}
    rel=$(realpath --relative-to="$dir/prefix/$(dirname "$json")" "$dir/prefix/$libdir/libVkLayer_khronos_validation.so")
    sed -i "s|\"library_path\": *\"[^\"]*\"|\"library_path\": \"$rel\"|" "$dir/prefix/$json"
    grep -q "\"library_path\": \"$rel\"" "$dir/prefix/$json" || die "FAILED: could not rewrite library_path in $dir/prefix/$json"

    {
        echo "format 1"
        echo "arch $(uname -m)"
        echo "glibc $(glibc_version)"
        echo "libdir $libdir"
        echo "layer_dir $(dirname "$json")"
        echo "vkh2o $(git describe --always --dirty 2>/dev/null || echo unknown)"
        echo "prepared $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}" | tr ' ' _)"
        for f in "${pkgs[@]}"; do echo "package $f"; done
    } > "$dir/$MANIFEST"
    trap - EXIT
    step "prepared $dir ($(du -sh "$dir" | cut -f1): $n_tools tools, $n_tests suites, ${#pkgs[@]} packages)"
    echo "gpu-check: copy $dir to the node (any path), then run there:"
    echo "    bash DIR/gpu-check.sh --prebuilt DIR OUTDIR"
}

# ---- --prebuilt DIR: the environment that makes the check run from DIR alone ----
manifest_get() { sed -n "s/^$1 //p" "$PREP/$MANIFEST" | head -1; }
prebuilt_env() {
    [ -e "$PREP" ] || die "$PREP does not exist (make the folder with scripts/gpu-check.sh --prepare DIR on a connected machine)"
    [ -d "$PREP" ] || die "$PREP is not a folder"
    [ -f "$PREP/$MANIFEST" ] || die "$PREP is not a prepared folder (no $MANIFEST; make one with scripts/gpu-check.sh --prepare DIR)"
    local format arch glibc here libdir f
    format=$(manifest_get format); arch=$(manifest_get arch); glibc=$(manifest_get glibc); libdir=$(manifest_get libdir)
    [ "$format" = 1 ] || die "$PREP/$MANIFEST has format '${format}', this script reads format 1 (prepare it again with this script)"
    [ "$arch" = "$(uname -m)" ] ||
        die "$PREP was prepared for $arch, this machine is $(uname -m): prepare it on a machine of this architecture"
    here=$(glibc_version)
    if [ -n "$glibc" ] && [ -n "$here" ] && [ "$(printf '%s\n%s\n' "$glibc" "$here" | sort -V | head -1)" != "$glibc" ]; then
        die "$PREP was built against glibc $glibc, this machine has glibc $here: prepare it on a machine with glibc $here or older"
    fi
    for f in "${PREP_LIBS[@]}"; do
        [ -e "$PREP/prefix/$libdir/$f" ] || die "$PREP is incomplete: prefix/$libdir/$f is missing (prepare it again)"
    done
    for f in vkh2o-info vkh2o-conformance vkh2o-bench; do
        [ -x "$PREP/bin/$f" ] || die "$PREP is incomplete: bin/$f is missing (prepare it again)"
    done
    PREP_LIB=$PREP/prefix/$libdir
    export LD_LIBRARY_PATH=$PREP_LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    VK_LAYER_PATH=$PREP/prefix/$(manifest_get layer_dir)
    [ -f "$VK_LAYER_PATH/VkLayer_khronos_validation.json" ] ||
        die "$PREP is incomplete: no VkLayer_khronos_validation.json in $VK_LAYER_PATH (prepare it again)"
    export VK_LAYER_PATH
    echo "gpu-check: prepared folder $PREP ($(manifest_get vkh2o), $(manifest_get prepared))"
    echo "gpu-check: Vulkan loader, cJSON, cmocka from $PREP_LIB (LD_LIBRARY_PATH); validation layer from $VK_LAYER_PATH (VK_LAYER_PATH)"

    # the driver: what the user named, else what the loader finds in its standard folders and
    # the folder where driver containers mount NVIDIA's
    local var="" list="" found=() d
    if [ -n "${VK_DRIVER_FILES:-}" ]; then var=VK_DRIVER_FILES; list=$VK_DRIVER_FILES
    elif [ -n "${VK_ICD_FILENAMES:-}" ]; then var=VK_ICD_FILENAMES; list=$VK_ICD_FILENAMES; fi
    if [ -n "$var" ]; then
        local IFS=:
        for f in $list; do [ -e "$f" ] && found+=("$f"); done
        unset IFS
        [ ${#found[@]} -gt 0 ] || die "$var=$list names no file that exists: no Vulkan driver to load"
        DRIVERS="${found[*]} ($var)"
        echo "gpu-check: Vulkan driver files: $DRIVERS"
    else
        local dirs=() IFS=:
        for d in ${XDG_CONFIG_DIRS:-/etc/xdg} /etc ${XDG_DATA_HOME:-${HOME:-/nonexistent}/.local/share} ${XDG_DATA_DIRS:-/usr/local/share:/usr/share}; do
            dirs+=("$d/vulkan/icd.d")
        done
        unset IFS
        for d in "${dirs[@]}"; do
            for f in "$d"/*.json; do [ -f "$f" ] && found+=("$f"); done
        done
        [ ${#found[@]} -eq 0 ] || DRIVERS="${found[*]} (the loader's standard folders)"
        # NVIDIA's driver mounted by a container runtime: its ICD file is in no standard folder
        local extra=() base
        for f in /usr/local/nvidia/share/vulkan/icd.d/*.json; do
            [ -f "$f" ] || continue
            base=$(basename "$f")
            printf '%s\n' "${found[@]}" | grep -q "/$base\$" || extra+=("$f")
        done
        if [ ${#extra[@]} -gt 0 ]; then
            VK_ADD_DRIVER_FILES=$(IFS=:; echo "${extra[*]}")${VK_ADD_DRIVER_FILES:+:$VK_ADD_DRIVER_FILES}
            export VK_ADD_DRIVER_FILES
            DRIVERS="${DRIVERS:+$DRIVERS and }${extra[*]} (VK_ADD_DRIVER_FILES, set by gpu-check)"
        fi
        [ -n "$DRIVERS" ] ||
            die "no Vulkan driver (ICD) file in ${dirs[*]} or /usr/local/nvidia/share/vulkan/icd.d: set VK_DRIVER_FILES=/path/to/nvidia_icd.json"
        echo "gpu-check: Vulkan driver files: $DRIVERS"
    fi
}

# ---- the check itself: BIN (tools), TESTBIN (suites), DATA (what the suites read), PY (scripts) ----
run_check() {
    mkdir -p "$OUT" || die "cannot create $OUT"
    step "device"
    if ! "$BIN/vkh2o-info" > "$OUT/info.txt" 2>&1; then
        die "FAILED: no usable Vulkan device${DRIVERS:+ with the driver files $DRIVERS}: $(grep -m1 -i 'vkh2o-info:\|error' "$OUT/info.txt" || tail -1 "$OUT/info.txt")"
    fi
    cat "$OUT/info.txt"
    local chosen driver
    chosen=$(sed -n 's/^chosen: //p' "$OUT/info.txt")
    # the chosen device's "type" and "driver" rows: "TYPE<tab>DRIVER"
    chosen_type=$(awk '/^  \[[0-9]+\] /{name=substr($0, index($0, "] ") + 2)}
                       /^    type /{sub(/^    type +/, ""); types[name]=$0}
                       /^    driver /{sub(/^    driver +/, ""); drv[name]=$0}
                       /^chosen: /{sub(/^chosen: /, ""); print types[$0] "\t" drv[$0]}' "$OUT/info.txt")
    driver=${chosen_type#*$'\t'}
    chosen_type=${chosen_type%%$'\t'*}
    echo "gpu-check: the device: ${chosen:-unknown} (type ${chosen_type:-unknown}, driver ${driver:-unknown})"
    if [ "$chosen_type" = CPU ] && [ "$ALLOW_CPU" != 1 ]; then
        echo "gpu-check: FAILED: the device is a CPU (lavapipe?), not a GPU; is the GPU's Vulkan ICD installed and visible" >&2
        echo "           (VK_ICD_FILENAMES / VK_DRIVER_FILES)? Pass --allow-cpu to run on a CPU device anyway." >&2
        exit 1
    fi

    run_conf() {   # run_conf NAME ARGS...: vkh2o-conformance with its JSON in OUT/NAME.json, output in OUT/NAME.txt
        local name=$1; shift
        step "$name: vkh2o-conformance $*"
        if ! "$BIN/vkh2o-conformance" --quiet --json "$OUT/$name.json" "$@" > "$OUT/$name.txt" 2>&1; then
            tail -40 "$OUT/$name.txt"
            die "FAILED: $name (full output: $OUT/$name.txt)"
        fi
        tail -1 "$OUT/$name.txt"
    }
    # every case, both shape sets (the CPU shapes are NOT_SUPPORTED on a GPU), validation layer
    # on; on a CPU device (CI's lavapipe runs, where the whole registry ran at three subgroup
    # widths before) the decode and model-session ops only, which keeps the step short
    local only=()
    [ "$chosen_type" = CPU ] && only=(-o 'mla.decode,lm.session')
    VKH2O_VALIDATION=1 run_conf conformance-test --mode test --shapes all "${only[@]}"
    # the shapes this device's kernels take, timed against the roofline
    local perf_shapes=gpu
    [ "$chosen_type" = CPU ] && perf_shapes=cpu
    run_conf conformance-perf --mode perf --shapes "$perf_shapes" "${only[@]}"

    run() {   # run NAME CMD...: stdout to OUT/NAME, stderr to OUT/NAME.err
        local name=$1; shift
        step "$name: $*"
        if ! "$@" > "$OUT/$name" 2> "$OUT/$name.err"; then
            cat "$OUT/$name.err" >&2
            die "FAILED: $name"
        fi
    }
    # the decode step (BF16 / FP8) and the per-policy costs at 4096 kept tokens, and the one KV
    # cache's decode step per precision beside the H2O cache; on a CPU device (CI's lavapipe run)
    # shorter caches and fewer runs keep the step bounded (the full grid is for GPUs)
    if [ "$chosen_type" = CPU ]; then
        run bench-decode.json "$BIN/vkh2o-bench" --json --decode --policy-cost --cache-len 1024 --runs 2
        run bench-kv-decode.json "$BIN/vkh2o-bench" --json --kv-decode --cache-len 256 --runs 1
    else
        run bench-decode.json "$BIN/vkh2o-bench" --json --decode --policy-cost --cache-len 4096
        run bench-kv-decode.json "$BIN/vkh2o-bench" --json --kv-decode --cache-len 4096
    fi

    local tests_failed=0
    [ -z "$TESTS" ] || run_suites || tests_failed=1

    step "summary"
    {
        echo "# gpu-check on $chosen"
        echo
        if command -v python3 > /dev/null; then
            python3 "$PY/conformance-table.py" "$OUT/conformance-test.json" "$OUT/conformance-perf.json"
            echo "### The decode benchmarks"
            echo
            python3 "$PY/perf-tables.py" "$OUT/bench-decode.json" "$OUT/bench-kv-decode.json"
        else
            echo "No python3 on this machine: the tables were not made. Elsewhere, from this folder:"
            echo "python3 conformance-table.py conformance-test.json conformance-perf.json;"
            echo "python3 perf-tables.py bench-decode.json bench-kv-decode.json (both in $PY)."
        fi
        [ ! -f "$OUT/tests/summary.txt" ] || { echo; echo "### The test suites (--tests '$TESTS')"; echo; cat "$OUT/tests/summary.txt"; }
    } > "$OUT/summary.md"
    cat "$OUT/summary.md"
    total=$(( $(date +%s) - t0 ))
    step "done in $total s: summary.md, the JSON and the logs in $OUT"
    [ "$chosen_type" = CPU ] || [ "$total" -le 480 ] || [ -n "$TESTS" ] || echo "gpu-check: note: $total s, over the 8 minutes this check should take on a GPU" >&2
    ls -l "$OUT"
    [ "$tests_failed" = 0 ] || die "FAILED: test suites (see $OUT/tests/summary.txt)"
}

# run_suites: each cmocka suite in TESTBIN whose name matches TESTS, as ctest runs it (device
# required, validation on in the suites themselves), the tools they call linked into a scratch
# folder in OUT (VKH2O_BUILD_DIR, also where they make their scratch files)
run_suites() {
    local work=$OUT/tests/work t name rc failed=0 n=0 s0
    mkdir -p "$work"
    for t in "$BIN"/vkh2o-*; do ln -sf "$t" "$work/"; done
    : > "$OUT/tests/summary.txt"
    for t in "$TESTBIN"/test_*; do
        [ -f "$t" ] && [ -x "$t" ] || continue
        name=$(basename "$t")
        printf '%s\n' "$name" | grep -Eq -- "$TESTS" || continue
        n=$((n + 1)); s0=$(date +%s)
        step "suite $name"
        rc=0
        (cd "$work" && VKH2O_REQUIRE_DEVICE=1 VKH2O_BUILD_DIR="$work" VKH2O_SOURCE_DIR="$DATA" \
            timeout 900 "$t") > "$OUT/tests/$name.txt" 2>&1 || rc=$?
        if [ "$rc" = 0 ]; then
            echo "$name: ok ($(( $(date +%s) - s0 )) s)" | tee -a "$OUT/tests/summary.txt"
        else
            echo "$name: FAILED (exit $rc, $(( $(date +%s) - s0 )) s; output: $OUT/tests/$name.txt)" | tee -a "$OUT/tests/summary.txt"
            tail -20 "$OUT/tests/$name.txt"
            failed=1
        fi
    done
    [ "$n" -gt 0 ] || { echo "--tests '$TESTS' matched no suite in $TESTBIN" | tee -a "$OUT/tests/summary.txt"; failed=1; }
    return $failed
}

case "$MODE" in
    prepare) prepare ;;
    prebuilt)
        prebuilt_env
        BIN=$PREP/bin; TESTBIN=$PREP/tests; DATA=$PREP/data; PY=$PREP/scripts
        run_check ;;
    check)
        source_root
        BUILD=${BUILD_DIR:-build-gpu-check}
        export JOBS=${JOBS:-$(nproc)}
        mkdir -p "$OUT" || die "cannot create $OUT"
        build_release "$OUT/build.log"
        BIN=$(cd "$BUILD" && pwd); TESTBIN=$BIN; DATA=$PWD; PY=$PWD/scripts
        run_check ;;
esac
