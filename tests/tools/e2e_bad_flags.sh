#!/usr/bin/env bash
# Every bad flag of every tool refused (issue 12, item 4), table-driven: for each flag of
# vkh2o-demo, -validate, -quant, -bench, -info, -conformance, -mkshard and -eval, the bad values its kind admits
# (missing, non-numeric, negative, zero, huge, out of range, repeated; bad choices; non-existent,
# unreadable, directory and special-file inputs; outputs that cannot be written, name an input
# or another output; budgets larger than the sequence; sequence lengths 0 and 1; flags that do
# not apply to the run, such as a policy's flag without that policy), plus unknown flags and
# stray arguments. Every case must:
#   - exit non-zero (and not by the timeout),
#   - print exactly one line on stderr, naming the flag,
#   - leave no file behind (the output directory stays empty, no temporary anywhere),
#   - modify no input (every input file's size, modification time and inode after each case,
#     and their checksums after the last case, the same as before the first).
# Cases that need an unprivileged user (unreadable input, unwritable directory) run as nobody
# through setpriv when the test runs as root, and are skipped (and counted) when that is not
# possible. The per-tool counts are printed at the end.
# The inputs and outputs live in a scratch folder that nobody can reach (a temporary folder,
# mode 755, files 644), not in the build tree: a clone under a folder other users cannot enter
# (a home directory of mode 750 or 700) would otherwise refuse nobody the inputs themselves; the
# tools nobody runs are copied there too. Without such a folder those cases are skipped.
set -uo pipefail
umask 022
bin=${1:-${VKH2O_BUILD_DIR:-.}}
bin=$(cd "$bin" && pwd)
SRC=${VKH2O_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
fail() { echo "FAIL: $*" >&2; exit 1; }

# unprivileged runs: as nobody when root (root reads and writes through any mode bits)
ASUSER=()
unpriv=1
why="the unprivileged cases need setpriv (running as root)"
if [ "$(id -u)" = 0 ]; then
    if command -v setpriv > /dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2> /dev/null; then
        ASUSER=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    else
        unpriv=0
    fi
fi
# the scratch folder: the first temporary folder nobody can enter, else the build tree
T=
for d in ${TMPDIR:+"$TMPDIR"} /tmp /var/tmp /dev/shm; do
    T=$(mktemp -d "$d/e2e_bad_flags.XXXXXX" 2> /dev/null) || { T=; continue; }
    chmod 755 "$T"
    [ ${#ASUSER[@]} = 0 ] || "${ASUSER[@]}" test -x "$T" || { rmdir "$T"; T=; continue; }
    break
done
if [ -z "$T" ]; then
    T=$(mktemp -d "$bin/e2e_bad_flags.XXXXXX") || fail "no scratch folder"
    chmod 755 "$T"
    if [ ${#ASUSER[@]} -gt 0 ] && ! "${ASUSER[@]}" test -x "$T"; then
        unpriv=0
        why="no temporary folder nobody can enter, and nobody cannot reach the build tree $bin"
    fi
fi
trap 'chmod -R u+rwx "$T" 2>/dev/null; rm -rf "$T"' EXIT
IN=$T/in
OUT=$T/out
mkdir -p "$IN" "$OUT"
# the tools nobody runs, from the scratch folder (with the shared library of a shared build)
UBIN=$T/bin
mkdir "$UBIN"
cp "$bin"/libvkh2o.so* "$UBIN/" 2> /dev/null
[ ${#ASUSER[@]} = 0 ] || { chmod 777 "$OUT"; ASUSER+=(env "LD_LIBRARY_PATH=$UBIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"); }
[ $unpriv = 1 ] || echo "e2e_bad_flags: the unprivileged cases are skipped: $why"

# ---- inputs ----
"$bin/vkh2o-mkshard" --out "$IN/tiny.safetensors" --preset tiny --quiet || fail "mkshard of the input shard"
CFG=$IN/config.json
W=$IN/tiny.safetensors
# vkh2o-eval reads byte-level models: the committed one, copied so that its files are inputs
# whose checksums are compared like the others'
EW=$IN/tiny-mla
ET=$IN/heldout.txt
mkdir "$EW"
cp "$SRC/models/tiny-mla/config.json" "$SRC/models/tiny-mla/model.safetensors" "$EW/" || fail "copy of models/tiny-mla"
cp "$SRC/models/tiny-mla/heldout.txt" "$ET" || fail "copy of the held-out text"
mkdir "$IN/adir" "$IN/rodir"
chmod 555 "$IN/rodir"
mkfifo "$IN/fifo"
echo secret > "$IN/noread"
chmod 000 "$IN/noread"
NOFILE=$IN/does-not-exist
NODIR=$OUT/no-such-dir/x


# after each case the inputs' size, modification time (ns) and inode (one find: a checksum of
# every input per case was a fifth of this suite's time); their checksums after the last case
stats() { find "$IN" -type f ! -name noread -printf '%p %s %T@ %i\n' | sort; }
sums() { find "$IN" -type f -perm -u=r ! -name noread -exec md5sum {} + | sort; }
BEFORE=$(stats)
BEFORE_SUMS=$(sums)
declare -A COUNT SKIP

# case TOOL FLAG [--user] ARGS...: run TOOL ARGS in $OUT and check the four properties
case_() {
    local tool=$1 flag=$2
    shift 2
    local runner=() exe=$bin/$tool
    if [ "${1:-}" = --user ]; then
        shift
        if [ $unpriv = 0 ]; then
            SKIP[$tool]=$(( ${SKIP[$tool]:-0} + 1 ))
            return
        fi
        runner=("${ASUSER[@]}")
        if [ ${#ASUSER[@]} -gt 0 ]; then
            exe=$UBIN/$tool
            [ -e "$exe" ] || cp "$bin/$tool" "$exe" || fail "copy of $tool"
        fi
    fi
    local rc=0
    (cd "$OUT" && VKH2O_CACHE_DIR="$T/cache" timeout 120 "${runner[@]}" "$exe" "$@" > "$T/stdout" 2> "$T/stderr") || rc=$?
    local what="$tool $*"
    [ $rc -ne 0 ] || fail "$what: exit 0"
    [ $rc -ne 124 ] || fail "$what: timed out"
    # (bash's own reads and globs: this runs 747 times)
    local err left
    mapfile -t err < "$T/stderr"
    [ ${#err[@]} -eq 1 ] || { cat "$T/stderr" >&2; fail "$what: ${#err[@]} lines on stderr, expected 1"; }
    [[ "${err[0]}" == *"$flag"* ]] || { cat "$T/stderr" >&2; fail "$what: the message does not name $flag"; }
    left=$(shopt -s nullglob dotglob; echo "$OUT"/*)
    [ -z "$left" ] || { ls -la "$OUT" >&2; fail "$what: left files in the output directory"; }
    if find "$T" -name '*.tmp.*' | grep -q .; then fail "$what: left a temporary file"; fi
    [ ! -e "$T/cache" ] || fail "$what: made the synthetic shard"
    [ "$(stats)" = "$BEFORE" ] || fail "$what: modified an input"
    COUNT[$tool]=$(( ${COUNT[$tool]:-0} + 1 ))
}

# num TOOL FLAG LO HI BASE...: the integer cases of FLAG (range [LO, HI]) after BASE args. The
# full run (VKH2O_TEST_FULL=1) gives every flag every case; the default run every flag the missing,
# non-numeric and out-of-range values and one more case, turning from flag to flag, so that every
# case still meets many flags (they share one parser, cli_parse_u32/u64)
NUM_TURN=0
num() {
    local tool=$1 flag=$2 lo=$3 hi=$4
    shift 4
    local full=0 pick
    [ "${VKH2O_TEST_FULL:-0}" = 1 ] && full=1
    pick=$((NUM_TURN % 6)); NUM_TURN=$((NUM_TURN + 1))
    case_ "$tool" "$flag" "$@" "$flag"                       # missing value
    case_ "$tool" "$flag" "$@" "$flag" abc                   # non-numeric
    [ $full = 0 ] && [ $pick != 0 ] || case_ "$tool" "$flag" "$@" "$flag" 12x                   # trailing garbage
    [ $full = 0 ] && [ $pick != 1 ] || case_ "$tool" "$flag" "$@" "$flag" ""                    # empty
    [ $full = 0 ] && [ $pick != 2 ] || case_ "$tool" "$flag" "$@" "$flag" -1                    # negative
    [ $full = 0 ] && [ $pick != 3 ] && [ "$hi" != max ] ||
        case_ "$tool" "$flag" "$@" "$flag" 99999999999999999999999   # huge (the range's end when unbounded)
    [ "$hi" = max ] || case_ "$tool" "$flag" "$@" "$flag" $((hi + 1))   # above the range
    [ "$lo" -eq 0 ] || { [ $full = 0 ] && [ $pick != 4 ]; } || case_ "$tool" "$flag" "$@" "$flag" $((lo - 1))   # below it (0 when lo = 1)
    [ $full = 0 ] && [ $pick != 5 ] || case_ "$tool" "$flag" "$@" "$flag" "$lo" "$flag" "$lo"   # repeated
}
# choice TOOL FLAG GOOD BASE...: a value not among the choices, missing, repeated
choice() {
    local tool=$1 flag=$2 good=$3
    shift 3
    case_ "$tool" "$flag" "$@" "$flag"
    case_ "$tool" "$flag" "$@" "$flag" no-such-choice
    case_ "$tool" "$flag" "$@" "$flag" "$good" "$flag" "$good"
}
# input TOOL FLAG DIR_OK BASE...: input path cases
input() {
    local tool=$1 flag=$2 dir_ok=$3
    shift 3
    case_ "$tool" "$flag" "$@" "$flag"
    case_ "$tool" "$flag" "$@" "$flag" "$NOFILE"
    case_ "$tool" "$flag" "$@" "$flag" ""
    [ "$dir_ok" = 1 ] || case_ "$tool" "$flag" "$@" "$flag" "$IN/adir"
    [ "$dir_ok" = 0 ] || case_ "$tool" "$flag" "$@" "$flag" "$IN/adir"   # an empty directory is no checkpoint
    case_ "$tool" "$flag" "$@" "$flag" /dev/null
    case_ "$tool" "$flag" "$@" "$flag" "$IN/fifo"
    case_ "$tool" "$flag" --user "$@" "$flag" "$IN/noread"
}
# output TOOL FLAG INPUT BASE...: output path cases (INPUT: an input of the run it must not name);
# one more output that is fine (OKFLAG OKPATH, may be empty) shows that a refused output keeps the
# others from being written as well
output() {
    local tool=$1 flag=$2 inp=$3 okflag=$4
    shift 4
    local ok=()
    [ -z "$okflag" ] || ok=("$okflag" "$OUT/fine.out")
    case_ "$tool" "$flag" "$@" "$flag"
    case_ "$tool" "$flag" "$@" "${ok[@]}" "$flag" "$NODIR"
    case_ "$tool" "$flag" "$@" "${ok[@]}" "$flag" "$IN/adir"
    case_ "$tool" "$flag" "$@" "${ok[@]}" "$flag" /dev/null
    case_ "$tool" "$flag" "$@" "${ok[@]}" "$flag" "$IN/fifo"
    case_ "$tool" "$flag" "$@" "${ok[@]}" "$flag" ""
    [ -z "$inp" ] || case_ "$tool" "$flag" "$@" "${ok[@]}" "$flag" "$inp"
    [ -z "$okflag" ] || case_ "$tool" "$flag" "$@" "$okflag" "$OUT/same" "$flag" "$OUT/same"
    case_ "$tool" "$flag" --user "$@" "${ok[@]}" "$flag" "$IN/rodir/x"
    case_ "$tool" "$flag" "$@" "$flag" "$OUT/a" "$flag" "$OUT/b"
}
common() {   # unknown flags, stray arguments
    local tool=$1
    shift
    case_ "$tool" --frobnicate "$@" --frobnicate
    case_ "$tool" --frobnicate "$@" --frobnicate 3
    case_ "$tool" stray "$@" stray
}

# ---- vkh2o-demo (always given --weights: no synthetic shard is ever made) ----
D=(--weights "$W" --runs 1)
for f in --layer; do num vkh2o-demo $f 0 100000 "${D[@]}"; done
num vkh2o-demo --seq-len 1 1048576 "${D[@]}"
num vkh2o-demo --budget 0 16777216 "${D[@]}"
case_ vkh2o-demo --budget "${D[@]}" --budget 0
num vkh2o-demo --n-sink 0 16777216 "${D[@]}"
num vkh2o-demo --n-recent 0 16777216 "${D[@]}"
num vkh2o-demo --device 0 63 "${D[@]}"
case_ vkh2o-demo --device "${D[@]}" --device 9
num vkh2o-demo --seed 0 max "${D[@]}"
num vkh2o-demo --runs 1 1000 --weights "$W"
choice vkh2o-demo --layout latent "${D[@]}"
choice vkh2o-demo --kv int4 "${D[@]}"
case_ vkh2o-demo --kv "${D[@]}" --kv tiered                       # tiers by score need a byte budget: not a demo flag
case_ vkh2o-demo --kv "${D[@]}" --seq-len 8 --prefill 4 --check --kv int8   # --check's decode reference is fp16
input vkh2o-demo --weights 1 --runs 1
input vkh2o-demo --config 0 "${D[@]}"
input vkh2o-demo --input 0 "${D[@]}"
case_ vkh2o-demo --input "${D[@]}" --input "$W"            # a safetensors without hidden_states
case_ vkh2o-demo --cache-dir --cache-dir "$W" --runs 1
case_ vkh2o-demo --cache-dir "${D[@]}" --cache-dir
for f in --csv --json --out --plot; do
    ok=--csv; [ $f != --csv ] || ok=--plot
    output vkh2o-demo $f "$W" $ok "${D[@]}" --config "$CFG"
done
case_ vkh2o-demo --csv "${D[@]}" --config "$CFG" --csv "$CFG"
case_ vkh2o-demo --seq-len "${D[@]}" --csv "$OUT/ok.csv" --json "$OUT/ok.json" --seq-len 1    # fails after loading
case_ vkh2o-demo --budget "${D[@]}" --csv "$OUT/ok.csv" --seq-len 8 --budget 9               # budget > sequence
for f in --check --quiet --normed-input; do case_ vkh2o-demo $f "${D[@]}" $f $f; done
common vkh2o-demo "${D[@]}"

# ---- vkh2o-validate ----
V=(--steps 100 --quiet)
num vkh2o-validate --steps 2 100000000
num vkh2o-validate --budget 0 16777216 "${V[@]}"
case_ vkh2o-validate --budget "${V[@]}" --budget 0
case_ vkh2o-validate --budget --steps 10 --budget 11 --out-csv "$OUT/ok.csv"      # budget > sequence
for f in --n-sink --n-recent; do num vkh2o-validate $f 0 16777216 "${V[@]}"; done
num vkh2o-validate --layers 1 4096 "${V[@]}"
num vkh2o-validate --heads 1 512 "${V[@]}"
num vkh2o-validate --qk-dim 2 4096 "${V[@]}"
num vkh2o-validate --kv-lora 1 8192 "${V[@]}"
num vkh2o-validate --v-dim 1 4096 "${V[@]}" --layout expanded
case_ vkh2o-validate --v-dim "${V[@]}" --v-dim 64                             # the latent row has no V
case_ vkh2o-validate --kv-lora "${V[@]}" --layout expanded --kv-lora 64      # the expanded row has no c_kv
num vkh2o-validate --seed 0 4294967295 "${V[@]}"
num vkh2o-validate --device 0 63 "${V[@]}"
num vkh2o-validate --context 1 1073741824 --memory
num vkh2o-validate --batch 1 1000 "${V[@]}"
case_ vkh2o-validate --batch "${V[@]}" --batch 8 --check                        # --check runs every step
case_ vkh2o-validate --batch "${V[@]}" --batch 8 --out-csv "$OUT/ok.csv"         # so does --out-csv
choice vkh2o-validate --policy h2o "${V[@]}"
choice vkh2o-validate --score-mode mean "${V[@]}"
choice vkh2o-validate --kv int4 "${V[@]}"
choice vkh2o-validate --layout expanded "${V[@]}"
choice vkh2o-validate --storage fp32 "${V[@]}"
choice vkh2o-validate --model kimi --memory
case_ vkh2o-validate --budgets --memory --budgets 64,x
case_ vkh2o-validate --budgets --memory --budgets ""
case_ vkh2o-validate --budgets --memory --budgets
output vkh2o-validate --out-csv "" "" "${V[@]}"
for f in --check --quiet --memory --no-output --validation; do case_ vkh2o-validate $f "${V[@]}" $f $f; done
common vkh2o-validate "${V[@]}"

# ---- vkh2o-quant ----
Q=(--tokens 400 --heads 4 --quiet)
QW=(--weights "$W" --seq-len 64 --decode 2 --quiet)
QB=(--bench --bench-tokens 64 --quiet)
num vkh2o-quant --tokens 2 65536 --heads 4 --quiet
case_ vkh2o-quant --tokens --heads 4 --quiet --tokens 40          # no middle token past 16 sinks + 32 recents
num vkh2o-quant --decode 1 4096 "${Q[@]}"
num vkh2o-quant --heads 1 1024 --tokens 400 --quiet
num vkh2o-quant --sinks 0 65536 "${Q[@]}"
num vkh2o-quant --recents 0 65536 "${Q[@]}"
case_ vkh2o-quant --sinks "${Q[@]}" --sinks 400                   # sinks past the tokens
num vkh2o-quant --seed 0 4294967295 "${Q[@]}"
num vkh2o-quant --device 0 63 "${Q[@]}"
num vkh2o-quant --bench-tokens 64 65536 "${QB[@]}"
num vkh2o-quant --reps 1 1000 "${QB[@]}"
num vkh2o-quant --layer 0 100000 "${QW[@]}"
num vkh2o-quant --seq-len 2 65536 "${QW[@]}"
num vkh2o-quant --passes 1 100000 "${Q[@]}"
for v in "" abc 0 1025 int3=8 int4=0 int4= int4=8,int4=8 600; do case_ vkh2o-quant --group "${Q[@]}" --group "$v"; done
case_ vkh2o-quant --group "${Q[@]}" --group
for v in "" abc 0 101 nan 50,50 1; do case_ vkh2o-quant --byte-budgets "${Q[@]}" --byte-budgets "$v"; done
case_ vkh2o-quant --byte-budgets "${Q[@]}" --byte-budgets
choice vkh2o-quant --score-mode tova "${Q[@]}"
for v in "" abc 0 1 -0.5 1.5 nan inf; do case_ vkh2o-quant --decay "${Q[@]}" --score-mode decay --decay "$v"; done
case_ vkh2o-quant --decay "${Q[@]}" --score-mode decay --decay
case_ vkh2o-quant --decay "${Q[@]}" --score-mode decay --decay 0.5 --decay 0.5
case_ vkh2o-quant --decay "${Q[@]}" --score-mode tova --decay 0.5   # not the decay mode
choice vkh2o-quant --bench-configs int4 "${QB[@]}"
case_ vkh2o-quant --bench-configs "${QB[@]}" --bench-configs int4,int4
case_ vkh2o-quant --bench-configs "${QB[@]}" --bench-configs ""
choice vkh2o-quant --configs int4 "${Q[@]}"
case_ vkh2o-quant --configs "${Q[@]}" --configs int4,int4
case_ vkh2o-quant --configs "${Q[@]}" --configs ""
case_ vkh2o-quant --configs "${QB[@]}" --configs int4                  # --bench's rows are --bench-configs
# retired with the quantised cache: refused with the reason
for f in --block --budget --route-every --layout --bench-read --bench-policies --profile; do case_ vkh2o-quant $f "${Q[@]}" $f 1; done
# flags that do not apply to the run
case_ vkh2o-quant --seq-len "${Q[@]}" --seq-len 64
case_ vkh2o-quant --layer "${Q[@]}" --layer 1
case_ vkh2o-quant --heads "${QW[@]}" --heads 4
case_ vkh2o-quant --reps "${Q[@]}" --reps 3
case_ vkh2o-quant --bench-tokens "${Q[@]}" --bench-tokens 128
case_ vkh2o-quant --decode "${QB[@]}" --decode 4
case_ vkh2o-quant --kivi "${QB[@]}" --kivi
case_ vkh2o-quant --passes "${QB[@]}" --passes 3
case_ vkh2o-quant --csv "${QB[@]}" --csv "$OUT/b.csv"
case_ vkh2o-quant --weights --weights "$W" --bench
input vkh2o-quant --weights 1 --quiet
input vkh2o-quant --config 0 "${QW[@]}"
output vkh2o-quant --csv "$W" --json "${QW[@]}"
output vkh2o-quant --json "$W" --csv "${QW[@]}"
for f in --bench --kivi --quiet; do case_ vkh2o-quant $f "${Q[@]}" $f $f; done
common vkh2o-quant "${Q[@]}"

# ---- vkh2o-bench ----
num vkh2o-bench --device 0 63 --quick
case_ vkh2o-bench --device --quick --device 9
num vkh2o-bench --seq-len 1 65536 --quick
num vkh2o-bench --runs 1 1000 --quick
case_ vkh2o-bench --topk --quick --topk 5000                          # retired with the old cache's top-k kernel
for f in --json --quick --read --decode --policy-cost --kv-decode --scaling; do case_ vkh2o-bench $f --quick $f $f; done
num vkh2o-bench --cache-len 16 1048576 --quick --decode
num vkh2o-bench --scaling-max 1 1048576 --quick --scaling
case_ vkh2o-bench --cache-len --quick --cache-len 64                 # without --decode / --policy-cost
case_ vkh2o-bench --scaling-max --quick --scaling-max 64             # without --scaling
case_ vkh2o-bench --plot --quick --plot "$OUT/s.svg"                 # without --scaling
output vkh2o-bench --plot "" "" --quick --scaling --scaling-max 1
common vkh2o-bench --quick

# ---- vkh2o-info ----
num vkh2o-info --device 0 63
case_ vkh2o-info --device --device 9
for f in --validation --shaders; do case_ vkh2o-info $f $f $f; done
common vkh2o-info

# ---- vkh2o-conformance (every case is refused before a device is opened, except --device 9,
# refused once the loader has listed the devices) ----
C=(-o core.probe.cpu.fma.n1_i1 --shapes cpu)
num vkh2o-conformance --device 0 63 "${C[@]}"
case_ vkh2o-conformance --device "${C[@]}" --device 9
num vkh2o-conformance --seed 0 max "${C[@]}"
choice vkh2o-conformance --mode test "${C[@]}"
choice vkh2o-conformance --shapes cpu -o core.probe.cpu.fma.n1_i1
case_ vkh2o-conformance -o --shapes cpu -o
case_ vkh2o-conformance -o --shapes cpu -o ""
case_ vkh2o-conformance -o --shapes cpu -o no.such.op
case_ vkh2o-conformance -o --shapes cpu -o 'core.probe,*nothing*'
for v in "" 1 2/2 1/0 -1/2 a/b 1/2x 0/1001; do case_ vkh2o-conformance --shard "${C[@]}" --shard "$v"; done
case_ vkh2o-conformance --shard "${C[@]}" --shard 0/2 --shard 1/2
case_ vkh2o-conformance --shard -o core.probe.cpu.fma.n1_i1 --shapes cpu --shard 1/2   # one case: none in part 1
output vkh2o-conformance --json "" --csv "${C[@]}"
output vkh2o-conformance --csv "" --json "${C[@]}"
for f in --list --quiet --baseline; do case_ vkh2o-conformance $f "${C[@]}" $f $f; done
common vkh2o-conformance "${C[@]}"

# ---- vkh2o-mkshard ----
M=(--out "$OUT/m.safetensors" --quiet)
num vkh2o-mkshard --layers 1 1000 "${M[@]}"
num vkh2o-mkshard --seed 0 max "${M[@]}"
num vkh2o-mkshard --stats 1 65536 "${M[@]}"
choice vkh2o-mkshard --preset tiny "${M[@]}"
choice vkh2o-mkshard --dtype f16 "${M[@]}"
case_ vkh2o-mkshard --out --quiet
output vkh2o-mkshard --out "$W" --config-out --quiet
output vkh2o-mkshard --config-out "$CFG" "" "${M[@]}"
case_ vkh2o-mkshard --out --quiet --sharded --out "$W"           # --sharded needs a directory
for f in --embedding --sharded --force --no-q-lora --verify --quiet; do case_ vkh2o-mkshard $f "${M[@]}" $f $f; done
common vkh2o-mkshard "${M[@]}"

# ---- vkh2o-eval (every case is refused before a device is opened) ----
E=(--weights "$EW" --text "$ET" --quiet)
num vkh2o-eval --ctx 2 1048576 "${E[@]}"
case_ vkh2o-eval --ctx "${E[@]}" --ctx 4097                          # above max_position_embeddings (4096)
case_ vkh2o-eval --ctx "${E[@]}" --ctx 7 --sweep                     # the sweep's 12.5 % would hold no token
case_ vkh2o-eval --ctx "${E[@]}" --ctx 101 --passkey                 # shorter than the passkey prompt and answer
num vkh2o-eval --windows 1 max "${E[@]}"
num vkh2o-eval --trials 1 100000 "${E[@]}" --passkey
num vkh2o-eval --stream-trials 1 100000 "${E[@]}" --passkey --stream
num vkh2o-eval --recall-windows 1 100000 "${E[@]}" --recall
num vkh2o-eval --seed 0 max "${E[@]}"
for f in --n-sink --n-recent; do num vkh2o-eval $f 0 1048576 "${E[@]}" --policy h2o --budget 8; done
case_ vkh2o-eval --route-every "${E[@]}" --kv-quant balanced --route-every 16   # retired with the block cache
num vkh2o-eval --obs-window 1 4096 "${E[@]}" --passkey --policy snapkv --budget 8
num vkh2o-eval --pool-size 1 255 "${E[@]}" --passkey --policy snapkv --budget 8
case_ vkh2o-eval --pool-size "${E[@]}" --passkey --policy snapkv --budget 8 --pool-size 8   # even
num vkh2o-eval --bench-steps 1 100000 "${E[@]}" --bench
for v in "" abc 0 -1 12x 0% 200% % -5% nan%; do case_ vkh2o-eval --budget "${E[@]}" --policy h2o --budget "$v"; done
case_ vkh2o-eval --budget "${E[@]}" --policy h2o --budget
case_ vkh2o-eval --budget "${E[@]}" --policy h2o --budget 8 --budget 8
case_ vkh2o-eval --budget "${E[@]}" --policy h2o                     # an eviction policy needs one
case_ vkh2o-eval --budget "${E[@]}" --budget 8                       # the full cache takes none
case_ vkh2o-eval --budget "${E[@]}" --sweep --budget 8
# --budget F%: sinks + heavy hitters + recents within F % of --ctx; 25 % of 16 is 4 tokens, too few
# for 4 sinks + 16 recents, and 25 % of 128 too few for snapkv's 32-query window kept as recents
case_ vkh2o-eval --budget "${E[@]}" --ctx 16 --policy h2o --budget 25%
case_ vkh2o-eval --budget "${E[@]}" --passkey --ctx 128 --policy snapkv --budget 25%
for v in "" abc 0 1 -0.5 1.5 nan inf; do case_ vkh2o-eval --decay "${E[@]}" --policy h2o-decay --budget 8 --decay "$v"; done
case_ vkh2o-eval --decay "${E[@]}" --policy h2o-decay --budget 8 --decay
case_ vkh2o-eval --decay "${E[@]}" --policy h2o-decay --budget 8 --decay 0.5 --decay 0.5
num vkh2o-eval --n-protect 1 1048576 "${E[@]}" --policy h2o --budget 8 --n-recent 0
case_ vkh2o-eval --n-protect "${E[@]}" --policy h2o --budget 8 --n-protect 16        # not above the 16 recents
case_ vkh2o-eval --n-protect "${E[@]}" --policy snapkv --budget 8 --n-protect 20     # snapkv keeps its 32-token window as recents
case_ vkh2o-eval --n-protect "${E[@]}" --n-protect 40                                # the full cache evicts nothing
case_ vkh2o-eval --n-protect "${E[@]}" --sweep --n-protect 40
case_ vkh2o-eval --n-protect "${E[@]}" --bench --n-protect 40
case_ vkh2o-eval --n-protect "${E[@]}" --kv-quant balanced --n-protect 40
case_ vkh2o-eval --n-protect "${E[@]}" --policy h2o --budget 8 --n-protect 40 --n-protect 40
choice vkh2o-eval --policy h2o "${E[@]}" --budget 8
choice vkh2o-eval --kv-quant balanced "${E[@]}"
case_ vkh2o-eval --kv-quant "${E[@]}" --policy h2o --budget 8 --kv-quant balanced
case_ vkh2o-eval --kv-quant "${E[@]}" --ctx 29 --kv-quant aggressive     # 4 sinks + 16 recents + 10 middle tokens need 30
choice vkh2o-eval --pool max "${E[@]}" --passkey --policy snapkv --budget 8
# the one KV cache: --kv PREC, --bytes F% (of the FP16 cache's bytes), --tiers A,B,C,D, --byte-sweep
choice vkh2o-eval --kv int4 "${E[@]}"
for v in "" abc 0 25 0% 200% % -5% nan%; do case_ vkh2o-eval --bytes "${E[@]}" --policy h2o --kv int4 --bytes "$v"; done
case_ vkh2o-eval --bytes "${E[@]}" --policy h2o --bytes 25%                 # needs --kv
case_ vkh2o-eval --bytes "${E[@]}" --kv int4 --bytes 25%                    # the full cache evicts nothing
case_ vkh2o-eval --bytes "${E[@]}" --policy h2o --kv int4 --budget 8 --bytes 25%   # two capacities
case_ vkh2o-eval --bytes "${E[@]}" --policy h2o --kv int4 --bytes 25% --bytes 25%
case_ vkh2o-eval --bytes "${E[@]}" --policy h2o --kv int4 --bytes 0.5%      # too small for the sinks and recents
for v in "" 1,2 1,2,3,4 x,y,z 1,2,3x 5000,0,0; do case_ vkh2o-eval --kv-groups "${E[@]}" --policy h2o --kv int4 --bytes 25% --kv-groups "$v"; done
case_ vkh2o-eval --kv-groups "${E[@]}" --kv-groups 0,32,0                    # needs --kv
case_ vkh2o-eval --kv-groups "${E[@]}" --policy h2o --kv int4 --bytes 25% --kv-groups 0,100,0   # above kv_lora_rank 64
for v in "" 1 1,2,3 1,2,3,4,5 a,b,c,d 1,2,3,4x -1,2,3,4; do case_ vkh2o-eval --tiers "${E[@]}" --policy h2o --kv tiered --bytes 25% --tiers "$v"; done
case_ vkh2o-eval --tiers "${E[@]}" --kv tiered                                # tiered needs --tiers (pools) or --bytes (tiers by bytes)
case_ vkh2o-eval --tiers "${E[@]}" --policy h2o --kv int4 --bytes 25% --tiers 1,2,0,0
case_ vkh2o-eval --tiers "${E[@]}" --tiers 1,2,0,0                          # needs --kv
case_ vkh2o-eval --kv "${E[@]}" --kv int4 --kv-quant balanced
for f in --sweep "--policy h2o" "--budget 8" "--kv int4" --bench; do case_ vkh2o-eval --byte-sweep "${E[@]}" --byte-sweep $f; done
# --requant tier|original: a measurement mode of --kv tiered with two integer tiers or more
choice vkh2o-eval --requant original "${E[@]}" --policy h2o --kv tiered --bytes 25%
case_ vkh2o-eval --requant "${E[@]}" --requant original                                        # needs --kv tiered
case_ vkh2o-eval --requant "${E[@]}" --policy h2o --kv int4 --bytes 25% --requant original     # one integer tier
case_ vkh2o-eval --requant "${E[@]}" --policy h2o --kv tiered --bytes 25% --tier-set int8 --requant original
case_ vkh2o-eval --requant "${E[@]}" --policy h2o --kv tiered --budget 100 --tiers 1,0,0,0 --requant tier
case_ vkh2o-eval --requant "${E[@]}" --byte-sweep --requant original
case_ vkh2o-eval --requant "${E[@]}" --bench --requant tier
for v in "" x 0.5,2 -0.1 0.5,,1; do case_ vkh2o-eval --depths "${E[@]}" --passkey --depths "$v"; done
case_ vkh2o-eval --depths "${E[@]}" --passkey --depths
case_ vkh2o-eval --depths "${E[@]}" --passkey --depths 0.5 --depths 0.5
# flags that do not apply to the run: a policy's flag without that policy (with --sweep or
# --bench a flag applies when some row reads it), a mode's flag without the mode
case_ vkh2o-eval --decay "${E[@]}" --policy h2o --budget 8 --decay 0.5
case_ vkh2o-eval --route-every "${E[@]}" --route-every 4
case_ vkh2o-eval --bytes "${E[@]}" --policy h2o-pyramid --kv int4 --bytes 25%     # a schedule of tokens
for f in "--obs-window 8" "--pool avg" "--pool-size 9"; do
    case_ vkh2o-eval "${f% *}" "${E[@]}" --policy h2o --budget 8 $f
    case_ vkh2o-eval "${f% *}" "${E[@]}" $f
done
for f in --n-sink --n-recent; do
    case_ vkh2o-eval $f "${E[@]}" $f 2
    case_ vkh2o-eval $f "${E[@]}" --kv-quant fp16 $f 2
done
for f in "--kv-quant balanced" "--policy h2o" "--budget 25%" --sweep --passkey --recall --stream "--windows 2"; do
    case_ vkh2o-eval "${f% *}" "${E[@]}" --bench $f
done
for f in --csv --plot; do case_ vkh2o-eval $f "${E[@]}" --bench $f "$OUT/x"; done
case_ vkh2o-eval --text --weights "$EW" --quiet --bench
case_ vkh2o-eval --bench-steps "${E[@]}" --bench-steps 8
for f in "--trials 2" "--depths 0.5" --stream; do case_ vkh2o-eval "${f% *}" "${E[@]}" $f; done
case_ vkh2o-eval --windows --weights "$EW" --quiet --passkey --windows 2
case_ vkh2o-eval --stream-trials "${E[@]}" --passkey --stream-trials 2
case_ vkh2o-eval --recall-windows "${E[@]}" --recall-windows 2
case_ vkh2o-eval --recall --weights "$EW" --quiet --passkey --recall
case_ vkh2o-eval --recall "${E[@]}" --recall --ctx 32
input vkh2o-eval --weights 1 --text "$ET" --quiet
case_ vkh2o-eval --weights --weights "$W" --text "$ET" --quiet     # a layer shard: its config.json is no model's
input vkh2o-eval --text 0 --weights "$EW" --quiet
for f in --csv --json --plot; do
    ok=--csv; [ $f != --csv ] || ok=--json
    output vkh2o-eval $f "$ET" $ok "${E[@]}"
done
for f in --passkey --stream --sweep --byte-sweep --recall --bench --quiet; do case_ vkh2o-eval $f "${E[@]}" $f $f; done
common vkh2o-eval "${E[@]}"
[ "$(sums)" = "$BEFORE_SUMS" ] || fail "an input's checksum changed (sizes and times did not)"

total=0
for t in vkh2o-demo vkh2o-validate vkh2o-quant vkh2o-bench vkh2o-info vkh2o-conformance vkh2o-mkshard vkh2o-eval; do
    echo "e2e_bad_flags: $t: ${COUNT[$t]:-0} cases refused correctly${SKIP[$t]:+, ${SKIP[$t]} skipped (no unprivileged run)}"
    total=$((total + ${COUNT[$t]:-0}))
done
# the rest passed, but not every case ran: reported as skipped (ctest's SKIP_RETURN_CODE)
if [ $unpriv = 0 ]; then
    echo "SKIP: e2e_bad_flags: $total cases ok; $why"
    exit 77
fi
echo "e2e_bad_flags: ok ($total cases)"
